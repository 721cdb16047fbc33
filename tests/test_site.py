"""The site without a browser: aggregation rules, safe HTML, and building from good, bad and hostile records."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import test_site_support as sup
from markupsafe import escape

from normbench.records.schema import make_record
from normbench.site import aggregate as agg
from normbench.site import build_site, markdown, tables
from normbench.site.fmt import fmt_bytes, fmt_gbps, fmt_time, safe_url
from normbench.site.records import Entry

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def esc(v) -> str:
    return str(escape(v))

# --- aggregation ----------------------------------------------------------------------------------------------------


def _entries(records):
    out = []
    for i, rec in enumerate(records):
        e = Entry(rec, "results/x.json", i)
        e.key = rec["id"]
        out.append(e)
    return out


def test_seeds_combine_only_when_everything_else_matches_and_divergence_counts_apart():
    recs = [sup.accuracy("layernorm", s, f) for s, f in enumerate((0.90, 0.92, 0.94))]
    recs.append(sup.accuracy("layernorm", 3, None, diverged=True))
    recs.append(sup.accuracy("layernorm", 0, 0.50, quick=True))  # another budget: its own cell
    recs.append(sup.accuracy("layernorm", 0, 0.70, hwid="cpu-other-4c"))  # another machine: its own cell
    cells = agg.accuracy_cells([agg.accuracy_row(e) for e in _entries(recs)])
    assert sorted(c.n for c in cells) == [1, 1, 4]
    main = next(c for c in cells if c.n == 4)
    assert main.final.mean == pytest.approx(0.92) and main.final.n == 3
    assert main.n_diverged == 1 and main.divergence_rate == pytest.approx(0.25)
    assert [r["seed"] for r in main.runs] == [0, 1, 2, 3]


def test_rank_cells_respects_metric_direction_and_puts_unfinished_last():
    recs = []
    for s in range(2):
        recs.append(sup.accuracy("layernorm", s, 0.91))
        recs.append(sup.accuracy("rmsnorm", s, 0.93))
        recs.append(sup.accuracy("dyt", s, None, diverged=True))
    ranked = agg.rank_cells(agg.accuracy_cells([agg.accuracy_row(e) for e in _entries(recs)]))
    assert [c.norm for c in ranked] == ["rmsnorm", "layernorm", "dyt"]
    ppl = [sup.accuracy(n, 0, v, metric="perplexity", higher=False, task="wikitext2", model="gpt")
           for n, v in (("layernorm", 30.0), ("rmsnorm", 25.0))]
    ranked = agg.rank_cells(agg.accuracy_cells([agg.accuracy_row(e) for e in _entries(ppl)]))
    assert [c.norm for c in ranked] == ["rmsnorm", "layernorm"]  # lower perplexity ranks first


def test_kernel_ranking_speedups_and_suspects():
    recs = [
        sup.kernel("layernorm", "eager", [512, 1024], 4e-4),
        sup.kernel("layernorm", "compile", [512, 1024], 2e-4),
        sup.kernel("rmsnorm", "eager", [512, 1024], 3e-4),
        sup.kernel("rmsnorm", "compile", [64, 256], 4.4e-6, suspect=True),
    ]
    rows = [agg.kernel_row(e) for e in _entries(recs)]
    agg.add_speedups(rows)
    by = {(r["norm"], r["backend"]): r for r in rows}
    assert by["layernorm", "compile"]["speedup"] == pytest.approx(2.0)
    assert by["layernorm", "eager"]["speedup"] == pytest.approx(1.0)
    assert by["rmsnorm", "compile"]["speedup"] is None  # no eager run of that shape
    first = agg.rank_by_bandwidth(rows)[0]
    assert (first["norm"], first["backend"]) == ("layernorm", "compile")
    assert agg.rank_by_bandwidth(rows)[-1]["suspect"]  # fastest-looking, but suspect: last
    assert all(not r["suspect"] for r in agg.best_by_bandwidth(rows, 5))
    assert [r["norm"] for r in agg.best_backend_per_norm(rows)] == ["layernorm", "rmsnorm"]


def test_pareto_front():
    pts = [(100, 0.90), (110, 0.92), (120, 0.91), (90, 0.85), (130, 0.93), (95, 0.84)]
    assert agg.pareto_front(pts) == [3, 0, 1, 4]
    assert agg.pareto_front([(1, 30.0), (2, 25.0), (3, 28.0)], higher_is_better=False) == [0, 1]


# --- safe HTML -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)",
                                 "java\tscript:alert(1)", "data:text/html,<script>", "vbscript:x", "//evil.com/x",
                                 "/relative", "https://", "http:/x", None, 5, "https://a.b/c d"])
def test_safe_url_refuses_everything_but_http_links(url):
    assert safe_url(url) is None


def test_safe_url_and_escaping():
    assert safe_url("https://arxiv.org/abs/1607.06450") == "https://arxiv.org/abs/1607.06450"
    assert esc('<a href="x">\'&') == "&lt;a href=&#34;x&#34;&gt;&#39;&amp;"
    assert fmt_time(1.5e-5) == "15.0 µs" and fmt_time(2.5e-3) == "2.50 ms" and fmt_time(None) == "–"
    assert fmt_gbps(1234.0) == "1.23 TB/s" and fmt_gbps(12.345) == "12.3 GB/s"
    assert fmt_bytes(3 * 2**20) == "3.00 MiB"


def test_markdown_renders_structure_and_never_raw_html():
    md = ("# Title\n\nSome *text* with `code <b>` and a [paper](https://arxiv.org/abs/1) and a [bad](javascript:x)."
          "\n\n| a | b |\n|---|---|\n| <script>x</script> | 2 |\n\n- one\n- two\n\n"
          "```\n<script>alert(1)</script>\n```\n"
          "<img src=x onerror=alert(1)>\n")
    out = markdown.render(md, heading_offset=1)
    assert "<h2" in out and "<table" in out and "<ul>" in out and "<pre><code>" in out
    assert '<a href="https://arxiv.org/abs/1"' in out
    assert "javascript:" not in out.replace("javascript:x", "")  # shown as text only
    assert 'href="javascript' not in out
    assert "<script" not in out and "<img" not in out
    assert "&lt;script&gt;" in out and "<code>code &lt;b&gt;</code>" in out
    assert markdown.inline("**same `state_dict`**") == "<strong>same <code>state_dict</code></strong>"
    assert 'onmouseover="' not in markdown.inline('[x](https://a.b/`"onmouseover=1`)')
    assert "<h3>" in markdown.render("# a", heading_offset=2)


# --- building the site ----------------------------------------------------------------------------------------------


class _Audit(HTMLParser):
    """Collects what would let a page run script: script tags, on* attributes, non-http(s) links, inline styles."""

    def __init__(self):
        super().__init__()
        self.problems: list[str] = []
        self.scripts: list[dict] = []
        self.links: list[str] = []
        self.csp: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp.append(a.get("content") or "")
        if tag == "script":
            self.scripts.append(a)
            if "src" not in a and a.get("type") != "application/json":
                self.problems.append("inline <script> that would run (only application/json data blocks may be "
                                     "inline)")
        for k, v in attrs:
            if k.startswith("on"):
                self.problems.append(f"<{tag} {k}=...>")
            if k == "style":
                self.problems.append(f"<{tag} style=...> (CSP forbids inline styles)")
            if k in ("href", "src", "action", "formaction", "xlink:href") and v is not None:
                self.links.append(v)
                low = re.sub(r"[\s\x00-\x1f]", "", v).lower()
                if low.startswith(("javascript:", "data:", "vbscript:")):
                    self.problems.append(f"<{tag} {k}={v!r}>")
        if tag in ("iframe", "object", "embed", "base", "form", "img") and tag != "img":
            self.problems.append(f"<{tag}>")
        if tag == "img":
            self.problems.append("<img> (the site draws no images)")

    def handle_data(self, data):
        if "<script" in data.lower() and self.lasttag == "script":
            self.problems.append("a script block holds '<script'")


def audit(html: str) -> _Audit:
    a = _Audit()
    a.feed(html)
    return a


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def _filter_values(page: Path, table: str) -> list[dict]:
    """Each row's filter values of the table of ``page`` whose id starts with ``table``: from its data file when it
    has one (packed rows: ``normbench.site.tables.pack_rows``), else from the page's rows."""
    html = page.read_text()
    tag = re.search(rf'<table[^>]*id="{table}[^"]*"[^>]*>', html).group(0)   # ids end in a hash of the name
    m = re.search(r'data-src="([^"]+)"', tag)
    if m is None:
        body = html[html.index(tag):]
        body = body[:body.index("</table>")]
        return [dict(re.findall(r'data-f-(\w+)="([^"]*)"', tr)) for tr in re.findall(r"<tr[^>]*>", body)[1:]]
    out = []
    srcs = m.group(1).split()   # a norm's every-record table loads its per-device tables' files
    for src in srcs:
        data = tables.read_data_script((page.parent / src).read_text())[2]
        out += [(r[3] if len(r) > 3 else [], len(out) + k,
                 {data["fk"][j]: data["s"][i] for j, i in enumerate(r[1]) if i is not None})
                for k, r in enumerate(data["rows"])]
    if len(srcs) > 1:   # merged by each row's rank key, as assets/site.js does
        out.sort(key=lambda x: (x[0], x[1]))
    return [f for _, _, f in out]


def test_a_data_files_payload_is_compressed_and_reads_back_exactly():
    """``tables.data_script``: the payload (hostile text, lone surrogates, non-ASCII, numbers) reads back equal, the
    same data gives the same bytes, the file has no quote or markup besides its own, and repetitive rows shrink."""
    payload = {"s": ["</script><script>alert(1)</script>", "\ud800", "µs · ×", '"\\'], "rows": [[0, 1.5, None]] * 500}
    text = tables.data_script("nbData", ("kl-x",), payload)
    assert text == tables.data_script("nbData", ("kl-x",), payload)
    assert tables.read_data_script(text) == ("nbData", ["kl-x"], payload)
    assert re.fullmatch(r'window\.nbData\("kl-x","[A-Za-z0-9+/=]+"\);\n', text)
    assert len(text) < len(json.dumps(payload)) / 10
    with pytest.raises(ValueError, match="not a data file"):
        tables.read_data_script("alert(1)")


def _with_data(page: Path) -> str:
    """A page's HTML and the data files its big tables load (every row; links are JSON strings there)."""
    text = page.read_text()
    for srcs in re.findall(r'data-src="([^"]+)"', text):
        for src in srcs.split():
            text += json.dumps(tables.read_data_script((page.parent / src).read_text())[2])
    return text


def _script_srcs(a: _Audit) -> list[str]:
    return [s["src"] for s in a.scripts if "src" in s]


def test_build_writes_every_page_and_each_row_links_to_its_record(demo_site):
    root, report = demo_site
    site = root / "site"
    assert report.records == len(sup.demo_records()) and not report.rejected
    for name in ("index.html", "kernels.html", "devices.html", "accuracy.html", "claims.html", "norms.html",
                 "softmax.html", "methodology.html", "methodology/measurement.html", "downloads.html",
                 "rejected.html", "norms/layernorm.html", "norms/groupnorm.html", "assets/site.js", "assets/site.css",
                 "normbench-record.schema.json"):
        assert (site / name).is_file(), name
    # The downloads: a CSV and a Parquet file per device.
    hws = {r["provenance"]["hardware_id"] for r in sup.demo_records()}
    assert len(list((site / "downloads").glob("*.csv.gz"))) == len(list((site / "downloads").glob("*.parquet"))) \
        == len(hws) > 1
    # Every kernel record has a row, with a link to its page, in its norm's table.
    norms = "".join(_with_data(p) for p in (site / "norms").glob("*.html"))
    hrefs = set(re.findall(r'(?:href=)?"\.\./(records/[^"#]+\.html)#(k-[^"]+)"', norms))
    assert len(hrefs) == report.kernel
    for page, key in hrefs:
        # The record's section on its page, and the record in the page's JSON file.
        assert f'<details class="record" id="{key}">' in (site / page).read_text()
        recs = {r["id"]: r for p, r in sup.published(site) if sup.page_of(p) == site / page}
        assert recs[key]["kind"] == "kernel"
    # The leaderboard holds one row per case (device, norm, backend, dtype, pass, class): its best shape.
    assert (site / "data" / "kernels.js").is_file()  # the demo's leaderboard is "big" (see the fixture)
    kernels = _with_data(site / "kernels.html")
    # (the legacy record is not counted: its case has a ranked record)
    n_cases = len(set(re.findall(r'(?:href=)?"records/[^"#]+\.html#(k-[^"]+)"', kernels)))
    assert n_cases == 4 * 2 * 2 * 2 + 4 * 2 + 1
    acc = (site / "accuracy.html").read_text()
    assert "offline task" in acc and re.search(r"\d+\.\d+ % \[\d+\.\d+ %, \d+\.\d+ %\]", acc)  # mean [95 % CI]
    cells = sorted((site / "accuracy").glob("*.html"))
    assert len(cells) == 2
    seeds = "".join(c.read_text() for c in cells)
    assert len(set(re.findall(r'href="\.\./records/[^"#]+\.html#(a-[^"]+)"', seeds))) == report.accuracy
    assert "Measurement" in (site / "methodology" / "measurement.html").read_text()
    assert 'href="https://example.org"' in (site / "methodology" / "measurement.html").read_text()
    for page in _pages(site):
        html = page.read_text()
        a = audit(html)
        assert not a.problems, (page, a.problems)
        up = "../" * len(page.relative_to(site).parent.parts)
        srcs = _script_srcs(a)
        assert srcs[0] == up + "assets/site.js" and all(s.startswith(up + "assets/") for s in srcs), page
        assert len(a.csp) == 1 and "default-src 'none'" in a.csp[0] and "script-src 'self';" in a.csp[0]
        assert "style-src 'self';" in a.csp[0] and "unsafe-inline" not in a.csp[0]
        for link in a.links:  # no dangling relative links
            if not link.startswith(("http://", "https://", "#")):
                target = (page.parent / link.split("#")[0]).resolve()
                assert target.exists(), (page, link)


def test_kernel_views_per_norm_and_device_with_width_figures(demo_site):
    root, _ = demo_site
    site = root / "site"
    norm = (site / "norms" / "layernorm.html").read_text()
    # Per device, a GB/s and a %-of-ceiling figure against hidden size (static SVG plus its spec).
    assert norm.count('class="nb-chart"') == 4  # 2 devices x (GB/s, % of ceiling)
    assert "<svg" in norm and 'type="application/json"' in norm
    index = (site / "index.html").read_text()
    assert 'href="norms/layernorm.html"' in index  # overview -> norm page (figures of every device): one click
    # ... and each (norm, device) cell of the overview's matrix opens that device's figures, with the records.
    per_device = re.findall(r'href="(norms/layernorm--[^"]+\.html)"', index)
    assert len(per_device) == 2
    page = (site / per_device[0]).read_text()
    assert page.count('class="nb-chart"') == 2 and re.search(r'href="\.\./records/[^"#]+\.html#k-', page)
    devices = sorted((site / "devices").glob("*.html"))
    assert len(devices) == 2
    from normbench.site import charts

    devices_html = (site / "devices.html").read_text()
    assert 'href="norms/layernorm--devices.html"' in devices_html  # norms measured on both devices compared
    if hasattr(charts, "device_compare_chart"):
        assert 'class="nb-chart"' in (site / "norms" / "layernorm--devices.html").read_text()
    # The never-checked legacy record (the fastest-looking one) is marked and ranked after every checked one.
    kernels = _with_data(site / "norms" / "dyt.html")
    assert "unchecked (legacy)" in kernels and "suspect" in _with_data(site / "norms" / "rmsnorm.html")
    ranks = [f.get("ranked") for f in _filter_values(site / "norms" / "dyt.html", "kn-dyt")]
    assert ranks.count("flagged") == 1 and ranks.index("flagged") == len(ranks) - 1


def test_record_pages_show_the_reproducing_command(demo_site):
    root, _ = demo_site
    site = root / "site"
    recs = sup.published(site)
    p, k = next((p, r) for p, r in recs if r["kind"] == "kernel" and r["config"]["device"] == "cuda")
    detail = sup.record_details(sup.page_of(p))[k["id"]]
    c = k["config"]
    assert detail["command"].startswith(
        f"normbench bench --norm {k['norm']['name']} --backend {c['backend']} --shape-class {c['shape_class']} "
        f"--layout tokens --dtype {c['dtype']} --pass {c['pass']} --device cuda --timing cold")
    p, a = next((p, r) for p, r in recs if r["kind"] == "accuracy" and r["config"]["seed"] == 2)
    detail = sup.record_details(sup.page_of(p))[a["id"]]
    assert detail["command"].startswith(
        f"normbench train --norm {a['norm']['name']} --task {a['config']['task']} --model {a['config']['model']} "
        "--seeds 1 --seed-start 2")


def test_record_pages_detail_every_record_from_one_file_per_machine(demo_site):
    """One record page per machine (the demo has under 2,000 records a machine); each record's detail in the
    machine's data file is its record as published: config and metrics as text, its file and place, its run's
    provenance, its flags with their reasons."""
    from normbench.records.schema import INVALID_FLAGS
    from normbench.site.pages import _text

    root, _ = demo_site
    site = root / "site"
    recs = sup.published(site)
    hws = {r["provenance"]["hardware_id"] for _, r in recs}
    assert len(list((site / "records").glob("*.html"))) == len(hws) == len(list(
        (site / "data" / "machines").glob("*.js")))
    flagged = 0
    for p, r in recs:
        d = sup.record_details(sup.page_of(p))[r["id"]]
        assert d["rid"] == r["id"]
        assert d["config"] == {k: _text(v) for k, v in sup.flat2(r["config"])}
        assert d["metrics"] == {k: _text(v) for k, v in sup.flat2(r["metrics"]) if k != "curve"}
        prov = {k: _text(v) for k, v in sup.flat2(r["provenance"])}
        assert d["provenance"] == prov and d["provenance"]["hardware_id"] == r["provenance"]["hardware_id"]
        for f in r.get("flags") or []:
            assert f in {x[1] for x in d["flags"]}
        flagged += bool(d["flags"])
        assert d["status"] == (2 if any(x[1] in INVALID_FLAGS for x in d["flags"]) else 1 if d["flags"] else 0)
    assert flagged


def test_downloads_and_the_published_schema_hold_every_record(demo_site):
    import jsonschema
    import pandas as pd

    root, report = demo_site
    site = root / "site"
    # One CSV and one Parquet file per device: together, every record once; each file one device's.
    csvs = [pd.read_csv(p) for p in sorted((site / "downloads").glob("*.csv.gz"))]
    pqs = [pd.read_parquet(p) for p in sorted((site / "downloads").glob("*.parquet"))]
    assert all(df["hardware_id"].nunique() == 1 for df in csvs + pqs)
    import pyarrow.parquet as papq  # zstd-compressed columns (smaller and faster than the default snappy)
    assert {papq.ParquetFile(p).metadata.row_group(0).column(0).compression
            for p in (site / "downloads").glob("*.parquet")} == {"ZSTD"}
    csv, pq = pd.concat(csvs, ignore_index=True), pd.concat(pqs, ignore_index=True)
    assert len(csv) == len(pq) == report.records and csv["id"].is_unique
    published = [r for _, r in sup.published(site)]
    assert len(published) == report.records and set(pq["id"]) == {r["id"] for r in published}
    k = pq[pq["kind"] == "kernel"].set_index("id")
    some = next(r for r in published if r["kind"] == "kernel")
    assert k.loc[some["id"], "metrics.gbps"] == pytest.approx(some["metrics"]["gbps"])
    schema = json.loads((site / "normbench-record.schema.json").read_text())
    v = jsonschema.Draft202012Validator(schema)
    for rec in sup.demo_records() + sup.hostile_records():
        assert not list(v.iter_errors(rec))
    for bad in sup.invalid_records()[:3]:  # what validation rejects, the published schema rejects too
        assert list(v.iter_errors(bad))


def test_rebuild_replaces_the_site_and_refuses_foreign_directories(tmp_path):
    root = tmp_path
    sup.write_records([sup.kernel("layernorm", "eager", [64, 512], 2e-5)], root / "results")
    build_site(root / "results", root / "site", charts=False)
    stale = root / "site" / "norms" / "stale.html"
    stale.write_text("old")
    build_site(root / "results", root / "site", charts=False)
    assert not stale.exists()  # a rebuild leaves no page of a norm that is gone
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="refusing to replace"):
        build_site(root / "results", foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="would replace the results"):
        build_site(root / "results", root)
    with pytest.raises(FileNotFoundError, match="normbench bench"):
        build_site(tmp_path / "nothing", tmp_path / "out")


def test_hostile_and_invalid_records_are_escaped_reported_and_never_break_the_build(tmp_path, capsys):
    from normbench.cli import main

    sup.write_demo(tmp_path / "results")
    sup.write_hostile(tmp_path / "results")
    assert main(["site", "build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "site"),
                 "--no-charts"]) == 0
    out, err = capsys.readouterr()
    assert "6 rejected" in out and "site/index.html" in out
    assert "broken.json" in err and "invalid.json [0]" in err and "invalid.json [2]" in err
    site = tmp_path / "site"
    rejected = (site / "rejected.html").read_text()
    for what in ("broken.json", "invalid.json", "record.metrics is missing", "onerror", "levels deep"):
        assert what in rejected
    evil = site / "norms" / "evilnorm.html"
    assert evil.is_file()
    for page in _pages(site):
        html = page.read_text()
        a = audit(html)
        assert not a.problems, (page, a.problems)
        assert _script_srcs(a)[0].endswith("assets/site.js"), page
        assert "<script>window" not in html and "<svg onload" not in html and "<img" not in html
    text = evil.read_text()
    assert "&lt;script&gt;window.__pwned" in text  # shown as text, not run
    assert 'href="javascript' not in text and "link not shown" in text
    for page in (site / "records").glob("*.html"):  # the reproduce command quotes hostile values, escaped
        assert "&lt;/script&gt;" in page.read_text() or "evilnorm" not in page.read_text()
    assert main(["site", "build", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "site"),
                 "--strict", "--no-charts"]) == 1


def test_empty_results_still_build(tmp_path):
    (tmp_path / "results").mkdir()
    report = build_site(tmp_path / "results", tmp_path / "site", charts=False)
    assert report.records == 0 and "No results yet" in (tmp_path / "site" / "index.html").read_text()


def test_sparse_records_render(tmp_path):
    """Nulls wherever the schema allows them, a lone hidden size, an all-diverged cell, placements."""
    k = sup.kernel("layernorm", "eager", [64, 512], 2e-5, ceiling=None)
    k["metrics"].update(pct_of_ceiling=None, peak_mem_bytes=None, saved_bytes=None, err={})
    runs = [sup.accuracy("dyt", s, None, diverged=True, placement="pre", task="wikitext2", model="gpt",
                         metric="perplexity", higher=False, target=None) for s in range(2)]
    runs += [sup.accuracy("rmsnorm", s, 30.0 - s, placement=p, task="wikitext2", model="gpt", metric="perplexity",
                          higher=False, target=None) for s in range(3) for p in ("pre", "post")]
    for r in runs[:1]:
        r["metrics"]["curve"] = []
    sup.write_records([k] + runs, tmp_path / "results")
    report = build_site(tmp_path / "results", tmp_path / "site", charts=False)
    assert report.records == 9 and not report.rejected
    acc = (tmp_path / "site" / "accuracy.html").read_text()
    assert "no finished run" in acc and "2/2" in acc and "perplexity (lower is better)" in acc
    ranking = acc[acc.index('<table class="lb sortable " id="at-'):]
    assert ranking.index("rmsnorm") < ranking.index('norms/dyt.html">dyt')  # the diverged cell ranks last
    for page in _pages(tmp_path / "site"):
        assert not audit(page.read_text()).problems


def test_a_kernel_record_of_changed_code_is_marked_stale_and_never_ranked(tmp_path):
    # Two measurements of one case: the faster one was made by an earlier implementation of rmsnorm/compile (its
    # hash is not what today's sources give at its torch/Triton versions), the slower one by today's code.
    stale = sup.kernel("rmsnorm", "compile", [64, 512], 2e-5, ts="2025-11-20T10:00:00Z")
    stale = make_record("kernel", stale["norm"], stale["config"], stale["metrics"],
                        stale["provenance"], impl_hash="f" * 16, check=stale["check"])
    current = sup.kernel("rmsnorm", "compile", [64, 512], 4e-5)
    sup.write_records([stale, current], tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    page = tmp_path / "site" / "norms" / "rmsnorm.html"
    html = _with_data(page)
    assert ">stale code</span>" in html and "made by code that has since changed" in html
    assert "norm code changed (rmsnorm/compile: ffffffffffffffff" in html
    ranks = [f.get("ranked") for f in _filter_values(page, "kn-rmsnorm")]
    assert ranks == ["ranked", "flagged"]  # today's slower record ranks; the stale faster one does not
    index = (tmp_path / "site" / "index.html").read_text()
    assert "1 made by code that has since changed" in index


def test_accuracy_page_shows_divergence_ranks_it_first_and_lists_tuning_runs_apart(tmp_path):
    recs = [sup.accuracy("layernorm", s, 0.60 + 0.01 * s) for s in range(5)]
    # DyT has the best finished runs but diverged in 2 of 5 seeds: it ranks below LayerNorm, its failures shown.
    recs += [sup.accuracy("dyt", s, None if s < 2 else 0.90, diverged=s < 2) for s in range(5)]
    for s in range(2):
        t = sup.accuracy("layernorm", s, 0.99)
        t["config"]["recipe"] = dict(t["config"]["recipe"], lr=0.3)
        t["flags"], t["flag_reasons"] = ["tuning"], {"tuning": "learning-rate search"}
        t["id"] = "a-tuning-" + str(s)
        recs.append(t)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "acc.json").write_text(json.dumps(recs))
    report = build_site(tmp_path / "results", tmp_path / "site", charts=False)
    assert not report.rejected
    acc = (tmp_path / "site" / "accuracy.html").read_text()
    start = acc.index('id="at-')
    table = acc[start:acc.index("</table>", start)]
    assert table.index("norms/layernorm.html") < table.index("norms/dyt.html")
    assert re.search(r'class="num warn" data-v="0\.4">2/5<', table) and ">0/5<" in table
    assert "2 tuning runs" in acc and "never ranked" in acc
    cell = next((tmp_path / "site" / "accuracy").glob("*.html")).read_text()
    assert "Learning-rate search" in cell and ">0.3<" in cell  # the tuning runs' rate, listed apart
    assert "s0✗" in table  # a diverged seed is marked, not dropped
    # The tuning runs' 0.99 is in no ranked row: LayerNorm's row shows the mean of its five test-split seeds.
    assert "62.00 %" in table and "99.00 %" not in table


def test_claims_page_lists_every_claim_with_its_verdict_and_missing_runs(demo_site):
    from normbench.claims import CLAIMS

    root, _ = demo_site
    html = (root / "site" / "claims.html").read_text()
    for c in CLAIMS:
        assert esc(c.claim) in html
    assert html.count("<tr id=") == len(CLAIMS)
    assert "cannot decide yet" in html and "normbench sweep --tune --tasks synth-lm" in html
    assert 'href="https://arxiv.org/abs/1910.07467"' in html


def test_accuracy_rows_are_tested_against_the_tables_reference(tmp_path):
    ln = [5.0, 5.1, 4.9, 5.05, 4.95]
    dyt = [6.0, 6.3, 5.8, 6.1, 6.2]
    recs = [sup.accuracy("layernorm", s, v, metric="perplexity", higher=False, task="synth-lm", model="gpt",
                         placement="pre_ln", offline=True) for s, v in enumerate(ln)]
    recs += [sup.accuracy("dyt", s, v, metric="perplexity", higher=False, task="synth-lm", model="gpt",
                          placement="pre_ln", offline=True) for s, v in enumerate(dyt)]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "acc.json").write_text(json.dumps(recs))
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    acc = (tmp_path / "site" / "accuracy.html").read_text()
    from scipy import stats as st

    ratio = st.gmean(dyt) / st.gmean(ln)
    p = st.ttest_ind(np.log(dyt), np.log(ln), equal_var=False).pvalue
    assert f"×{ratio:.3f}" in acc and f"p {p:.1e}" in acc and ">reference<" in acc
    norm_page = (tmp_path / "site" / "norms" / "dyt.html").read_text()
    assert f"×{ratio:.3f}" in norm_page  # the norm's own page tests against the same reference


def test_accuracy_tables_and_cell_pages_are_one_per_machine(tmp_path):
    # The same cell on two machines: two tables, two cell pages, each ranking and plotting its own machine's seeds.
    kw = dict(metric="perplexity", higher=False, task="synth-lm", model="gpt", placement="pre_ln", offline=True)
    recs = [sup.accuracy("layernorm", s, 5.0 + s / 10, **kw) for s in range(3)]
    recs += [sup.accuracy("layernorm", s, 7.0 + s / 10, hwid="cpu-other-2c", **kw) for s in range(3)]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "acc.json").write_text(json.dumps(recs))
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    pages = sorted((tmp_path / "site" / "accuracy").glob("*.html"))
    assert len(pages) == 2
    here, there = sorted((p.read_text() for p in pages), key=lambda t: "cpu-other-2c" in t.split("</h1>")[0])
    assert "on cpu-test-cpu-9000-8c" in here.split("</h1>")[0] and "on cpu-other-2c" in there.split("</h1>")[0]
    assert "5.1" in here and "7.1" not in here and "7.1" in there and "5.1" not in there
    acc = (tmp_path / "site" / "accuracy.html").read_text()
    assert "synth-lm · gpt on cpu-test-cpu-9000-8c" in acc and "synth-lm · gpt on cpu-other-2c" in acc


def test_reproduce_command_is_built_from_the_config_and_quotes_every_value():
    import shlex

    from normbench.site.repro import command

    k = sup.kernel("layernorm", "compile", [512, 4096], 2e-4, dtype="bfloat16", pss="fwd+bwd")
    k["config"]["shape_label"] = sup.CLOSE
    argv = shlex.split(command(k))
    assert argv[:2] == ["normbench", "bench"] and argv[argv.index("--shape") + 1] == sup.CLOSE
    assert [argv[argv.index(o) + 1] for o in ("--norm", "--backend", "--dtype", "--pass")] == [
        "layernorm", "compile", "bfloat16", "fwd+bwd"]
    from normbench.train.loop import Run

    a = sup.accuracy("rmsnorm", 3, 0.9, placement="pre_ln", task="synth-lm", model="gpt", offline=True)
    a["config"]["recipe"] = Run(task="synth-lm", model="gpt", norm="rmsnorm").recipe().to_dict()
    plain = ["normbench", "train", "--norm", "rmsnorm", "--task", "synth-lm", "--model", "gpt", "--placement",
             "pre_ln", "--seeds", "1", "--seed-start", "3", "--device", "cpu"]
    assert shlex.split(command(a)) == plain
    # Overrides are recovered from the recorded recipe (records do not list them) ...
    a["config"]["recipe"] = Run(task="synth-lm", model="gpt", norm="rmsnorm",
                                recipe_overrides={"steps": 20, "lr": 0.01}).recipe().to_dict()
    assert shlex.split(command(a)) == plain + ["--steps", "20", "--lr", "0.01"]
    # ... and a recipe no option can give (the code changed since) says so, naming only plain words.
    a["config"]["recipe"]["warmup_steps"] = 7
    a["config"]["recipe"]["x\nrm -rf ~"] = 1
    a["provenance"]["git_commit"] = "0123456789abcdef0123"
    text = command(a)
    assert "\n" not in text and "rm -rf" not in text
    assert text.endswith("# the record's recipe differs from this normbench's in warmup_steps, (an unnamed field): "
                         "run it with git checkout 0123456789ab")
    a["config"]["lr_search"] = {"grid": [0.1, 0.3], "chosen": 0.3}  # a tuned run: the search chose its rate
    assert shlex.split(command(a))[:4] == ["normbench", "sweep", "--tune", "--norms"]
    assert "--lr" not in shlex.split(command(a))


def test_cli_starts_without_the_site_libraries():
    """`normbench bench` must run on an image with torch only (the GPU campaign): the CLI registers `site build`
    without importing Jinja2, markdown-it, Altair or vl-convert."""
    import subprocess
    import sys

    code = ("import sys; from normbench.cli import build_parser; build_parser().parse_args(['bench', '--list']); "
            "bad = sorted(m for m in ('jinja2', 'markdown_it', 'altair', 'vl_convert') if m in sys.modules); "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_parallel_build_writes_the_same_bytes_as_a_serial_one(demo_site, tmp_path):
    """Pages render in a process pool (``build._render_all``); the site is byte for byte the serial one (the build
    time in the footer aside). Run as fresh processes: a process that has drawn figures builds serially."""
    import subprocess
    import sys

    root, _ = demo_site
    outs = []
    for jobs in (1, 2):
        out = tmp_path / f"site-{jobs}"
        code = ("import sys; from normbench.site import build, tables; tables.INLINE_MAX = 30; tables.PREVIEW = 10;"
                "tables.PAGE_ROWS = 20; assert build._can_fork(); "
                f"build.build_site(sys.argv[1], sys.argv[2], docs=sys.argv[3], jobs={jobs})")
        subprocess.run([sys.executable, "-c", code, str(root / "results"), str(out), str(root / "docs")], check=True,
                       env={**os.environ, "PYTHONPATH": REPO_ROOT})
        outs.append(out)
    files = [sorted(p.relative_to(o).as_posix() for p in o.rglob("*") if p.is_file()) for o in outs]
    assert files[0] == files[1] and len(files[0]) > 50
    footer = re.compile(rb" on \d{4}-\d\d-\d\d \d\d:\d\d UTC")
    for rel in files[0]:
        a, b = ((o / rel).read_bytes() for o in outs)
        assert footer.sub(b"", a) == footer.sub(b"", b), rel


def test_many_machines_have_no_page_per_norm_and_machine(tmp_path):
    """Beyond ``MANY_MACHINES`` machines a norm has no page per machine: each machine's kernel records are in one data
    file (its rows for every norm, each linking its record's detail), which the norm's page loads per machine; the
    norm page keeps each machine's best results; a machine adds no file per norm. Its width figures are on the
    machine's one figures page (drawn in the browser), which the overview's matrix links per norm."""
    site, report, recs = sup.machines_site(tmp_path, charts=True)
    assert not report.rejected and report.kernel == len(recs)
    assert not [p.name for p in (site / "norms").glob("*--*.html") if not p.name.endswith("--devices.html")]
    assert not list((site / "data").glob("knd-*.js"))
    hws = sorted({r["provenance"]["hardware_id"] for r in recs})
    norms = sorted({r["norm"]["name"] for r in recs})
    for hw in hws:
        files = list((site / "data").glob(f"km-{hw}-*.js"))
        assert len(files) == 1, hw
        data = tables.read_data_script(files[0].read_text())[2]
        S, fk = data["s"], data["fk"]
        seen = {}
        for row in data["rows"]:
            f = {k: S[i] for k, i in zip(fk, row[1]) if i is not None}
            link = row[0][-1]
            href = S[link[2]]
            assert href.startswith("../records/") and "#" in href
            seen.setdefault(f["norm"], set()).add(href.split("#")[1])
        mine = [r for r in recs if r["provenance"]["hardware_id"] == hw]
        for n in norms:   # every record of the machine, once, under its norm
            keys = {r["id"].replace(":", "_") for r in mine if r["norm"]["name"] == n}
            assert seen.get(n, set()) == keys, (hw, n)
    # The leaderboard: one data file per machine (its best row per case, none of another machine's), loaded together
    kl = sorted((site / "data").glob("kl-*.js"))
    assert len(kl) == len(hws) and not (site / "data" / "kernels.js").exists()
    src = re.search(r'<table[^>]* id="kernels"[^>]*data-src="([^"]+)"', (site / "kernels.html").read_text())
    assert src and sorted(src.group(1).split()) == [f"data/{p.name}" for p in kl]
    cases = []
    for p in kl:
        data = tables.read_data_script(p.read_text())[2]
        S, fk = data["s"], data["fk"]
        for row in data["rows"]:
            f = {k: S[i] for k, i in zip(fk, row[1]) if i is not None}
            assert p.name.startswith(f"kl-{f['hardware']}-") and len(row) == 4   # its rank key orders the union
            cases.append(tuple(f[k] for k in ("hardware", "norm", "backend", "dtype", "pass", "shape_class",
                                              "layout", "timing", "harness")))
    assert len(cases) == len(set(cases))
    assert {c[:5] for c in cases} == {(r["provenance"]["hardware_id"], r["norm"]["name"], r["config"]["backend"],
                                       r["config"]["dtype"], r["config"]["pass"]) for r in recs}
    for n in norms:
        page = (site / "norms" / f"{n}.html").read_text()
        picks = re.findall(r'data-pick-src="\.\./(data/km-[^"]+\.js)"', page)
        assert sorted(picks) == sorted(p.relative_to(site).as_posix() for p in (site / "data").glob("km-*.js")
                                       if any(r["norm"]["name"] == n and p.name.startswith(
                                           "km-" + r["provenance"]["hardware_id"] + "-") for r in recs))
        assert f'data-only="norm={n}"' in page
        # the matrix links each norm on each machine to the norm's section of that machine's figures page, which
        # draws its width figures (in the browser) and links the machine's section of the norm's page
        m = re.search(rf'href="(devices/gpu-machine-0-[0-9a-f]+--figures\.html)#(f-{n}-[0-9a-f]+)"',
                      (site / "index.html").read_text())
        assert m, n
        figs = (site / m.group(1)).read_text()
        sec = figs[figs.index(f'<section id="{m.group(2)}">'):]
        sec = sec[:sec.index("</section>")]
        assert re.search(rf'href="\.\./norms/{n}\.html#d-gpu-machine-0-[0-9a-f]+"', sec)
        widths = {r["config"]["num_features"] for r in recs
                  if r["norm"]["name"] == n and r["provenance"]["hardware_id"] == "gpu-machine-0"}
        if len(widths) > 1:   # a curve: its spec is in the page (drawn in the browser), its points link records
            assert 'class="nb-spec"' in sec and 'data-static="none"' in sec and "../records/" in sec, n


def test_many_machines_overview_does_not_grow_with_the_machines(tmp_path, monkeypatch):
    """A many-machine site's overview shows the best ``TOP_MACHINES`` machines' top tables and the first rows of the
    matrix (a machine per row); every machine's row is in ``data/matrix.js``, which the devices page loads too."""
    from normbench.site import pages

    monkeypatch.setattr(pages, "TOP_MACHINES", 1)
    monkeypatch.setattr(tables, "DEEP_PREVIEW", 1)
    site, _, recs = sup.machines_site(tmp_path, n=3)
    index = (site / "index.html").read_text()
    tops = re.findall(r'<h3><a href="devices/([^"]+)\.html">', index)   # DRAM (and cache-resident) top tables
    assert 1 <= len(tops) <= 2 and len(set(tops)) == 1 and "2 more</a>" in index
    tag = re.search(r'<table[^>]* id="matrix"[^>]*>', index).group(0)
    assert 'data-src="data/matrix.js"' in tag and 'data-src="data/matrix.js"' in (site / "devices.html").read_text()
    body = index[index.index(tag):]
    assert body[:body.index("</table>")].count("<tr") == 2   # the header and the first machine
    data = tables.read_data_script((site / "data" / "matrix.js").read_text())[2]
    S = data["s"]
    machines = [S[row[0][0][0]] for row in data["rows"]]
    assert sorted(machines) == sorted({r["provenance"]["hardware_id"] for r in recs})
    norms = {r["norm"]["name"] for r in recs}
    assert all(len(row[0]) == 1 + len(norms) for row in data["rows"])
    assert f">{machines[0]}</a>" in body
