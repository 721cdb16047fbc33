"""The built site in a real headless Chromium: pages render without console errors, tables sort and filter, and
hostile records run no script.

Needs Debian's chromium (/usr/bin/chromium) and the ``playwright`` package (which is only used to drive that
browser; it never downloads one). Set NORMBENCH_UPDATE_SCREENSHOTS=1 to copy the screenshots to docs/screenshots/.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import test_site_support as sup

from normbench.site import build_site

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("NORMBENCH_CHROMIUM", "/usr/bin/chromium")
# The machine's network is closed; these keep Chromium from trying to reach it and from touching a real profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = ("index.html", "kernels.html", "models.html", "devices.html", "accuracy.html", "claims.html", "norms.html",
         "softmax.html", "methodology.html", "methodology/measurement.html", "downloads.html", "rejected.html")

pytestmark = pytest.mark.slow


def _skip_reason() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}: apt-get install -y chromium (scripts/test.sh installs it in CI)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed: pip install playwright (used only to drive Debian's chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="nb-chromium-") as profile, sync_playwright() as p:
        # A persistent context on a fresh directory is Playwright's way of passing --user-data-dir.
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=FLAGS, headless=True,
                                                   viewport={"width": 1360, "height": 900}, offline=True)
        try:
            yield ctx
        finally:
            ctx.close()


class Visit:
    """A page with its console errors, page errors and dialogs recorded."""

    def __init__(self, ctx):
        self.page = ctx.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("dialog", self._dialog)

    def _dialog(self, d):
        self.dialogs.append(d.message)
        d.dismiss()

    def open(self, path: Path):
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")
        # The script marks the document once it has wired up the tables.
        self.page.wait_for_function("document.documentElement.classList.contains('js')", timeout=5000)

    def close(self):
        self.page.close()


SHOOT = os.environ.get("NORMBENCH_UPDATE_SCREENSHOTS") == "1"


def _screens(site: Path, ctx, out: Path, pages, shoot=None) -> list[Path]:
    """Open each page (failing on any console error) and, with NORMBENCH_UPDATE_SCREENSHOTS=1, screenshot those in
    ``shoot`` (default: all) at a small size for docs/screenshots/."""
    v = Visit(ctx)
    shots = []
    try:
        for name in pages:
            v.open(site / name)
            assert v.page.locator("h1").count() == 1, name
            if not SHOOT or (shoot is not None and name not in shoot):
                continue
            shot = out / (name.replace("/", "-").replace(".html", ".png"))
            v.page.set_viewport_size({"width": 1000, "height": 640})
            v.page.screenshot(path=str(shot), type="png")
            v.page.set_viewport_size({"width": 1360, "height": 900})
            shots.append(shot)
        assert not v.errors, v.errors
    finally:
        v.close()
    return shots


def _keep(shots: list[Path], prefix: str) -> None:
    if SHOOT:
        dest = REPO / "docs" / "screenshots"
        dest.mkdir(parents=True, exist_ok=True)
        for s in shots:
            shutil.copyfile(s, dest / f"{prefix}{s.name}")


def _column(page, table: str, index: int) -> list[str]:
    return page.eval_on_selector_all(f"#{table} tbody tr:not([hidden])",
                                     f"rows => rows.map(r => r.cells[{index}].getAttribute('data-v'))")


_ROWS_JS = """([id, html]) => {
  const doc = html ? new DOMParser().parseFromString(html, "text/html") : document;
  return Array.from(doc.getElementById(id).tBodies[0].rows).map(tr => ({
    attrs: Array.from(tr.attributes).filter(a => a.name !== "hidden").map(a => [a.name, a.value]).sort(),
    cells: Array.from(tr.cells).map(td => ({
      text: td.textContent.trim().replace(/\\s+/g, " "), cls: Array.from(td.classList).sort().join(" "),
      v: td.getAttribute("data-v"),
      links: Array.from(td.querySelectorAll("a")).map(a => [a.getAttribute("href"), a.getAttribute("title"),
                                                             a.getAttribute("rel")]),
      spans: Array.from(td.querySelectorAll("span")).map(s => [s.className, s.getAttribute("title"), s.textContent]),
    })),
  }));
}"""


def _rows_as_data(page, table: str, html: str | None = None) -> list[dict]:
    """The rows of a table as data: the page's live rows, or (with ``html``) the rows written in that HTML."""
    return page.evaluate(_ROWS_JS, [table, html])


def _num(v) -> bool:
    try:
        return v is not None and float(v) == float(v)
    except ValueError:
        return False


def test_packed_rows_unpack_to_every_field(browser, demo_site):
    """Every field a cell can carry survives pack_rows and data_script's compression (Python) and the page script's
    decompression and unpacking (JavaScript)."""
    from normbench.site import tables

    cells = [tables.cell("plain"), tables.cell("3.1 GB/s", 3.123456789, title="IQR 2 %"),
             tables.cell("layernorm", "layernorm", href="norms/layernorm.html", note="eager", cls="best"),
             tables.cell("paper", href="https://arxiv.org/abs/1607.06450", ext=True),
             tables.cell("7", 7, flags=[("noisy", "noisy", "load 3.2 on 2 cores"), ("ε", "suspect", "above <x>")]),
             tables.cell("", None)]
    rows = [{"c": cells, "f": {"dtype": "bfloat16", "pass": "fwd"}, "k": "flagged"},
            {"c": [tables.cell("b")] * len(cells), "f": {"pass": "bwd"}, "k": ""}]
    v = Visit(browser)
    try:
        v.open(demo_site[0] / "site" / "kernels.html")
        got = v.page.evaluate("""async ([packed, n]) => {
          const t = document.createElement("table"); t.id = "nb-packed-test";
          t.innerHTML = "<thead><tr>" + "<th data-sort='num'></th>".repeat(n) + "</tr></thead><tbody></tbody>";
          document.body.appendChild(t);
          window.nbData("nb-packed-test", packed);   // a compressed payload: decoded asynchronously
          for (let i = 0; i < 200 && !t.getAttribute("data-loaded"); i++) await new Promise(r => setTimeout(r, 25));
          return Array.from(t.tBodies[0].rows).map(tr => ({
            k: tr.className, f: Object.fromEntries(Array.from(tr.attributes).filter(a => a.name.startsWith("data-f-"))
                                                   .map(a => [a.name.slice(7), a.value])),
            c: Array.from(tr.cells).map(td => ({
              t: (td.querySelector("a, span:not(.muted):not(.flag)") || td.firstChild || {textContent: ""}).textContent,
              v: td.getAttribute("data-v"), h: td.querySelector("a") && td.querySelector("a").getAttribute("href"),
              x: !!(td.querySelector("a") && td.querySelector("a").getAttribute("rel")),
              ti: (td.querySelector("a[title], span[title]:not(.flag)") || {getAttribute: () => null})
                    .getAttribute("title"),
              n: (td.querySelector("span.muted") || {textContent: null}).textContent,
              b: Array.from(td.querySelectorAll("span.flag")).map(s => [s.textContent, s.className, s.title]),
              k: Array.from(td.classList).filter(c => c !== "num").join(" ")}))}));
        }""", [json.loads("[" + tables.data_script("nbData", ("x",), tables.pack_rows(rows))
                              [len("window.nbData("):-len(");\n")] + "]")[-1], len(cells)])
    finally:
        v.close()
    assert [r["k"] for r in got] == ["flagged", ""]
    assert [r["f"] for r in got] == [{"dtype": "bfloat16", "pass": "fwd"}, {"pass": "bwd"}]
    for want, c in zip(cells, got[0]["c"]):
        assert c["t"] == want["t"] and c["h"] == want.get("h") and c["x"] == bool(want.get("x"))
        assert c["ti"] == want.get("ti") and c["n"] == want.get("n") and c["k"] == want.get("k", "")
        assert c["b"] == [[lab, f"flag flag-{f}", f"{f}: {why}"] for lab, f, why in want.get("b", [])]
        if isinstance(want.get("v"), float):
            assert float(c["v"]) == pytest.approx(want["v"], rel=1e-5)  # 6 significant digits
        else:
            assert c["v"] == (None if want.get("v") is None else str(want["v"]))
    assert [c["t"] for c in got[1]["c"]] == ["b"] * len(cells)
    # A string table makes repeated text cheap: the second row's cells are one small index each.
    assert json.dumps(tables.pack_rows(rows)["rows"][1][0]) == json.dumps([0 + tables.pack_rows(rows)["s"].index("b")]
                                                                          * len(cells))


def test_demo_site_renders_sorts_filters_and_pages(browser, demo_site, tmp_path):
    # The demo site (tests/conftest.py) pages 20 rows and its kernels table is "big": its page holds the first 10
    # rows, its data file all of them.
    site = demo_site[0] / "site"
    assert (site / "data" / "kernels.js").is_file()
    extra = ["norms/layernorm.html", "norms/groupnorm.html"] + [
        p.relative_to(site).as_posix() for p in sorted((site / "devices").glob("*.html"))
        + sorted((site / "accuracy").glob("*.html")) + sorted((site / "records").glob("*.html"))[:2]]
    v = Visit(browser)
    try:
        for name in PAGES + tuple(extra):
            v.open(site / name)
            assert v.page.locator("h1").count() == 1, name
        assert not v.errors, v.errors  # includes any Content-Security-Policy violation

        # Charts: the static SVG is in the page, and the script upgrades it (no error, no CSP violation).
        v.open(site / "norms" / "layernorm.html")
        assert v.page.locator("figure.nb-chart").count() == 4
        assert v.page.locator("figure.nb-chart svg").count() >= 4
        assert not v.errors, v.errors

        v.open(site / "kernels.html")
        table = v.page.get_attribute("table.sortable", "id")
        # The rows unpacked from the (packed) data file are the rows the template wrote into the page.
        inline = _rows_as_data(v.page, table, (site / "kernels.html").read_text(encoding="utf-8"))
        loaded = _rows_as_data(v.page, table)
        assert len(inline) == 10 and len(loaded) > len(inline)
        for a, b in zip(inline, loaded):
            assert [{k: x for k, x in c.items() if k != "v"} for c in a["cells"]] == [
                {k: x for k, x in c.items() if k != "v"} for c in b["cells"]]
            assert [c["v"] and float(c["v"]) for c in a["cells"] if _num(c["v"])] == pytest.approx(
                [c["v"] and float(c["v"]) for c in b["cells"] if _num(c["v"])], rel=1e-5)
            assert a["attrs"] == b["attrs"]
        heads = v.page.locator(f"#{table} thead th")
        labels = [heads.nth(i).inner_text().strip(" ↕▲▼") for i in range(heads.count())]
        gb = labels.index("GB/s")
        heads.nth(gb).locator("button").click()
        vals = [float(x) for x in _column(v.page, table, gb) if x]
        assert vals == sorted(vals) and len(vals) > 10
        assert v.page.get_attribute(f"#{table} thead th:nth-child({gb + 1})", "aria-sort") == "ascending"
        heads.nth(gb).locator("button").click()
        vals = [float(x) for x in _column(v.page, table, gb) if x]
        assert vals == sorted(vals, reverse=True)

        total = v.page.locator(f"#{table} tbody tr").count()
        assert total == int(v.page.get_attribute(f"#{table}", "data-rows"))  # every row, from the data file
        box = v.page.locator(f'.filters[data-table="{table}"]')
        # Long tables show their first rows and a button for the rest.
        assert total > 20 and v.page.locator(f"#{table} tbody tr:not([hidden])").count() == 20
        assert box.locator(".count").inner_text() == f"showing 20 of {total} rows"
        v.page.click(f'button[data-more-for="{table}"]')
        assert v.page.locator(f"#{table} tbody tr:not([hidden])").count() == total
        assert v.page.locator(f'button[data-more-for="{table}"]').is_hidden()
        box.locator('select[data-filter="dtype"]').select_option("bfloat16")
        box.locator('select[data-filter="pass"]').select_option("fwd+bwd")
        dt, ps = labels.index("dtype"), labels.index("pass")
        shown = v.page.locator(f"#{table} tbody tr:not([hidden])")
        assert 0 < shown.count() < total
        assert set(_column(v.page, table, dt)) == {"bfloat16"} and set(_column(v.page, table, ps)) == {"fwd+bwd"}
        assert f"{shown.count()} of {total} rows" in box.locator(".count").inner_text()
        # The view is in the URL: opening the permalink restores the filters.
        permalink = v.page.evaluate("location.hash")
        assert "dtype=bfloat16" in permalink and "pass=fwd%2Bbwd" in permalink
        n_filtered = shown.count()
        v.page.goto((site / "kernels.html").as_uri() + permalink)
        v.page.wait_for_function("document.documentElement.classList.contains('js')", timeout=5000)
        assert v.page.locator(f"#{table} tbody tr:not([hidden])").count() == n_filtered
        assert box.locator('select[data-filter="dtype"]').input_value() == "bfloat16"
        box.locator("input[data-search]").fill("rmsnorm")
        assert set(_column(v.page, table, labels.index("norm"))) == {"rmsnorm"}
        box.locator("input[data-search]").fill("")
        box.locator('select[data-filter="dtype"]').select_option("")
        box.locator('select[data-filter="pass"]').select_option("")
        assert v.page.locator(f"#{table} tbody tr:not([hidden])").count() == total

        # A row's record link leads to its machine's record page; the record's detail (the command that reproduces
        # it, config, metrics, provenance) loads on demand from the machine's data file (a <script>, from file://).
        href = v.page.get_attribute(f"#{table} tbody tr:not([hidden]) td:last-child a", "href")
        page, key = href.split("#")
        v.page.goto((site / page).as_uri() + "#" + key)
        v.page.wait_for_selector(f"details[id='{key}'] div.detail table", timeout=5000)
        assert v.page.evaluate("location.hash") == "#" + key
        assert v.page.evaluate(f"document.getElementById('{key}').open")
        detail = sup.record_details(site / page)[key]
        assert v.page.inner_text(f"details[id='{key}'] pre.command") == detail["command"]
        assert detail["command"].startswith("normbench bench --norm ")
        kv = v.page.inner_text(f"details[id='{key}'] div.detail")
        assert "Config" in kv and "Metrics" in kv and "Provenance" in kv and "dtype" in kv and "gbps" in kv
        assert detail["metrics"]["gbps"] in kv and detail["provenance"]["timestamp"] in kv
        loaded = v.page.evaluate("[...document.scripts].map(s => s.getAttribute('src')).filter(Boolean)")
        assert any(s.startswith("../data/machines/") for s in loaded), loaded
        # ... and the page links its records as validated (gzip-compressed JSON), this one among them.
        gz = v.page.get_attribute("a[href$='.json.gz']", "href")
        assert key in {r["id"] for p, r in sup.published(site) if p == (site / page).parent / gz}
        # Another machine's page, opened without a record in its URL, loads nothing until a record is opened.
        others = [p for p in sorted((site / "records").glob("*.html")) if p != site / page]
        assert others   # the demo has two machines
        v.open(others[0])
        assert not any("data/machines" in (s or "") for s in v.page.evaluate(
            "[...document.scripts].map(s => s.getAttribute('src'))"))
        first = v.page.locator("details.record").first
        rid = first.get_attribute("id")
        first.locator("summary").click()
        v.page.wait_for_selector(f"details[id='{rid}'] pre.command", timeout=5000)
        assert v.page.inner_text(f"details[id='{rid}'] pre.command") == sup.record_details(others[0])[rid]["command"]
        assert not v.errors, v.errors
    finally:
        v.close()
    _keep(_screens(site, browser, tmp_path, ("index.html", "norms/rmsnorm.html"),
                   shoot={"index.html", "norms/rmsnorm.html"}), "fixture-")


def test_hostile_records_run_no_script(browser, tmp_path):
    sup.write_hostile(tmp_path / "results")
    report = build_site(tmp_path / "results", tmp_path / "site")
    assert len(report.rejected) == 6
    site = tmp_path / "site"
    v = Visit(browser)
    try:
        for page in sorted(site.rglob("*.html")):
            v.open(page)
            # Fire the events payloads hang on at every element; nothing may set the marker or open a dialog.
            state = v.page.evaluate("""() => {
              for (const e of document.querySelectorAll('body *'))
                for (const t of ['mouseover', 'mouseenter', 'focus', 'load', 'error'])
                  e.dispatchEvent(new Event(t));
              return {
                pwned: typeof window.__pwned === 'undefined' ? null : String(window.__pwned),
                scripts: [...document.scripts].map(s => s.getAttribute('src') || ('inline:' + s.type)),
                handlers: [...document.querySelectorAll('*')].flatMap(
                    e => [...e.attributes].filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name)),
                jsLinks: [...document.querySelectorAll('[href],[src]')].map(e => e.getAttribute('href') ||
                    e.getAttribute('src')).filter(u => /^\\s*(javascript|data|vbscript):/i.test(u)),
                // vega-embed adds an empty <form class="vega-bindings"> per chart (for input bindings; none here).
                foreign: [...document.querySelectorAll('img, iframe, object, embed, base, form')].filter(
                    e => !(e.matches('form.vega-bindings') && !e.children.length)).length,
              };
            }""")
            assert state["pwned"] is None, (page, state)
            assert state["scripts"][0].endswith("assets/site.js"), (page, state)
            # ... or a record page's own data file (its records' detail, generated by the build).
            own = f"../data/machines/{page.stem}.js" if page.parent.name == "records" else None
            assert all("/assets/" in s or s.startswith("assets/") or s == "inline:application/json" or s == own
                       for s in state["scripts"]), (page, state)
            assert not state["handlers"] and not state["jsLinks"] and state["foreign"] == 0, (page, state)
        assert not v.dialogs, v.dialogs
        assert not v.errors, v.errors
        v.open(site / "norms" / "evilnorm.html")
        assert '<script>window.__pwned = "script"</script> Evil Norm' in v.page.inner_text("h1")
        v.open(site / "rejected.html")
        assert v.page.locator("table tbody tr").count() == 6
    finally:
        v.close()
    v = Visit(browser)
    try:
        path, rec = next((p, r) for p, r in sup.published(site) if r["config"].get("shape_label") == sup.CLOSE)
        key = next(k for k, d in sup.record_details(sup.page_of(path)).items() if d["rid"] == rec["id"])
        v.page.goto(sup.page_of(path).as_uri() + "#" + key)
        v.page.wait_for_selector(f"details[id='{key}'] pre.command", timeout=5000)
        # the hostile shape label, as text
        assert rec and v.page.locator("pre.command", has_text="</script><script>").count() == 1
        assert v.page.evaluate("typeof window.__pwned") == "undefined"
    finally:
        v.close()


def test_committed_results_render(browser, tmp_path, committed_results):
    # NORMBENCH_SITE_RESULTS points this at another results directory (e.g. a fresh `normbench bench` output); by
    # default the committed records, not the working tree's (the main job adds its own to it).
    results = Path(os.environ.get("NORMBENCH_SITE_RESULTS", committed_results))
    if not results.is_dir() or not any(results.rglob("*.json*")):
        pytest.skip(f"no result records in {results} yet")
    # Without the figures (the demo test checks them in the browser): drawing them is most of a build's time.
    report = build_site(results, tmp_path / "site", docs=REPO / "docs" if (REPO / "docs").is_dir() else None,
                        charts=False)
    site = tmp_path / "site"
    # Every device and task cell; norm pages (one template, ~40 of them: the demo test opens every page type) a
    # deterministic spread of 8; of the per-device figure pages the first; the first and the largest record page.
    norms = sorted((site / "norms").glob("*.html"))
    whole = [n for n in norms if "--" not in n.name]
    spread = whole[::max(1, len(whole) // 8)][:8]
    records = sorted((site / "records").glob("*.html"), key=lambda p: (-p.stat().st_size, p.name))
    pages = list(PAGES) + [p.relative_to(site).as_posix() for p in spread + [n for n in norms if "--" in n.name][:1]
                           + sorted((site / "devices").glob("*.html")) + sorted((site / "accuracy").glob("*.html"))
                           + records[:1] + sorted((site / "models").glob("*.html"))[:2]]
    _screens(site, browser, tmp_path, pages, shoot=set())
    assert report.records > 0


def test_by_model_pages_render_and_link_their_records(browser, tmp_path):
    """The "By model" index and a model's page (planted Llama 3.1 8B records) load without console errors; each grid
    cell shows best's status, and a record link lands on the record's section."""
    from normbench.results import write_records
    from normbench.site.bymodel import model_file

    write_records(sup.model_records(), tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    site = tmp_path / "site"
    page = model_file(sup.MODEL, sup.MODEL_HW)
    v = Visit(browser)
    try:
        v.open(site / "models.html")
        assert v.page.locator("#models tbody tr").count() >= 2   # float32 and bfloat16 sections, several models
        v.page.click(f"a[href^='{page}']")
        v.page.wait_for_load_state("load")
        assert v.page.locator("table.bm-grid").count() == 2
        cells = v.page.locator("table.bm-grid[data-dtype='float32'] td.bm")
        assert cells.count() == 4 * 7
        statuses = set(v.page.eval_on_selector_all("table.bm-grid td.bm", "tds => tds.map(t => t.dataset.status)"))
        assert {"winner", "tie", "undecided", "flagged", "missing", "only"} <= statuses
        assert v.page.locator("table.bm-est tr[data-total]").count() > 0
        href = v.page.get_attribute("td.bm-winner a.rec", "href")
        v.page.goto((site / page).parent.joinpath(href.split("#")[0]).resolve().as_uri() + "#" + href.split("#")[1])
        v.page.wait_for_function("document.documentElement.classList.contains('js')", timeout=5000)
        v.page.wait_for_selector(f"details[id='{href.split('#')[1]}'] pre.command", timeout=5000)
        assert v.page.locator(f"details[id='{href.split('#')[1]}'] pre.command").count() == 1
        assert not v.errors, v.errors
    finally:
        v.close()


def test_many_machines_pick_a_machine_on_a_models_page(browser, tmp_path, monkeypatch):
    """Many machines (``pages.MANY_MACHINES``): a model's one page, from file://, loads the machine the URL names and
    then the one picked, each from its compressed part, into a grid with best's statuses and working record links."""
    from normbench.results import write_records
    from normbench.site import pages
    from normbench.site.bymodel import model_hub_file
    from normbench.site.records import slug

    recs = sup.model_records_on((sup.MODEL_HW, "cpu-test-other"))
    write_records(recs, tmp_path / "results")
    monkeypatch.setattr(pages, "MANY_MACHINES", 1)
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    hub = tmp_path / "site" / model_hub_file(sup.MODEL)
    v = Visit(browser)
    try:
        v.page.goto(hub.resolve().as_uri() + f"#m={slug(sup.MODEL_HW)}")
        v.page.wait_for_selector("#nb-part table.bm-grid[data-dtype='float32']", timeout=5000)
        assert v.page.locator("#nb-part table.bm-grid[data-dtype='float32'] td.bm").count() == 4 * 7
        statuses = set(v.page.eval_on_selector_all("#nb-part td.bm", "tds => tds.map(t => t.dataset.status)"))
        assert {"winner", "tie", "undecided", "flagged", "missing", "only"} <= statuses
        v.page.select_option("#nb-part-pick", slug("cpu-test-other"))
        v.page.wait_for_selector(f"#nb-part[data-part*='{slug('cpu-test-other')}'] table.bm-grid", timeout=5000)
        assert v.page.evaluate("location.hash") == f"#m={slug('cpu-test-other')}"
        href = v.page.get_attribute("#nb-part td.bm a.rec", "href")
        assert href.startswith("../records/") and (hub.parent / href.split("#")[0]).is_file()
        assert not v.errors, v.errors
    finally:
        v.close()


def test_many_machines_load_a_machines_records_on_demand(browser, tmp_path, monkeypatch):
    """A three-machine site in the many-machine layout, from file://: a norm's page loads one machine's every record
    of the norm from the machine's data file when its button is clicked (only that machine's rows of that norm), and a
    row's record link opens the record's detail, loaded from the machine's record data file; the leaderboard loads
    every machine's file (the page holding its first rows)."""
    from normbench.site import tables

    monkeypatch.setattr(tables, "PREVIEW", 5)   # the leaderboard's 24 rows: 5 in the page, the rest from the files
    site, _, recs = sup.machines_site(tmp_path, charts=True)
    hw = "gpu-machine-1"
    want = {r["id"].replace(":", "_") for r in recs if r["provenance"]["hardware_id"] == hw
            and r["norm"]["name"] == "rmsnorm"}
    v = Visit(browser)
    try:
        v.open(site / "norms" / "rmsnorm.html")
        table = v.page.get_attribute("table.sortable", "id")
        loaded = lambda: v.page.evaluate("[...document.scripts].map(s => s.getAttribute('src')).filter(Boolean)")  # noqa: E731
        assert not any("/km-" in s for s in loaded())
        v.page.click(f"button[data-pick-src*='km-{hw}-']")
        v.page.wait_for_selector(f"#{table}[data-loaded='1']", state="attached", timeout=5000)
        assert any(f"/km-{hw}-" in s for s in loaded())
        if v.page.is_visible(f'button[data-more-for="{table}"]'):
            v.page.click(f'button[data-more-for="{table}"]')
        links = v.page.eval_on_selector_all(f"#{table} tbody tr td:last-child a",
                                            "as => as.map(a => a.getAttribute('href'))")
        assert {h.split("#")[1] for h in links} == want
        key = links[0].split("#")[1]
        v.page.click(f"#{table} tbody tr td:last-child a[href='{links[0]}']")   # to the record page, from file://
        v.page.wait_for_selector(f"details[id='{key}'] pre.command", timeout=5000)
        assert v.page.inner_text(f"details[id='{key}'] pre.command").startswith("normbench bench --norm rmsnorm ")
        # The leaderboard: every machine's file loaded, their union ordered as the page's own first rows were.
        v.open(site / "kernels.html")
        v.page.wait_for_selector("#kernels[data-loaded='1']", state="attached", timeout=5000)
        inline = _rows_as_data(v.page, "kernels", (site / "kernels.html").read_text(encoding="utf-8"))
        rows = _rows_as_data(v.page, "kernels")
        assert len(rows) == int(v.page.get_attribute("#kernels", "data-rows")) > len(inline) > 0
        assert [r["cells"][-1]["text"] for r in rows[:len(inline)]] == [r["cells"][-1]["text"] for r in inline]
        assert {r["cells"][0]["text"] for r in rows} == {f"gpu-machine-{m}" for m in range(3)}
        # A machine's figures page: the browser draws each figure from its spec (none was drawn at build time).
        figs = next((site / "devices").glob(f"{hw}-*--figures.html"))
        v.open(figs)
        ids = v.page.eval_on_selector_all("figure.nb-chart", "fs => fs.map(f => f.id)")
        assert ids and v.page.locator("figure.nb-chart .nb-static svg").count() == 0
        for fid in ids:
            v.page.wait_for_selector(f"figure[id='{fid}'].nb-interactive", timeout=15000, state="attached")
        assert v.page.locator("figure.nb-chart .nb-live svg").count() == len(ids)
        assert not v.errors, v.errors
    finally:
        v.close()


@pytest.mark.skipif(not os.environ.get("NORMBENCH_SITE_BROWSER_SITE"),
                    reason="set NORMBENCH_SITE_BROWSER_SITE=<a built site> to check a big site (e.g. the 100-machine "
                           "one of scripts/site_scale.py --machines 100 --dir DIR: DIR/100x1000/site)")
def test_a_big_site_serves_its_pages_and_loads_details_on_demand(browser):
    """A site built elsewhere (not in CI: a 100-machine site takes minutes to build), from file://: the overview, a
    norm's page (a machine's every record loaded by its button, where the norm is on many machines), a machine's page
    and a record's detail opened on demand, a model's answer on a machine picked on its page, all without a console
    error."""
    site = Path(os.environ["NORMBENCH_SITE_BROWSER_SITE"])
    v = Visit(browser)
    try:
        v.open(site / "index.html")
        hrefs = v.page.eval_on_selector_all("a[href^='norms/']", "as => as.map(a => a.getAttribute('href'))")
        norm = next(h for h in hrefs if "#" not in h and "--" not in h)
        v.open(site / norm)
        picks = v.page.locator("button[data-pick-src]")
        table = v.page.get_attribute("table.sortable", "id")
        if picks.count():
            picks.nth(picks.count() // 2).click()
            v.page.wait_for_selector(f"#{table}[data-loaded='1']", state="attached", timeout=30_000)
        link = v.page.get_attribute(f"#{table} tbody tr td:last-child a", "href")
        devices = sorted((site / "devices").glob("*.html"))
        v.open(devices[len(devices) // 2])
        assert v.page.locator("table.sortable tbody tr").count() > 0
        page, key = link.split("#")
        v.page.goto((site / "norms" / page).resolve().as_uri() + "#" + key)
        v.page.wait_for_selector(f"details[id='{key}'] pre.command", timeout=30_000)
        assert v.page.inner_text(f"details[id='{key}'] pre.command").startswith("normbench bench ")
        hubs = sorted(p for p in (site / "models").glob("*.html") if "--" not in p.name)
        if hubs:   # many machines: a model's one page loads the picked machine's answer
            v.open(hubs[0])
            values = v.page.eval_on_selector_all("#nb-part-pick option[data-part-src]", "os => os.map(o => o.value)")
            v.page.select_option("#nb-part-pick", values[len(values) // 2])
            v.page.wait_for_selector("#nb-part table.bm-grid", timeout=30_000)
        assert not v.errors, v.errors
    finally:
        v.close()
