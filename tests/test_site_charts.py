"""Site charts: Vega-Lite specs carry the data and encodings asked for, the static SVG has one mark per data point,
labels never overlap, hostile text stays inert in the SVG and in the JSON block, and the pins agree."""

from __future__ import annotations

import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pandas as pd
import pytest

alt = pytest.importorskip("altair")
vlc = pytest.importorskip("vl_convert")

from normbench.site import charts as C  # noqa: E402

H1 = "<script>alert(1)</script>"
H2 = '"><img src=x onerror=alert(1)>'


def kernel_df(devices=("cpu",), backends=("eager", "compile")) -> pd.DataFrame:
    rows = []
    for dev, be, dt, ps, w in itertools.product(devices, backends, ("float32", "bfloat16"), ("fwd", "fwd+bwd"),
                                                (256, 1024, 4096, 8192)):
        flagged = w == 8192 and be == backends[0]
        rows.append(dict(width=w, rows=64, gbps=w / 100 + len(be), pct_ceiling=w / 200, ceiling_gbps=90.0,
                         backend=be, dtype=dt, pass_=ps, device=dev, median_s=1e-4,
                         flags="suspect" if flagged else "", url=f"records/{dev}-{be}-{dt}-{ps}-{w}.json",
                         label=f"{be} {dt} {ps} C={w}"))
    return pd.DataFrame(rows)


def acc_df() -> pd.DataFrame:
    rows = []
    for o, norm in enumerate(["layernorm", "rmsnorm", "dyt"]):
        for s in range(4):
            diverged = norm == "dyt" and s < 2
            rows.append(dict(norm=norm, order=o, seed=s, value=None if diverged else 70.0 + o + s * 0.3,
                             diverged=diverged, centre=70.5 + o, ci_lo=70.0 + o, ci_hi=71.0 + o, lr=1e-3 * (o + 1),
                             url=f"records/{norm}-{s}.json", label=f"{norm} seed {s}"))
    return pd.DataFrame(rows)


def datasets(chart) -> list[list[dict]]:
    return list(chart.to_dict()["datasets"].values())


def svg_groups(svg: str, name: str) -> list[ET.Element]:
    """The mark groups Vega draws for the Vega-Lite layer called ``name`` (one per facet cell)."""
    root = ET.fromstring(svg)
    return [g for g in root.iter("{http://www.w3.org/2000/svg}g")
            if f"{name}_marks" in (g.get("class") or "").split()]


def count_items(svg: str, name: str, tag: str = "path") -> int:
    return sum(len(list(g.iter(f"{{http://www.w3.org/2000/svg}}{tag}"))) for g in svg_groups(svg, name))


@pytest.fixture(scope="module")
def kernel_fig():
    df = kernel_df()
    return df, C.render(C.kernel_width_chart(df, title="layernorm on cpu"), "kw", alt_text="GB/s against width")


def test_pins_name_one_vegalite_version():
    assert alt.SCHEMA_VERSION == "v" + C.VEGALITE_VERSION
    assert C.VL_CONVERT_VERSION in vlc.get_vegalite_versions()
    vendored = json.loads((C.ASSETS / "vendor" / "VERSIONS.json").read_text())
    assert vendored["vega-lite"] == C.VEGALITE_VERSION
    assert vendored["vega"] == vlc.get_vega_version()  # the static SVG and the live view draw with one Vega
    assert f'"{C.VEGALITE_VERSION}"' in (C.ASSETS / "vendor" / "vega-lite.min.js").read_text()
    assert f'"{vendored["vega"]}"' in (C.ASSETS / "vendor" / "vega.min.js").read_text()
    for rel, src in C.asset_files().items():
        assert src.is_file() and src.stat().st_size > 100, rel
    assert "vega.expressionInterpreter = expression;" in (C.ASSETS / "vendor" / "vega-interpreter.js").read_text()


def test_kernel_spec_has_the_encodings_and_every_record(kernel_fig):
    df, fig = kernel_fig
    spec = json.loads(fig.spec)
    assert spec["facet"]["row"]["field"] == "dtype" and spec["facet"]["column"]["field"] == "pass_"
    layers = {lay.get("name"): lay for lay in spec["spec"]["layer"]}
    pts = layers["points"]["encoding"]
    assert pts["x"]["field"] == "width" and pts["x"]["scale"]["type"] == "log" and pts["x"]["scale"]["base"] == 2
    assert pts["y"]["field"] == "gbps" and pts["color"]["field"] == "backend" and pts["href"]["field"] == "url"
    assert "label" in [t["field"] for t in pts["tooltip"]]
    rule = [lay for lay in spec["spec"]["layer"] if lay["mark"]["type"] == "rule"]
    assert rule and rule[0]["encoding"]["y"] == {"aggregate": "max", "field": "ceiling_gbps", "type": "quantitative"}
    (rows,) = spec["datasets"].values()
    assert sorted((r["backend"], r["dtype"], r["pass_"], r["width"], r["gbps"]) for r in rows) == sorted(
        df[["backend", "dtype", "pass_", "width", "gbps"]].itertuples(index=False, name=None))
    pct = C.kernel_width_chart(df, metric="pct_ceiling").to_dict()
    rules = [lay["encoding"]["y"] for lay in pct["spec"]["layer"] if lay["mark"]["type"] == "rule"]
    assert rules == [{"datum": 100.0}]  # in % the ceiling is 100
    with pytest.raises(ValueError, match="metric"):
        C.kernel_width_chart(df, metric="seconds")


def test_kernel_svg_has_one_mark_per_record_and_links_to_it(kernel_fig):
    df, fig = kernel_fig
    flagged = df["flags"] != ""
    assert count_items(fig.svg, "points") == int((~flagged).sum())
    assert count_items(fig.svg, "flagged") == int(flagged.sum())
    assert len(svg_groups(fig.svg, "points")) == 4  # one per dtype x pass panel
    links = [a.get("{http://www.w3.org/1999/xlink}href") for a in ET.fromstring(fig.svg).iter(
        "{http://www.w3.org/2000/svg}a")]
    assert sorted(links) == sorted(df["url"])  # the page's own relative links, not vl-convert's base URL
    assert "△ 4 flagged records" in fig.svg
    # All flagged: no empty ranked layers (an empty layer makes Vega warn of an infinite scale extent).
    spec = C.kernel_width_chart(df.assign(flags="suspect")).to_dict()
    assert [lay.get("name") for lay in spec["spec"]["layer"] if lay["mark"]["type"] != "rule"] == ["flagged"]


def test_device_compare_has_a_panel_per_backend_and_every_point():
    df = kernel_df(devices=("cpu", "h100"), backends=("eager", "compile", "triton"))
    fig = C.render(C.device_compare_chart(df), "dev", alt_text="devices")
    spec = json.loads(fig.spec)
    assert spec["facet"]["field"] == "backend"
    enc = {lay.get("name"): lay["encoding"] for lay in spec["spec"]["layer"]}
    assert enc["points"]["color"]["field"] == "device" and enc["points"]["y"]["field"] == "pct_ceiling"
    assert len(svg_groups(fig.svg, "points")) == 3
    assert count_items(fig.svg, "points") + count_items(fig.svg, "flagged") == len(df)


def test_accuracy_seeds_interval_and_divergence():
    df = acc_df()
    for higher in (True, False):
        chart = C.accuracy_seed_chart(df, metric="top-1", higher_is_better=higher)
        spec = chart.to_dict()
        fig = C.render(chart, "acc", alt_text="seeds")
        assert count_items(fig.svg, "seeds") == int((~df["diverged"]).sum())
        assert count_items(fig.svg, "diverged") == int(df["diverged"].sum())
        assert count_items(fig.svg, "interval", "line") == 3 and count_items(fig.svg, "centre") == 3
        layers = {lay["name"]: lay for lay in spec["layer"]}
        lo, hi = layers["seeds"]["encoding"]["y"]["scale"]["domain"]
        edge = {r["edge"] for r in spec["datasets"][layers["diverged"]["data"]["name"]]}
        assert edge == {lo if higher else hi}  # the worst end of the axis
        labels = layers["seeds"]["encoding"]["x"]["sort"]
        assert labels[0].startswith("layernorm") and "✗ 2/4 diverged" in labels[2] and "lr 0.003" in labels[2]
        assert "✗ 2/4 diverged" in fig.svg
    # A seed that finished without a value is drawn (grey ring on the edge), never dropped and never a number.
    df.loc[0, "value"] = float("nan")
    fig = C.render(C.accuracy_seed_chart(df, metric="top-1", higher_is_better=True), "acc", alt_text="seeds")
    assert count_items(fig.svg, "missing") == 1 and count_items(fig.svg, "seeds") == int((~df["diverged"]).sum()) - 1
    only = C.accuracy_seed_chart(df.iloc[:1], metric="top-1", higher_is_better=True)
    assert count_items(C.render(only, "one", alt_text="one").svg, "missing") == 1


def test_training_curves_one_line_per_norm_and_seed():
    rows = [dict(norm=n, seed=s, step=t, value=(2.0 - t / 100) if n == "a" else 1.0 + s, url=f"r/{n}{s}.json")
            for n in ("a", "b") for s in (0, 1, 2) for t in range(0, 300, 50)]
    df = pd.DataFrame(rows)
    fig = C.render(C.training_curves_chart(df, metric="loss"), "cur", alt_text="curves")
    assert count_items(fig.svg, "curves") == 6
    log = C.training_curves_chart(df, metric="loss", log_y=True)
    n_bad = int((df["value"] <= 0).sum())
    assert n_bad and f"{n_bad} non-positive values not drawn" in json.dumps(log.to_dict())
    assert all(r["value"] > 0 for r in datasets(log)[0])
    one = C.render(C.training_curves_chart(df[df["step"] == 0], metric="loss"), "one", alt_text="first step")
    assert count_items(one.svg, "lone") == 6  # single-step runs are drawn as points


def test_long_curves_are_thinned_but_keep_their_spikes():
    import math

    steps = range(4000)
    loss = [3.0 * math.exp(-t / 800) + (50.0 if t == 2345 else 0.0) for t in steps]  # one spike, one step wide
    df = pd.DataFrame([dict(norm="a", seed=0, step=t, value=v, url="r/a0.json") for t, v in zip(steps, loss)])
    chart = C.training_curves_chart(df, metric="loss")
    (rows,) = [d for d in datasets(chart) if len(d) > 1]
    assert len(rows) <= C.CURVE_POINTS + 2
    kept = {r["step"]: r["value"] for r in rows}
    assert kept[2345] == 50.0 + 3.0 * math.exp(-2345 / 800)   # the spike a plain stride would miss
    assert 0 in kept and 3999 in kept and min(kept.values()) == min(loss)
    assert "at most 200 of its 4000 logged points" in json.dumps(chart.to_dict())
    short = df[df["step"] < 150]
    assert len(datasets(C.training_curves_chart(short, metric="loss"))[0]) == 150  # short runs untouched


def boxes_overlap(a, b) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def test_labels_never_overlap_even_in_a_cluster_and_are_deterministic():
    # 40 points in a 30 px blob, long and wide labels: the hard case for any placement.
    px = [300 + (i * 7) % 30 for i in range(40)]
    py = [150 + (i * 11) % 30 for i in range(40)]
    texts = [("W" * (i % 9)) + f"norm{i}" for i in range(40)]
    boxes = C.place_labels(px, py, texts, 600, 300)
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not boxes_overlap(a, b), (texts[i], texts[j])
    for (x, y), b in itertools.product(zip(px, py), boxes):
        assert not boxes_overlap(b, (x - 5, y - 5, 10, 10))
    assert all(b[2] >= C.text_width(t) for b, t in zip(boxes, texts))
    assert C.place_labels(px, py, texts, 600, 300) == boxes
    perm = list(reversed(range(40)))
    again = C.place_labels([px[k] for k in perm], [py[k] for k in perm], [texts[k] for k in perm], 600, 300)
    assert [again[perm.index(k)] for k in range(40)] == boxes  # independent of the input order


def test_scatter_labels_in_the_spec_do_not_overlap():
    names = ["layernorm", "rmsnorm", "crmsnorm", "dyt", "derf", "scalenorm", H1, H2]
    df = pd.DataFrame(dict(t=[100, 100.2, 100.1, 100.15, 99.9, 100.05, 100.12, 100.11],
                           q=[70, 70.01, 70.02, 70.0, 70.03, 70.01, 70.02, 70.0], norm=names,
                           url=[f"records/{i}.json" for i in range(8)]))
    chart = C.scatter_chart(df, x="t", y="q", label="norm", x_title="time", y_title="top-1")
    spec = chart.to_dict()
    labels = next(lay for lay in spec["layer"] if lay.get("name") == "labels")
    rows = spec["datasets"][labels["data"]["name"]]
    boxes = [(r["lx"], r["ly"], C.text_width(r["text"]), C.LABEL_FONT_SIZE * 1.25) for r in rows]
    assert sorted(r["text"] for r in rows) == sorted(names)
    for a, b in itertools.combinations(boxes, 2):
        assert not boxes_overlap(a, b)
    fig = C.render(chart, "sc", alt_text="scatter")
    assert count_items(fig.svg, "points") == 8 and count_items(fig.svg, "labels", "text") == 8
    df["front"] = [True, False, False, False, True, False, False, False]
    front = C.scatter_chart(df, x="t", y="q", label="norm", x_title="time", y_title="top-1").to_dict()
    line = next(lay for lay in front["layer"] if lay.get("name") == "front")
    assert sorted(r["norm"] for r in front["datasets"][line["data"]["name"]]) == ["derf", "layernorm"]


class _Audit(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.bad = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k.startswith("on") or (v or "").strip().lower().startswith("javascript:"):
                self.bad.append((tag, k, v))


def test_hostile_text_stays_inert_in_svg_and_spec():
    df = kernel_df(backends=(H1, H2))
    df.loc[0, "url"] = "javascript:alert(1)"
    df.loc[1, "url"] = "//evil.example/x"
    fig = C.render(C.kernel_width_chart(df, title=H2), H2, alt_text=H1)
    audit = _Audit()
    audit.feed(fig.html)
    assert audit.tags.count("script") == 1 and "img" not in audit.tags and not audit.bad, audit.bad
    assert '<script type="application/json" class="nb-spec">' in fig.html
    assert "<" not in fig.spec and ">" not in fig.spec and "&" not in fig.spec
    spec = json.loads(fig.spec)  # still the same JSON, hostile strings intact as data
    rows = next(iter(spec["datasets"].values()))
    assert {H1, H2} <= {r["backend"] for r in rows}
    assert {r["url"] for r in rows[:2]} == {None}  # unsafe links dropped, not drawn as links
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in fig.svg and H1 not in fig.svg
    assert H2 not in fig.html and "javascript:" not in fig.svg and "evil.example" not in fig.svg
    assert re.search(r'<figure class="nb-chart" id="&quot;&gt;&lt;img', fig.html)


def test_spec_json_cannot_close_its_script_block():
    spec = {"a": "</script><script>alert(1)</script>", "b": "<!--", "c": "x\u2028y", "d": "&amp;"}
    text = C.spec_json(spec)
    assert "</" not in text and "<!--" not in text and "\u2028" not in text and "&" not in text
    assert json.loads(text) == spec


@pytest.mark.parametrize("url,ok", [("records/ab.json", True), ("../records/a-b_c.json", True),
                                    ("https://example.org/x?y=1", True), ("javascript:alert(1)", False),
                                    ("JavaScript:alert(1)", False), ("data:text/html,x", False),
                                    ("//evil.example/x", False), ("records/a b.json", False), (None, False),
                                    ('records/"onmouseover=x', False)])
def test_safe_href(url, ok):
    assert C.safe_href(url) == (url if ok else None)


def test_no_data_is_an_explicit_figure():
    empty = kernel_df().iloc[0:0]
    charts = [C.kernel_width_chart(empty), C.device_compare_chart(empty),
              C.accuracy_seed_chart(acc_df().iloc[0:0], metric="top-1", higher_is_better=True),
              C.training_curves_chart(pd.DataFrame(columns=["norm", "seed", "step", "value", "url"]), metric="loss"),
              C.scatter_chart(pd.DataFrame(columns=["a", "b", "n"]), x="a", y="b", label="n", x_title="a",
                              y_title="b"),
              C.kernel_width_chart(kernel_df().assign(gbps=float("nan")))]
    for chart in charts:
        fig = C.render(chart, "e", alt_text="nothing")
        assert ">no data</text>" in fig.svg


def test_a_browser_drawn_figure_can_read_its_data_from_another_on_the_page():
    """Issue #30: a device's GB/s and %-of-ceiling figures draw the same records; drawn in the browser, the second
    names the first's data set (same name: Altair names a data set by the hash of its rows) instead of a copy."""
    df = kernel_df()
    a = C.render(C.kernel_width_chart(df, metric="gbps"), "fa", alt_text="a", static=False)
    b = C.render(C.kernel_width_chart(df, metric="pct_ceiling"), "fb", alt_text="b", static=False, data_from="fa")
    alone = C.render(C.kernel_width_chart(df, metric="pct_ceiling"), "fb", alt_text="b", static=False)
    sa, sb, sc = (json.loads(f.spec) for f in (a, b, alone))
    assert set(sb["datasets"]) == set(sa["datasets"]) == set(sc["datasets"])
    assert all(v == "#fa" for v in sb["datasets"].values())
    assert {k: sa["datasets"][k] for k in sb["datasets"]} == sc["datasets"]   # the same rows it would carry
    assert len(b.html) < len(alone.html) / 2
    with pytest.raises(ValueError):
        C.render(C.kernel_width_chart(df), "fc", alt_text="c", static=True, data_from="fa")


def test_the_width_spec_made_from_a_known_structure_is_altairs_own():
    """``kernel_width_chart_spec`` builds a structure's spec with Altair once and gives later frames of the same
    structure their own data set: the result must be exactly Altair's spec for those rows (key order included)."""
    C._WIDTH_SPECS.clear()
    base = kernel_df()
    other = base.copy()
    other["gbps"] = other["gbps"] * 1.7 + 3
    other["pct_ceiling"] = other["pct_ceiling"] / 3
    other["label"] = other["label"] + " (another device)"
    other["url"] = [f"records/other{i}.html#x" for i in range(len(other))]
    other["device"] = "gpu-2"
    holes = other.copy()   # missing and non-finite numbers (null in JSON) and a missing flag
    holes["ceiling_gbps"] = [(c, math.nan, math.inf)[i % 3] for i, c in enumerate(holes["ceiling_gbps"])]
    holes.loc[holes.index[1], "median_s"] = math.nan
    holes.loc[holes.index[2], "pct_ceiling"] = math.inf
    holes["flags"] = holes["flags"].astype(object)
    holes.loc[holes.index[0], "flags"] = None
    for metric in ("gbps", "pct_ceiling"):
        for df in (base, other, other.iloc[::-1], holes):
            want = C.kernel_width_chart(df, metric=metric, title="t · x").to_dict(validate=False)
            got = C.kernel_width_chart_spec(df, metric=metric, title="t · x")
            assert json.dumps(got) == json.dumps(want)
    assert len(C._WIDTH_SPECS) == 2   # one per metric: the other frames reused it
    # Another structure (fewer widths: other ticks) is built by Altair, not taken from the known one.
    fewer = other[other["width"] != 256]
    assert json.dumps(C.kernel_width_chart_spec(fewer, title="t · x")) == json.dumps(
        C.kernel_width_chart(fewer, title="t · x").to_dict(validate=False))
    assert json.dumps(C.kernel_width_chart_spec(base.iloc[0:0])) == json.dumps(
        C.kernel_width_chart(base.iloc[0:0]).to_dict(validate=False))
