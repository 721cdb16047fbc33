"""The "By model" pages (``normbench.site.bymodel``): each cell is what ``normbench best`` answers on the same records
(checked against the CLI's own ``--json``), links to its records, and the norm-time estimate per implementation
choice is the sum the test computes from the planted times and Llama 3.1 8B's layer count."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import test_site_support as sup

from normbench import best
from normbench.cli import main
from normbench.results import write_records
from normbench.site import build_site
from normbench.site.bymodel import model_file

# Llama 3.1 8B's config.json: num_hidden_layers 32 (the catalog's source). Per forward pass: input_layernorm and
# post_attention_layernorm once per layer, the final norm once; the fused residual add + norm twice per layer.
LAYERS = 32
PLAIN = 2 * LAYERS + 1
FUSED = 2 * LAYERS
REGIMES = ["prefill-1x2048", "prefill-8x4096", "decode-1", "decode-8", "decode-32", "decode-128", "decode-256"]
SITES = ["input_layernorm", "post_attention_layernorm", "residual_add+norm", "norm (final)"]
TIME = re.compile(rb" on \d{4}-\d\d-\d\d \d\d:\d\d UTC")


class _Page(HTMLParser):
    """The grid cells and estimate rows of a model page, with their attributes, text and links."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells: dict[tuple, dict] = {}
        self.est: dict[tuple, dict] = {}
        self.ids: set[str] = set()
        self.links: list[str] = []
        self._table = self._tr = self._td = None
        self._code = False

    def _in(self, cls: str) -> bool:
        return self._table is not None and cls in (self._table.get("class") or "").split()

    def _est_key(self):
        t, r = self._table, self._tr or {}
        return (t["data-dtype"], t["data-pass"], self._in("bm-fused"), r.get("data-regime"), r.get("data-choice"))

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if self._td is not None:
                self._td["links"].append(a["href"])
        if tag == "table":
            self._table = a
        elif tag == "tr":
            self._tr = a
            if self._in("bm-est") and "data-regime" in a:
                self.est[self._est_key()] = {"total": float(a["data-total"]) if "data-total" in a else None,
                                             "text": []}
        elif tag == "td" and self._in("bm-grid"):
            self._td = {"status": a["data-status"], "choice": a["data-choice"], "title": a["title"], "command": "",
                        "links": []}
            key = (self._table["data-dtype"], self._table["data-pass"], self._tr["data-site"], a["data-regime"])
            self.cells[key] = self._td
        elif tag == "code" and "bm-cmd" in (a.get("class") or "").split():
            self._code = True

    def handle_endtag(self, tag):
        if tag == "td":
            self._td = None
        elif tag == "code":
            self._code = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._code and self._td is not None:
            self._td["command"] += data
        if self._in("bm-est") and self._est_key() in self.est:
            self.est[self._est_key()]["text"].append(data)


def parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("bymodel")
    write_records(sup.model_records(), root / "results")
    report = build_site(root / "results", root / "site", charts=False, jobs=1, cache=False)
    assert not report.rejected
    return root


def _best_json(results: Path, dtype: str, pass_: str, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["best", "--model", sup.MODEL, "--device", sup.MODEL_HW, "--dtype", dtype, "--pass", pass_,
                 "--results", str(results), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["answers"]


def test_every_cell_is_what_best_answers(planted, capsys):
    page = planted / "site" / model_file(sup.MODEL, sup.MODEL_HW)
    got = parse(page)
    # Two sections: the dtype x pass the records at the model's shapes hold.
    assert {(d, p) for d, p, _s, _r in got.cells} == {("float32", "fwd"), ("bfloat16", "fwd")}
    assert len(got.cells) == 2 * len(SITES) * len(REGIMES)
    by_id = {r["id"]: r for r in sup.model_records()}
    for dtype in ("float32", "bfloat16"):
        rows = _best_json(planted / "results", dtype, "fwd", capsys)
        assert len(rows) == len(SITES) * len(REGIMES)
        for r in rows:
            c = got.cells[(dtype, "fwd", r["site"], r["regime"])]
            assert c["status"] == r["status"], (r["site"], r["regime"])
            assert c["choice"] == (r.get("winner") or ", ".join(r.get("ties") or ())), (r["site"], r["regime"])
            assert c["title"] == best.describe(r)
            assert c["command"] == r.get("command", "")
            # each cell links to its records' anchors: every record of the evidence
            anchors = {h.rsplit("#", 1)[-1] for h in c["links"]}
            assert {rid.replace(":", "_") for rid in r.get("evidence", ())} <= anchors
            assert anchors <= {i.replace(":", "_") for i in by_id}


def test_planted_cells_winner_tie_flagged_missing_undecided(planted):
    got = parse(planted / "site" / model_file(sup.MODEL, sup.MODEL_HW)).cells

    def c(site, regime):
        return got[("float32", "fwd", site, regime)]

    for site in ("input_layernorm", "post_attention_layernorm", "norm (final)"):   # one shape: the same answers
        assert (c(site, "decode-8")["status"], c(site, "decode-8")["choice"]) == ("winner", "compile")
        assert "2.00x faster [1.82, 2.22] (paired, n=50)" in c(site, "decode-8")["title"]
        assert (c(site, "decode-1")["status"], c(site, "decode-1")["choice"]) == ("tie", "eager, compile")
        assert c(site, "decode-32")["status"] == "flagged"
        assert "--redo" in c(site, "decode-32")["command"]
        assert (c(site, "decode-128")["status"], c(site, "decode-128")["choice"]) == ("only", "eager")
        assert c(site, "decode-256")["status"] == "undecided"
        for regime in ("prefill-1x2048", "prefill-8x4096"):
            assert c(site, regime)["status"] == "missing"
            assert c(site, regime)["command"].startswith(f"normbench bench --model {sup.MODEL} --norm rmsnorm ")
    assert c("residual_add+norm", "decode-8")["status"] == "missing"
    assert (c("residual_add+norm", "decode-1")["status"], c("residual_add+norm", "decode-1")["choice"]) == (
        "only", "eager")


def test_the_estimate_sums_site_time_by_layer_count_and_never_a_partial_or_flagged_one(planted):
    est = parse(planted / "site" / model_file(sup.MODEL, sup.MODEL_HW)).est

    def e(regime, choice, fused=False, dtype="float32"):
        return est[(dtype, "fwd", fused, regime, choice)]

    # decode-8: every plain site measured by both backends (all share the (8, 1, 4096) shape)
    assert e("decode-8", "compile")["total"] == pytest.approx(10e-6 * PLAIN)
    assert e("decode-8", "eager")["total"] == pytest.approx(20e-6 * PLAIN)
    assert e("decode-8", "fastest per site")["total"] == pytest.approx(10e-6 * PLAIN)
    # ... and the fused add + norm site has no record: no total, and it says which site lacks data
    assert e("decode-8", "fastest per site", fused=True)["total"] is None
    assert "residual_add+norm: no record" in "".join(e("decode-8", "fastest per site", fused=True)["text"])
    # decode-1: a tie; the fastest per site is eager's 5.0 us; the fused site eager alone
    assert e("decode-1", "fastest per site")["total"] == pytest.approx(5.0e-6 * PLAIN)
    assert e("decode-1", "eager", fused=True)["total"] == pytest.approx(7e-6 * FUSED)
    # decode-128: compile's records are flagged, so compile has no total (never summed), eager does
    assert e("decode-128", "compile")["total"] is None
    text = "".join(e("decode-128", "compile")["text"])
    assert "input_layernorm: flagged noisy" in text and "norm (final): flagged noisy" in text
    assert e("decode-128", "eager")["total"] == pytest.approx(40e-6 * PLAIN)
    # decode-32: only flagged records: nothing has a total
    assert all(v["total"] is None for k, v in est.items() if k[3] == "decode-32")
    # a regime without records has only the "fastest per site" row, without a total
    assert [k[4] for k in est if k[:4] == ("float32", "fwd", False, "prefill-1x2048")] == ["fastest per site"]
    assert e("decode-8", "eager", dtype="bfloat16")["total"] == pytest.approx(15e-6 * PLAIN)


def _files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): TIME.sub(b"", p.read_bytes()) for p in site.rglob("*") if p.is_file()}


def test_pages_exist_link_correctly_and_build_the_same_in_parallel_and_from_the_cache(planted, tmp_path):
    site = planted / "site"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="models.html"' in index and ">By model<" in index
    models = parse(site / "models.html")
    target = model_file(sup.MODEL, sup.MODEL_HW)
    assert any(h.split("#")[0] == target for h in models.links)
    # Mistral 7B has Llama's hidden size: its rmsnorm sites share these records, so it has a page too.
    assert any(h.startswith("models/mistral-7b") for h in models.links)
    assert "normbench bench --model llama-3.1-70b" in (site / "models.html").read_text(encoding="utf-8")  # unmeasured
    # every link of a model page resolves: record anchors exist on their record pages
    page = parse(site / target)
    recs = [h for h in page.links if "records/" in h]
    assert recs
    for h in recs:
        path, _, anchor = h.partition("#")
        dest = (site / target).parent / path
        assert dest.is_file(), h
        assert anchor in parse(dest).ids, h
    for h in page.links:
        if not h.startswith(("#", "http")):
            assert ((site / target).parent / h.split("#")[0]).is_file(), h

    # the process pool writes the same bytes as one process; the cache reuses unchanged pages and re-renders a
    # model page whose record changed
    par = build_site(planted / "results", tmp_path / "par", charts=False, jobs=2, cache=False)
    assert _files(tmp_path / "par") == _files(site) and par.pages
    results, out = tmp_path / "results", tmp_path / "inc"
    write_records(sup.model_records(), results)
    build_site(results, out, charts=False, jobs=1)
    again = build_site(results, out, charts=False, jobs=1)
    assert set(again.rendered) <= {"index.html"}
    for p in results.rglob("*.json*"):
        p.unlink()
    write_records(sup.model_records(compile_8=11e-6), results)
    report = build_site(results, out, charts=False, jobs=1)
    assert target in report.rendered and any(x.startswith("models/mistral-7b") for x in report.rendered)
    est = parse(out / target).est
    assert est[("float32", "fwd", False, "decode-8", "compile")]["total"] == pytest.approx(11e-6 * PLAIN)
    build_site(results, tmp_path / "cold", charts=False, jobs=1, cache=False)
    assert _files(tmp_path / "cold") == _files(out)


def test_model_pages_are_safe_html_with_no_dangling_link(planted):
    from test_site import audit

    site = planted / "site"
    pages = [site / "models.html", *sorted((site / "models").glob("*.html"))]
    assert len(pages) > 2
    for page in pages:
        a = audit(page.read_text(encoding="utf-8"))
        assert not a.problems, (page, a.problems)
        for link in a.links:
            if not link.startswith(("http://", "https://", "#")):
                assert (page.parent / link.split("#")[0]).resolve().exists(), (page, link)


def test_many_machines_load_a_models_answer_per_machine_from_its_one_page(tmp_path, monkeypatch):
    """Beyond ``pages.MANY_MACHINES`` machines a model has one page (a machine picker) and each machine's answer is a
    compressed part it loads on demand: exactly what that machine's own page holds with few machines (whose cells
    test_every_cell_is_what_best_answers checks against ``best``), linked from the index with the machine picked."""
    from normbench.site import pages, tables
    from normbench.site.bymodel import model_hub_file, model_part_file, part_id
    from normbench.site.records import slug

    hws = (sup.MODEL_HW, "cpu-test-other")
    recs = sup.model_records_on(hws)
    write_records(recs, tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "few", charts=False)
    monkeypatch.setattr(pages, "MANY_MACHINES", 1)
    monkeypatch.setattr(tables, "INLINE_MAX", 1)   # the index's rows in its data file (1,800 rows at 100 machines)
    monkeypatch.setattr(tables, "PREVIEW", 1)
    build_site(tmp_path / "results", tmp_path / "many", charts=False)
    few, many = tmp_path / "few", tmp_path / "many"
    assert not list((many / "models").glob("*--*.html"))
    hub = (many / model_hub_file(sup.MODEL)).read_text()
    assert 'data-src="data/models.js"' in (many / "models.html").read_text()
    index = json.dumps(tables.read_data_script((many / "data" / "models.js").read_text())[2])
    for hw in hws:
        own = (few / model_file(sup.MODEL, hw)).read_text()
        call, args, html = tables.read_data_script((many / model_part_file(sup.MODEL, hw)).read_text())
        assert call == "nbPart" and args == [part_id(sup.MODEL, hw)]
        assert html.count('<td class="bm ') == own.count('<td class="bm ') > 0
        assert html.strip() in own   # the page's body, byte for byte (its links are relative to models/ too)
        assert f'data-part-src="../{model_part_file(sup.MODEL, hw)}"' in hub
        assert json.dumps(f"{model_hub_file(sup.MODEL)}#m={slug(hw)}") in index
