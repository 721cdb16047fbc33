"""Site charts in a real headless Chromium under the site's Content-Security-Policy: every figure turns into an
interactive vega-embed view with no console error and no CSP violation, keeps its points, shows the record on
hover, opens it on click, places scatter labels without overlap, and reads as static SVG with JavaScript off.

Reuses the browser set-up of tests/test_site_browser.py (Debian's chromium driven by playwright; skipped, with the
reason, where either is missing)."""

from __future__ import annotations

import importlib
import itertools
import re
import shutil

import pandas as pd
import pytest
from test_site_browser import Visit, browser  # noqa: F401  (the module-scoped Chromium fixture)
from test_site_charts import H1, H2, acc_df, kernel_df

pytest.importorskip("altair")
pytest.importorskip("vl_convert")

from normbench.site import charts as C  # noqa: E402

pytestmark = pytest.mark.slow


def site_csp() -> str:
    """The CSP the site's pages carry (normbench.site.build on the templated site, layout before it)."""
    for mod in ("normbench.site.build", "normbench.site.layout"):
        csp = getattr(importlib.import_module(mod), "CSP", None)
        if csp:
            return csp
    raise AssertionError("no CSP constant in normbench.site.build or normbench.site.layout")


METRIC = "top-1 \"'\\ " + H1
SCATTER = pd.DataFrame(dict(
    t=[100, 100.2, 100.1, 100.15, 99.9, 100.05, 100.12, 100.11, 100.13, 100.14],
    q=[70, 70.01, 70.02, 70.0, 70.03, 70.01, 70.02, 70.0, 70.01, 70.015],
    norm=["layernorm", "rmsnorm", "crmsnorm", "dyt", "derf", "scalenorm", H1, H2, "WWWWWWWWWW", "mmmmmmmm"],
    url=[f"records/s{i}.json" for i in range(10)]))


@pytest.fixture(scope="module")
def chart_page(tmp_path_factory):
    """A page holding one figure of each kind (hostile text in the kernel and scatter data), with the site's CSP,
    the vendored scripts and stylesheets, and the record files the marks link to."""
    out = tmp_path_factory.mktemp("charts-page")
    kernel = kernel_df(backends=("eager", H1))
    kernel["label"] = kernel["label"] + " " + H2
    kernel["url"] = [f"records/k{i}.json" for i in range(len(kernel))]
    figures = {
        "kw": C.render(C.kernel_width_chart(kernel, title=H2), "kw", alt_text=H1),
        # The metric name lands in generated Vega expressions (tooltip keys): quotes and backslashes included.
        "acc": C.render(C.accuracy_seed_chart(acc_df(), metric=METRIC, higher_is_better=True), "acc",
                        alt_text="seeds"),
        "sc": C.render(C.scatter_chart(SCATTER, x="t", y="q", label="norm", x_title="time", y_title="top-1"), "sc",
                       alt_text="scatter"),
        "none": C.render(C.kernel_width_chart(kernel.iloc[0:0]), "none", alt_text="empty"),
    }
    for rel, src in C.asset_files().items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / rel)
    (out / "records").mkdir()
    for url in list(kernel["url"]) + list(SCATTER["url"]):
        (out / url).write_text('{"ok": true}')
    head = (f'<meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{site_csp()}">'
            + "".join(f'<link rel="stylesheet" href="{s}">' for s in C.STYLES)
            + "".join(f'<script defer src="{s}"></script>' for s in C.SCRIPTS))
    # Two figures drawn only in the browser, the second reading the first's data (one copy in the page).
    live = [C.render(C.kernel_width_chart(kernel, metric="gbps"), "kwa", alt_text="live a", static=False),
            C.render(C.kernel_width_chart(kernel, metric="pct_ceiling"), "kwb", alt_text="live b", static=False,
                     data_from="kwa")]
    body = "".join(f.html for f in figures.values()) + "".join(f.html for f in live)
    page = out / "charts.html"
    page.write_text(f"<!doctype html><html lang=en><head>{head}<title>charts</title></head>"
                    f"<body><h1>charts</h1>{body}</body></html>", encoding="utf-8")
    return page, kernel, figures


CSP_LISTENER = ("window.__csp = []; document.addEventListener('securitypolicyviolation', "
                "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")


def rects(page, selector: str) -> list[dict]:
    return page.eval_on_selector_all(selector, "els => els.map(e => { const r = e.getBoundingClientRect(); "
                                               "return {x: r.x, y: r.y, w: r.width, h: r.height}; })")


def overlap(a, b) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a[
        "h"]


def test_charts_go_live_under_the_csp_with_points_tooltips_and_links(browser, chart_page):  # noqa: F811
    page_path, kernel, figures = chart_page
    v = Visit(browser)
    page = v.page
    try:
        page.add_init_script(CSP_LISTENER)
        page.goto(page_path.as_uri())
        for fid in [*figures, "kwa", "kwb"]:
            try:
                page.wait_for_selector(f"figure#{fid}.nb-interactive", timeout=15000, state="attached")
            except Exception as e:  # the console says why the view did not come up
                raise AssertionError(f"{fid} stayed static: {v.errors}") from e
        assert page.evaluate("window.__csp") == []
        assert not v.errors and not v.dialogs, (v.errors, v.dialogs)
        assert page.locator(".nb-static").count() == 0  # the live view replaced every static picture

        flagged = kernel["flags"] != ""
        assert page.locator("#kw .nb-live g.points_marks path").count() == int((~flagged).sum())
        assert page.locator("#kw .nb-live g.flagged_marks path").count() == int(flagged.sum())
        # The % figure drew every point from the GB/s figure's data set.
        assert page.locator("#kwb .nb-live g.points_marks path").count() == int((~flagged).sum())
        assert page.locator("#kwb .nb-live g.flagged_marks path").count() == int(flagged.sum())
        acc = acc_df()
        assert page.locator("#acc .nb-live g.seeds_marks path").count() == int((~acc["diverged"]).sum())
        assert page.locator("#acc .nb-live g.diverged_marks path").count() == int(acc["diverged"].sum())
        assert page.locator("#sc .nb-live g.points_marks path").count() == len(SCATTER)
        assert page.locator("#none .nb-live text", has_text="no data").count() == 1

        # Hover: the tooltip shows the record, hostile text as text.
        point = page.locator("#kw .nb-live g.points_marks path").first
        point.hover()
        tip = page.locator("#vg-tooltip-element.visible")
        tip.wait_for(timeout=3000)
        assert H2 in tip.inner_text() and "eager" in tip.inner_text()
        assert page.eval_on_selector("#vg-tooltip-element", "e => e.querySelectorAll('script, img').length") == 0
        assert page.evaluate("getComputedStyle(document.getElementById('vg-tooltip-element')).position") == "fixed"

        page.locator("#acc .nb-live g.seeds_marks path").first.hover()
        page.wait_for_function("document.getElementById('vg-tooltip-element').innerText.includes('seed 0')")
        tip_text = page.inner_text("#vg-tooltip-element")
        # Quotes and markup arrive as text (Vega-Lite's tooltip expression drops the lone backslash: display only).
        assert "top-1 \"'" in tip_text and H1 in tip_text

        # A click on a legend entry fades the other backends' points.
        page.locator("#kw .nb-live g.role-legend-label text", has_text="eager").first.click()
        page.wait_for_function("document.querySelectorAll('#kw .nb-live g.points_marks path[opacity=\"0.12\"]')"
                               ".length > 0")
        faded = page.eval_on_selector_all(
            "#kw .nb-live g.points_marks path",
            "ps => ps.map(p => [p.getAttribute('aria-label'), p.getAttribute('opacity')])")
        assert {o for lab, o in faded if lab.startswith("eager")} == {"1"}
        assert {o for lab, o in faded if not lab.startswith("eager")} == {"0.12"}

        # Scatter labels, as this browser draws them: no two overlap, none covers a point.
        labels = rects(page, "#sc .nb-live g.labels_marks text")
        points = rects(page, "#sc .nb-live g.points_marks path")
        assert len(labels) == len(SCATTER)
        for a, b in itertools.combinations(labels, 2):
            assert not overlap(a, b), (a, b)
        for a, b in itertools.product(labels, points):
            assert not overlap(a, b), (a, b)

        assert page.evaluate("window.__csp") == [] and not v.errors and not v.dialogs, (v.errors, v.dialogs)
        # Click: the mark opens its record.
        with page.expect_navigation(timeout=5000):
            point.click()
        assert re.search(r"/records/k\d+\.json$", page.url), page.url
    finally:
        v.close()


def test_static_svg_reads_with_javascript_off(browser, chart_page):  # noqa: F811
    page_path, kernel, figures = chart_page
    v = Visit(browser)
    page = v.page
    try:
        cdp = page.context.new_cdp_session(page)
        cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        page.goto(page_path.as_uri())
        assert page.locator("figure.nb-interactive").count() == 0 and page.locator(".nb-live").count() == 0
        assert page.locator(".nb-static svg").count() == len(figures)
        flagged = kernel["flags"] != ""
        assert page.locator("#kw .nb-static g.points_marks path").count() == int((~flagged).sum())
        assert page.locator("#kw .nb-static a").count() == len(kernel)
        labels = [page.locator("#sc .nb-static g.labels_marks text").nth(i).bounding_box()
                  for i in range(len(SCATTER))]
        boxes = [{"x": b["x"], "y": b["y"], "w": b["width"], "h": b["height"]} for b in labels]
        for a, b in itertools.combinations(boxes, 2):
            assert not overlap(a, b), (a, b)
        assert not v.errors and not v.dialogs, (v.errors, v.dialogs)
    finally:
        v.close()
