"""The leaderboard's pages as (path, template, context): the data each page shows, shaped for its template.

No HTML here: the templates in ``templates/`` render every value autoescaped, tables are ``tables.Table`` data and
figures come from ``charts`` (Vega-Lite specs rendered to static SVG).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import heapq
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from normbench import stats as S
from normbench.gendocs import MARKER_LINE
from normbench.records.schema import FLAGS, INVALID_FLAGS, bound_by
from normbench.site import aggregate as agg
from normbench.site import downloads, markdown
from normbench.site import tables as _tables
from normbench.site.fmt import (
    fmt_bytes,
    fmt_err,
    fmt_gbps,
    fmt_metric,
    fmt_pct,
    fmt_seconds_human,
    fmt_shape,
    fmt_time,
    fmt_x,
    num,
    safe_url,
)
from normbench.site.records import Entry, Loaded, norm_stem, pages_of, slug
from normbench.site.repro import command
from normbench.site.tables import Col, Table, cell

#: The flag the reader (``normbench.results.records_that_count``) gives a migrated v1 record (``check: null``): it
#: never passed ``normbench check``, so it is shown and never ranked.
LEGACY = "legacy"
FLAG_LABELS = {LEGACY: "unchecked (legacy)", "stale": "stale code", "host_bound": "host-bound"}
#: A norm's page shows its figures for every device while they hold at most this many points in all (each point
#: is in the SVG and in the spec); beyond that each device's figures are one click away on their own page.
INLINE_POINTS = 1500
#: The same bound for a norm's device-comparison page (its further figures are listed, not drawn).
COMPARE_POINTS = 3000
PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
#: A norm measured on more machines than this has no page per machine (``norms/<norm>--<device>.html``: figures and
#: records, and their data file): its page lists each machine's best results and loads a machine's every record of
#: the norm on demand, from the machine's one kernel data file (``data/km-<device>.js``, written with its device
#: page), so a submitted machine adds no file per norm (issue #38: 100 machines x 29 norms were 2,900 pages).
MANY_MACHINES = 12
#: The machines whose best results the overview shows in a many-machine site (the highest best share of the ceiling
#: first): the page does not grow with the machines (at 200 machines it was 2.5 MB); the matrix holds every machine,
#: its first rows in the page and the rest in ``data/matrix.js``, and each machine's page has its every record.
TOP_MACHINES = 10

NAV = (
    ("index.html", "Overview"),
    ("kernels.html", "Kernels"),
    ("models.html", "By model"),
    ("devices.html", "Devices"),
    ("norms.html", "Norms"),
    ("softmax.html", "Softmax"),
    ("accuracy.html", "Accuracy"),
    ("claims.html", "Claims"),
    ("methodology.html", "Methodology"),
)

#: (page name, file in docs/, heading) of the methodology pages (a page says so when its file is missing).
DOCS = (("measurement", "measurement.md", "Measurement"), ("accuracy", "accuracy.md", "Accuracy"),
        ("kernels", "kernels.md", "Kernels"), ("norms", "norms.md", "The norm zoo"),
        ("softmax", "softmax.md", "Softmax"), ("site", "site.md", "The leaderboard site"))


def norm_file(name: str) -> str:
    """The page of a norm, relative to the site root."""
    return f"norms/{norm_stem(name)}.html"


def device_file(hw: str) -> str:
    return f"devices/{slug(hw)}.html"


def figures_file(hw: str) -> str:
    """A machine's width figures, one section per norm on many machines (``MANY_MACHINES``), drawn in the browser."""
    return f"devices/{slug(hw)}--figures.html"


def norm_compare_file(name: str) -> str:
    """A norm across devices."""
    return norm_file(name)[:-len(".html")] + "--devices.html"


def download_stem(hw: str) -> str:
    """A device's download files, without their suffix (``.csv.gz``, ``.parquet``), relative to the site root."""
    return f"downloads/{slug(hw)}"


def norm_device_file(name: str, hw: str) -> str:
    """The figures of a norm on one device, beside the norm's page (same depth, so figures are shared)."""
    return norm_file(name)[:-len(".html")] + f"--{slug(hw)}.html"


def _s(v) -> str:
    return v if isinstance(v, str) else ""


def flag_badges(flags: dict) -> list[tuple[str, str, str]]:
    """(label, flag, reason) per flag, for the templates' badges."""
    return [(FLAG_LABELS.get(f, f), f, why) for f, why in sorted(flags.items())]


def bound_text(r: dict) -> str | None:
    """A kernel row's GPU time against its host time, and which bounds the call (None without a host time)."""
    if not r.get("host"):
        return None
    who = ("the host bounds the call: issued one after another (a decode step without CUDA graphs) these calls run "
           "at the host's pace" if r["bound"] == "host" else "the GPU bounds the call: the host's launches keep up")
    return f"GPU time {fmt_time(r['time'])} (CUDA events), host time per call {fmt_time(r['host'])}: {who}"


def timing_text(rec: dict) -> str | None:
    """A kernel record page's line on GPU time and host time (None where the record has no host time)."""
    if rec.get("kind") != "kernel":
        return None
    met = rec.get("metrics") or {}
    return bound_text({"time": met.get("time_median_s"), "host": met.get("host_s"), "bound": bound_by(rec)})


@dataclass
class SiteInfo:
    built: str
    version: str
    n_records: int
    n_rejected: int
    taken: str


@dataclass
class Page:
    path: str                  # relative to the site root
    template: str
    title: str
    ctx: dict = field(default_factory=dict)
    active: str = ""
    lead: str = ""
    crumbs: list = field(default_factory=list)
    charts: bool = False       # the page has figures: load the chart scripts
    part: str | None = None    # not a page: a part another page loads on demand (``build`` writes the rendered HTML
                               # as a data file, ``tables.data_script("nbPart", (part,), html)``)

    @property
    def up(self) -> str:
        return "../" * self.path.count("/")


class LazyFigure:
    """A figure drawn when its page is rendered (``__html__``), so a build can tell from its inputs (``fingerprint``)
    whether a page changed before drawing anything; drawn figures are kept by that fingerprint (``Site.fig_store``)."""

    def __init__(self, site, builder: str, df, chart_id: str, alt: str, static: bool, kw: dict,
                 data_from: str | None = None, inputs: str | None = None):
        self.site, self.builder, self._df, self.chart_id, self.alt, self.static, self.kw = (
            site, builder, df, chart_id, alt, static, kw)
        self.data_from, self.inputs = data_from, inputs
        self._print: str | None = None
        self._html: str | None = None

    @property
    def df(self):
        if callable(self._df):   # made when drawn (``inputs`` stands for it in the fingerprint)
            self._df = self._df()
        return self._df

    def fingerprint(self) -> str:
        if self._print is None and self.inputs is not None:
            self._print = hashlib.sha256(repr((self.builder, self.chart_id, self.alt, self.static,
                                               sorted(self.kw.items()), self.data_from, "inputs",
                                               self.inputs)).encode("utf-8", "surrogatepass")).hexdigest()
        if self._print is None:
            import pandas as pd

            df = self.df
            h = hashlib.sha256(repr((self.builder, self.chart_id, self.alt, self.static, sorted(self.kw.items()),
                                     self.data_from, list(map(str, df.columns)), list(map(str, df.dtypes)),
                                     len(df))).encode())
            h.update(pd.util.hash_pandas_object(df, index=True).values.tobytes())
            for col in df.columns:   # object columns: their text exactly (the hash above is of their values' hashes)
                if df[col].dtype == object:
                    h.update(json.dumps(list(df[col]), default=str, ensure_ascii=False).encode("utf-8",
                                                                                             "surrogatepass"))
            self._print = h.hexdigest()
        return self._print

    def __html__(self) -> str:
        if self._html is None:
            store = self.site.fig_store
            key = self.fingerprint()
            html = store.get(key) if store is not None else None
            if html is None:
                # A builder's ``*_spec`` twin (where there is one) makes the same spec with less of Altair's work.
                build = (getattr(self.site.charts, self.builder + "_spec", None)
                         or getattr(self.site.charts, self.builder))
                chart = build(self.df, **self.kw)
                # The charts module escapes every text it puts in the SVG and the spec (its tests check hostile text).
                html = self.site.charts.render(chart, self.chart_id, alt_text=self.alt, static=self.static,
                                               data_from=self.data_from).html
                if store is not None:
                    store.put(key, html)
            self._html = html
        return self._html

    def __str__(self) -> str:
        return self.__html__()


def _bytes_models(rows: list[dict]) -> dict[str, tuple[int, dict, set]]:
    """Per bytes-model formula in one machine's rows: (the position of its first row, that row's model, the norms
    that use it) (``Site.methodology_page``)."""
    out: dict[str, tuple[int, dict, set]] = {}
    for i, r in enumerate(rows):
        model = r["entry"].rec["config"].get("bytes_model")
        if isinstance(model, dict) and isinstance(model.get("formula"), str):
            out.setdefault(model["formula"], (i, model, set()))[2].add(r["norm"])
    return out


class Site:
    """All pages of one build: ``pages()`` yields Page objects; ``data_files`` collects the big tables' rows."""

    def __init__(self, loaded: Loaded, info: SiteInfo, docs: dict[str, str], charts=None, rows=None,
                 machine_store=None):
        self.loaded = loaded
        self.info = info
        self.docs = docs
        self.charts = charts
        self.data_files: dict = {}     # data file -> its Table (text: ``Table.data_text``) or text
        self.extra_files: dict[str, bytes] = {}   # other files a job writes (a record page's JSON)
        self.fig_store = None          # drawn figures by the hash of their inputs (``results.readcache.PickleDir``)
        # per-machine aggregates (``per_machine``; ``results.readcache.PickleDir``; the site cache's)
        self.machine_store = machine_store
        self.kernels = agg.kernel_rows(loaded.entries, rows)   # ``rows``: the site cache's (``incremental``)
        self.acc_rows = [agg.accuracy_row(e) for e in loaded.entries if e.kind == "accuracy"]
        self.cells = agg.accuracy_cells(self.acc_rows)
        self.hw_entries: dict[str, list] = {}   # oldest first, so [-1] describes a machine as last seen
        newest: dict[str, Entry] = {}           # per norm name, its newest record: the norm as last seen
        for e in sorted(loaded.entries, key=lambda e: e.timestamp):
            newest[e.norm] = e
            self.hw_entries.setdefault(e.hw, []).append(e)
        self._newest_norm = newest
        self.by_hw: dict[str, list[dict]] = {}
        for r in self.kernels:
            self.by_hw.setdefault(r["hardware"], []).append(r)
        for hw, hr in self.by_hw.items():
            # Speed-ups, cache residency and rank keys read the machine's own rows alone: kept between builds.
            derived = self.per_machine("derived", hw, lambda hr=hr: agg.derive_machine(hr))
            agg.apply_derived(hr, derived)
        self.by_norm: dict[str, list[dict]] = {}
        self.by_norm_hw: dict[tuple[str, str], list[dict]] = {}
        for r in self.kernels:
            self.by_norm.setdefault(r["norm"], []).append(r)
            self.by_norm_hw.setdefault((r["norm"], r["hardware"]), []).append(r)
        self.kernel_hws = sorted(self.by_hw)
        self._wfig: dict[tuple, tuple[list, int]] = {}
        self._inline: dict[str, bool] = {}
        self._wplan: dict[tuple, list] = {}

    @functools.cached_property
    def norm_meta(self) -> dict[str, dict]:
        """Each norm's ``norm`` block as its newest record gives it (read here, not for every record)."""
        return {name: e.rec["norm"] for name, e in self._newest_norm.items()}

    # --- rows ----------------------------------------------------------------------------------------------------

    # --- links ---------------------------------------------------------------------------------------------------

    #: What ``per_machine`` keeps of each machine between builds (``build`` prunes the rest).
    MACHINE_MEMOS = ("models_index", "models_index_hub", "claims_speed", "derived", "hw_facts", "summary",
                     "model_pairs", "name", "bytes_models")

    def machine_print(self, hw: str) -> str:
        """A machine's records as the pages know them (``incremental.entry_print`` of each): what its aggregates are
        a function of."""
        memo = self.__dict__.setdefault("_machine_prints", {})
        if hw not in memo:
            from normbench.site.incremental import _h, entry_print

            memo[hw] = _h(hw, *(entry_print(e) for e in self.hw_entries.get(hw, [])))
        return memo[hw]

    def rows_print(self, hw: str) -> str:
        """A machine's kernel rows as its pages show them (``incremental.row_print`` of each), memoised per build: its
        leaderboard part, figures page and device page all key on it."""
        memo = self.__dict__.setdefault("_rows_prints", {})
        if hw not in memo:
            from normbench.site.incremental import _h, row_print

            memo[hw] = _h(hw, *(row_print(r) for r in self.by_hw.get(hw, [])))
        return memo[hw]

    def machine_keys(self) -> list[tuple]:
        """The keys ``per_machine`` reads in this site (the entries a build keeps)."""
        return [(what, hw, self.machine_print(hw)) for what in self.MACHINE_MEMOS for hw in sorted(self.hw_entries)]

    def per_machine(self, what: str, hw: str, make):
        """``make()``, an aggregate of one machine's records alone, kept between builds under the machine's records'
        print (``machine_store``): a summary page is assembled from every machine's kept rows, and a changed machine
        computes its own again (issue #38: a rebuild in proportion)."""
        store = self.machine_store
        if store is None:
            return make()
        key = (what, hw, self.machine_print(hw))
        value = store.get(key)
        if value is None:
            value = make()
            store.put(key, value)
        return value

    def machine_summary(self, hw: str) -> dict:
        """What the summary pages read of one machine's kernel rows, kept between builds (``per_machine``): its
        best rows as positions in ``by_hw[hw]`` (``rows_at``), per norm its section of the norm's page (best rows,
        figures and points, widths, rows). A rebuild reads a changed machine's rows alone (issue #38)."""
        memo = self.__dict__.setdefault("_summaries", {})
        if hw not in memo:
            memo[hw] = self.per_machine("summary", hw, lambda: self._machine_summary(hw))
        return memo[hw]

    def _machine_summary(self, hw: str) -> dict:
        rows = self.by_hw.get(hw, [])
        pos = {id(r): i for i, r in enumerate(rows)}

        def at(rs):
            return [pos[id(r)] for r in rs]

        norms = {}
        compare: dict[str, dict[tuple, tuple]] = {}   # norm -> combination -> (rows, ``_width_best`` as positions)
        for n in self.machine_norms(hw):
            hr = self.by_norm_hw.get((n, hw), [])
            norms[n] = {"counts": self._width_counts(hr), "widths": len({r["num_features"] for r in hr}),
                        "n": len(hr), "best": at(agg.best_by_bandwidth(hr, 3)),
                        "best_copy": at(agg.best_by_same_size_copy(hr, 3))}
            combos: dict[tuple, list[dict]] = {}
            for r in hr:
                if not r["invalid"]:
                    combos.setdefault((r["layout"], r["dtype"], r["pass"], r["timing"]), []).append(r)
            if combos:
                compare[n] = {c: (len(rs), [(key, pos[id(r)]) for key, r in self._width_best(rs)])
                              for c, rs in combos.items()}
        return {"norms": norms, "compare": compare, "best": at(agg.best_backend_per_norm(rows)),
                "best_copy": at(agg.best_backend_per_norm(rows, "copy")), "per_case": at(self.best_per_case(rows)),
                "top": at(agg.best_by_bandwidth(rows, 5)), "top_copy": at(agg.best_by_same_size_copy(rows, 5))}

    def rows_at(self, hw: str, at: list[int]) -> list[dict]:
        """The rows of ``by_hw[hw]`` at these positions (``machine_summary``'s)."""
        rows = self.by_hw.get(hw, [])
        return [rows[i] for i in at]

    def hw_name(self, hw: str) -> str:
        """A machine's name as its newest record gives it (GPU and memory, or CPU and cores), memoised per build
        and kept between builds (``per_machine``): every summary page names every machine."""
        memo = self.__dict__.setdefault("_hw_names", {})
        if hw not in memo:
            memo[hw] = self.per_machine("name", hw, lambda: self._hw_name(hw))
        return memo[hw]

    def _hw_name(self, hw: str) -> str:
        entries = self.hw_entries.get(hw) or []
        h = entries[-1].rec["provenance"].get("hardware") if entries else None
        if not isinstance(h, dict):
            return ""
        if _s(h.get("gpu")):
            mem = num(h.get("gpu_memory_gb"))
            return h["gpu"] + (f", {mem:g} GB" if mem else "")
        cores = num(h.get("cores"))
        return _s(h.get("cpu")) + (f", {int(cores)} cores" if cores else "")

    @staticmethod
    def rec_href(e: Entry, up: str) -> str:
        return f"{up}{e.href}"

    # --- kernel table --------------------------------------------------------------------------------------------

    def kernel_table(self, tid: str, rows: list[dict], up: str, *, with_hw: bool = True,
                     with_norm: bool = True, srcs: list[str] | None = None, file: bool = False,
                     preview: int | None = None) -> Table:
        """The kernel records ``rows`` ranked by bandwidth. ``srcs``: the rows are in those data files (site-relative,
        each another table's: a norm's every-record table loads its per-device tables' files), so only the first
        rows are built for the page; ``file``: write this table's data file whatever its size (others load it)."""
        cols = [Col("device")] if with_hw else []
        cols += [Col("norm")] if with_norm else []
        cols += [
            Col("backend", title="hover a badge for why a record is flagged; flagged records are never ranked"),
            Col("shape", title="layout and tensor shape"), Col("width", True, "hidden size C"), Col("dtype"),
            Col("pass"), Col("class", title="shape class"),
            Col("time", True, "median over repetitions (hover: interquartile range); on a GPU the GPU's time, from "
                "CUDA events"),
            Col("host", True, "GPU records: the host's median time in one call, without a synchronisation; the note "
                "says which bounds a stream of these calls (host: it runs at the host's pace unless replayed as a "
                "CUDA graph)"),
            Col("GB/s", True, "minimum bytes moved / median time"),
            Col("% ceiling", True, "GB/s as a percentage of the DRAM copy bandwidth measured in the same run; "
                "cache-resident rows are not ranked by it", sorted="descending"),
            Col("% copy", True, "GB/s as a percentage of a copy_ of the case's own bytes timed the same way in the "
                "same run (the note: where its data lived); the share to compare across sizes"),
            Col("vs eager", True, "eager median time / this median time, same shape, dtype and pass"),
            Col("peak mem", True, "peak memory above the inputs"),
            Col("err y", True, "max |y - y_ref| against float64 (hover: dx, dw)"),
            Col("record", title="the result record this row comes from"),
        ]
        t = Table(tid, cols, filters=[("hardware", "device"), ("norm", "norm"), ("dtype", "dtype"), ("pass", "pass"),
                                      ("shape_class", "shape class"), ("backend", "backend"), ("timing", "timing"),
                                      ("layout", "layout"), ("harness", "harness"), ("ranked", "ranked")],
                  preview=preview)
        if srcs is not None:
            # The page holds the first rows (the data files hold every one): the best PREVIEW of them, and each
            # filter's values over all of them, not every row's filters (a norm's 3,300 rows at 100 machines).
            t.n_total = len(rows)
            t.all_options = self._kernel_options(rows)
            ranked = heapq.nsmallest(_tables.PREVIEW, rows, key=agg.bandwidth_key)
        else:
            ranked = agg.rank_by_bandwidth(rows)
        for r in ranked:
            e = r["entry"]
            bad = r["invalid"]
            iqr = f"IQR {fmt_time(r['iqr'])} over {int(r['reps'])} reps" if r["reps"] else ""
            errt = (f"y max_rel {fmt_err(r['err_y_rel'])} · dx max_abs {fmt_err(r['err_dx'])} · "
                    f"dw max_abs {fmt_err(r['err_dw'])}")
            cells = [cell(r["hardware"], r["hardware"], href=f"{up}{device_file(r['hardware'])}")] if with_hw else []
            if with_norm:
                cells.append(cell(r["norm"], r["norm"], href=up + norm_file(r["norm"])))
            cells += [
                cell(r["backend"], r["backend"], flags=flag_badges(r["flags"])),
                cell(fmt_shape(r["shape"]), float(r["elements"]) if r["elements"] else None, note=r["layout"]),
                cell(int(r["num_features"]) if r["num_features"] else "–", r["num_features"]),
                cell(r["dtype"], r["dtype"]),
                cell(r["pass"], r["pass"], note=None if r["timing"] in ("cold", "hot") and r["device"] == "cpu"
                     or r["timing"] == "cold" else r["timing"]),
                cell(r["shape_class"], r["shape_class"]),
                cell("failed", None, cls="failed", title=iqr) if bad else cell(fmt_time(r["time"]), r["time"],
                                                                                title=iqr),
                cell(fmt_time(r["host"]) if r["host"] else "–", r["host"],
                     note=f"{r['bound']}-bound" if r["bound"] and not bad else None, title=bound_text(r)),
                cell("–" if bad else fmt_gbps(r["gbps"]), None if bad else r["gbps"]),
                cell(fmt_pct(None if bad else r["pct"]), None if bad or not r["dram"] else r["pct"],
                     cls=None if r["dram"] else "muted",
                     title=None if r["dram"] else f"cache-resident ({r['cache']}): not ranked against the DRAM "
                                                  "ceiling"),
                cell(fmt_pct(None if bad else r["pct_copy"]), None if bad else r["pct_copy"],
                     note=r["cache"] if r["cache"] != "none" else None,
                     title=f"same-size copy {fmt_gbps(r['copy_gbps'])}; data in cache: {r['cache'] or 'unknown'} "
                           f"({r['cache_how']})"),
                cell(fmt_x(r["speedup"]), r["speedup"]),
                cell(fmt_bytes(r["peak_mem"]), r["peak_mem"]),
                cell(fmt_err(r["err_y"]), r["err_y"], title=errt),
                cell(e.rid[:10], e.rid, href=self.rec_href(e, up)),
            ]
            t.add(cells, self._kernel_filters(r), "invalid" if bad else ("flagged" if r["flagged"] else ""),
                  rank=agg.rank_json(agg.bandwidth_key(r)) if file else None)
        if not with_hw:
            t.filters = [f for f in t.filters if f[0] != "hardware"]
        if not with_norm:
            t.filters = [f for f in t.filters if f[0] != "norm"]
        if srcs is not None:
            t.src = " ".join(up + x for x in srcs) or None   # none: the first rows only (a page loads the rest)
            return t
        shard = t.shard(up, force=file)
        if shard:
            self.data_files[shard[0]] = shard[1]
        return t

    #: A kernel row's fields its tables filter on (``_kernel_filters``), besides whether it is ranked.
    FILTER_FIELDS = ("hardware", "norm", "dtype", "pass", "shape_class", "backend", "timing", "layout", "harness")

    @staticmethod
    def _ranked_state(r: dict) -> str:
        return "invalid" if r["invalid"] else ("flagged" if r["flagged"] else "ranked")

    @classmethod
    def _kernel_options(cls, rows: list[dict]) -> dict[str, list[str]]:
        """Each filter's distinct values (as texts, sorted) over ``rows``: ``Table.options`` of their
        ``_kernel_filters`` without making them."""
        out = {k: sorted({str(r[k]) for r in rows}) for k in cls.FILTER_FIELDS}
        out["ranked"] = sorted({cls._ranked_state(r) for r in rows})
        return out

    @classmethod
    def _kernel_filters(cls, r: dict) -> dict:
        return {**{k: r[k] for k in cls.FILTER_FIELDS}, "ranked": cls._ranked_state(r)}

    def norm_shared(self, name: str) -> bool:
        """Whether a norm's every-record table is too big for its page: its rows are then written once, in its
        per-device tables' data files (``knd-*``), which the norm page's table loads together."""
        return not self.many(name) and len(self.by_norm.get(name, [])) > _tables.INLINE_MAX

    def norm_hws(self, name: str) -> list[str]:
        """The machines with kernel records of a norm."""
        memo = self.__dict__.setdefault("_norm_hws", {})
        if name not in memo:
            memo[name] = sorted({r["hardware"] for r in self.by_norm.get(name, [])})
        return memo[name]

    def machine_norms(self, hw: str) -> list[str]:
        """The norms a machine has kernel records of."""
        memo = self.__dict__.setdefault("_machine_norms", {})
        if hw not in memo:
            memo[hw] = sorted({r["norm"] for r in self.by_hw.get(hw, [])})
        return memo[hw]

    def many(self, name: str) -> bool:
        """Whether a norm is on more than ``MANY_MACHINES`` machines: then no page per machine (``MANY_MACHINES``)."""
        return len(self.norm_hws(name)) > MANY_MACHINES

    def norm_hw_href(self, name: str, hw: str, up: str = "") -> str:
        """Where a norm on one machine is shown: its figure page, or (``many``) the norm's section of the machine's
        figures page (which links the machine's section of the norm's page, whose button loads its every record)."""
        return up + (f"{figures_file(hw)}#{slug('f', name)}" if self.many(name) else norm_device_file(name, hw))

    @staticmethod
    def machine_file(hw: str) -> str:
        """A machine's every kernel record as table rows (site-relative; written with its device page)."""
        return Table(slug("km", hw), []).data_path

    # --- figures -------------------------------------------------------------------------------------------------

    @staticmethod
    def _width_best(rows: list[dict]) -> list[tuple[tuple, dict]]:
        """The points of ``width_frame``: ((backend, dtype, pass, layout, width), row) in order, the largest shape of
        each width."""
        timings = {r["timing"] for r in rows}
        best: dict[tuple, dict] = {}
        for r in rows:
            if r["invalid"] or r["gbps"] is None or not r["num_features"]:
                continue
            pss = r["pass"] + (f" · {r['timing']}" if len(timings) > 1 else "")
            key = (r["backend"], r["dtype"], pss, r["layout"], int(r["num_features"]))
            cur = best.get(key)
            if cur is None or (r["elements"] or 0) > (cur["elements"] or 0):
                best[key] = r
        return sorted(best.items(), key=lambda kv: kv[0])

    def width_frame(self, rows: list[dict], up: str):
        """One point per backend, dtype, pass (and timing) and hidden size for ``charts.kernel_width_chart``: the
        largest shape of that width (closest to steady-state bandwidth); invalid records are left out."""
        return self._frame(self._width_best(rows), up)

    def _frame(self, best: list[tuple[tuple, dict]], up: str):
        """``width_frame`` of the points ``_width_best`` chose."""
        import pandas as pd

        if not best:
            return pd.DataFrame()
        cols: dict[str, list] = {k: [] for k in ("width", "rows", "gbps", "pct_ceiling", "ceiling_gbps", "backend",
                                                 "dtype", "pass_", "device", "median_s", "flags", "url", "layout",
                                                 "label")}
        for (backend, dtype, pss, layout, width), r in best:
            flags = ", ".join(FLAG_LABELS.get(f, f) for f in sorted(r["flags"]))
            for k, v in (("width", width), ("rows", int((r["elements"] or 0) // max(width, 1))), ("gbps", r["gbps"]),
                         ("pct_ceiling", r["pct"]), ("ceiling_gbps", r["ceiling"]), ("backend", backend),
                         ("dtype", dtype), ("pass_", pss), ("device", r["hardware"]), ("median_s", r["time"]),
                         ("flags", flags), ("url", self.rec_href(r["entry"], up)), ("layout", layout),
                         ("label", f"{r['norm']} {backend} {fmt_shape(r['shape'])} {dtype} {pss}: "
                                   f"{fmt_gbps(r['gbps'])}, {fmt_pct(r['pct'])} of ceiling, {fmt_time(r['time'])}"
                                   + (f" [{flags}]" if flags else ""))):
                cols[k].append(v)
        return pd.DataFrame(cols)

    @staticmethod
    def _best_print(best: list[tuple[tuple, dict]], up: str) -> list:
        """What ``_frame`` makes of ``best``, before formatting (its labels are a function of these values)."""
        return [(key, r["elements"], r["gbps"], r["pct"], r["ceiling"], r["hardware"], r["time"], sorted(r["flags"]),
                 Site.rec_href(r["entry"], up), r["norm"], r["shape"]) for key, r in best]

    def figure(self, builder: str, df, chart_id: str, alt: str, *, static: bool = True, data_from: str | None = None,
               inputs: str | None = None, **kw):
        """A rendered chart (``charts.<builder>(df, **kw)``), or None without the charts module or data; ``static``
        False: the spec only, drawn in the browser (``charts.render``), its data read from the figure ``data_from``
        of the same page where given (the same records: ``charts.render``). ``df`` may be a function making the
        frame when the figure is drawn, with ``inputs`` the text it is a function of (the figure's print)."""
        if self.charts is None or df is None or not hasattr(self.charts, builder):
            return None
        if not callable(df) and len(df) == 0:
            return None
        return LazyFigure(self, builder, df, chart_id, alt, static, kw, data_from, inputs)

    def width_figures(self, norm: str, hw: str, rows: list[dict], up: str) -> list:
        """GB/s and % of ceiling against hidden size on one device, one figure pair per layout with two widths."""
        return self._width_figures(norm, hw, rows, up)[0]

    def _width_plan(self, norm: str, hw: str, rows: list[dict], up: str) -> list[tuple]:
        """(layout, metric, what, points) of each width figure of a norm on a device (``_width_best``'s points: the
        figure's frame is ``_frame`` of them), before drawing any."""
        key = (norm, hw, up)
        if key in self._wplan:
            return self._wplan[key]
        plan = []
        for layout in sorted({r["layout"] for r in rows}):
            # The points (``width_frame``'s) without their frame: a figure makes its frame when it is drawn and is
            # digested by their print (making ~1,000 frames was most of a rebuild's norm pages).
            best = self._width_best([r for r in rows if r["layout"] == layout])
            if len({k[4] for k, _ in best}) < 2:
                continue
            for metric, what in (("gbps", "GB/s"), ("pct_ceiling", "% of the measured copy ceiling")):
                if metric == "pct_ceiling" and all(_na(r["pct"]) for _, r in best):
                    continue
                plan.append((layout, metric, what, best))
        self._wplan[key] = plan
        return plan

    def _width_points(self, norm: str, hw: str, rows: list[dict], up: str) -> int:
        """The points of a norm's width figures on a device (``_width_plan``'s, counted without making them)."""
        return self._width_counts(rows)[1] if self.charts is not None else 0

    def _width_counts(self, rows: list[dict]) -> tuple[int, int]:
        """(figures, points) of ``_width_plan`` for ``rows``, counted without making its frames."""
        figs = n = 0
        for layout in sorted({r["layout"] for r in rows}):
            best = self._width_best([r for r in rows if r["layout"] == layout])
            if len({key[4] for key, _ in best}) < 2:
                continue
            k = 2 if any(num(r["pct"]) is not None for _, r in best) else 1
            figs += k
            n += len(best) * k
        return figs, n

    def _width_figures(self, norm: str, hw: str, rows: list[dict], up: str, *, draw: bool = True,
                       static: bool = True) -> tuple[list, int]:
        """The figures and their number of points; ``draw=False`` counts them without drawing (placeholders)."""
        key = (norm, hw, up, draw, static)
        if key in self._wfig:  # the norm's page and its device page show the same figures: drawn once
            return self._wfig[key]
        if not draw:   # placeholders: counted without making the figures' frames
            n_figs, points = self._width_counts(rows) if self.charts is not None else (0, 0)
            self._wfig[key] = ([Markup("")] * n_figs, points)
            return self._wfig[key]
        figs, points = [], 0
        gbps_fig: dict[str, str] = {}   # layout -> its GB/s figure's id
        for layout, metric, what, best in self._width_plan(norm, hw, rows, up):
            if not draw:
                fig = Markup("") if self.charts is not None else None
            else:
                alt = (f"{norm} on {hw} ({layout}): {what} against hidden size, one line per backend "
                       f"({', '.join(sorted({k[0] for k, _ in best}))}) per dtype and pass")
                chart_id = slug("w", norm, hw, layout, metric)
                kw = {}
                # Drawn in the browser, the % figure reads the GB/s figure's data (one copy in the page) where the
                # two draw the same records (each leaves out the rows without its metric).
                if not static and metric == "pct_ceiling" and layout in gbps_fig and all(
                        _na(r["pct"]) == _na(r["gbps"]) for _, r in best):
                    kw["data_from"] = gbps_fig[layout]
                if metric == "gbps":
                    gbps_fig[layout] = chart_id
                fig = self.figure("kernel_width_chart", lambda best=best, up=up: self._frame(best, up), chart_id,
                                  alt, metric=metric, title=f"{norm} · {layout} · {what}", static=static,
                                  inputs=repr(self._best_print(best, up)), **kw)
            if fig is not None:
                figs.append(fig)
                points += len(best)
        self._wfig[key] = (figs, points)
        return figs, points

    def norm_inline(self, name: str) -> bool:
        """Whether a norm's page draws its figures itself (few points in all, on at most ``MANY_MACHINES`` machines);
        else each device's figure page holds them, drawn in the browser from their spec (a deep page: its records
        table is the no-JavaScript view). A norm on many machines never draws them on its page: that page would grow
        with the machines (3.8 MB at 30) and its static SVGs were a quarter of a cold build's time."""
        if name not in self._inline and self.many(name):
            self._inline[name] = False
        if name not in self._inline:   # asked by each of the norm's jobs: counted once per process
            per_hw: dict[str, list[dict]] = {}
            for r in self.by_norm.get(name, []):
                per_hw.setdefault(r["hardware"], []).append(r)
            points = 0
            for hw in sorted(per_hw):   # counted until the bound is passed
                points += self._width_points(name, hw, per_hw[hw], "../")
                if points > INLINE_POINTS:
                    break
            self._inline[name] = points <= INLINE_POINTS
        return self._inline[name]

    # --- pages ---------------------------------------------------------------------------------------------------

    def matrix(self) -> Table:
        """The overview's norm x device matrix (the devices page shows it too): each norm's best % of ceiling. With
        many machines (``many_site``) a machine per row, the best machines first, the rows beyond the first in
        ``data/matrix.js`` (written by the overview), so neither page grows with the machines."""
        if getattr(self, "_matrix", None) is None:
            self._matrix = self._make_matrix()
            if self.many_site() and len(self._matrix.rows) > _tables.DEEP_PREVIEW:
                self._matrix.preview = _tables.DEEP_PREVIEW
                self._matrix.src = self._matrix.data_path   # both pages are at the site's root
        return self._matrix

    @functools.cached_property
    def _matrix_bests(self) -> tuple[dict, dict]:
        """Per machine, each norm's best row against the DRAM ceiling and (norms with no ranked record from DRAM)
        its best cache-resident row against a same-size copy: the matrix and ``top_machines`` both read them."""
        hws = self.kernel_hws
        best = {hw: {r["norm"]: r for r in self.rows_at(hw, self.machine_summary(hw)["best"])} for hw in hws}
        best_copy = {hw: {r["norm"]: r for r in self.rows_at(hw, self.machine_summary(hw)["best_copy"])}
                     for hw in hws}
        return best, best_copy

    @functools.cached_property
    def top_machines(self) -> list[str]:
        """The machines in the order of their best share of the ceiling over every norm (highest first)."""
        best, _ = self._matrix_bests
        return sorted(self.kernel_hws, key=lambda hw: (-max([r["pct"] or 0.0 for r in best[hw].values()] or [-1.0]),
                                                       hw))

    def _make_matrix(self) -> Table:
        hws = self.kernel_hws
        best, best_copy = self._matrix_bests
        norms = sorted(self.by_norm, key=lambda n: (-max([best[hw][n]["pct"] or 0.0 for hw in hws
                                                          if n in best[hw]] or [-1.0]), n))
        if self.many_site():
            matrix = Table("matrix", [Col("device")] + [Col(n, True) for n in norms], search=True, cls="narrow")
            for hw in self.top_machines:
                matrix.add([cell(hw, hw, href=device_file(hw), title=self.hw_name(hw))]
                           + [self._matrix_cell(n, hw, best, best_copy) for n in norms])
            return matrix
        matrix = Table("matrix", [Col("norm")] + [Col(hw, True, self.hw_name(hw)) for hw in hws], search=False,
                       cls="narrow")
        for n in norms:
            matrix.add([cell(n, n, href=norm_file(n))] + [self._matrix_cell(n, hw, best, best_copy) for hw in hws])
        return matrix

    def _matrix_cell(self, n: str, hw: str, best: dict, best_copy: dict) -> dict:
        """A norm on a machine: its best % of the DRAM ceiling, else of a same-size copy, else unranked or none."""
        r = best[hw].get(n)
        rc = best_copy[hw].get(n)
        if r is None and rc is not None:
            return cell(fmt_pct(rc["pct_copy"]), None, cls="muted", href=self.norm_hw_href(n, hw),
                        note=f"{rc['backend']}, of same-size copy",
                        title=f"only cache-resident ({rc['cache']}) records: best against a same-size "
                              f"copy, not the DRAM ceiling: {rc['backend']} · {rc['dtype']} · "
                              f"{rc['pass']} · {rc['layout']} {fmt_shape(rc['shape'])}")
        if r is None:
            measured = n in self.machine_norms(hw)
            return cell("unranked" if measured else "–", None, cls="muted" if measured else None,
                        href=self.norm_hw_href(n, hw) if measured else None,
                        title="measured, but every record is flagged" if measured else None)
        return cell(fmt_pct(r["pct"]), r["pct"], href=self.norm_hw_href(n, hw),
                    note=r["backend"], title=f"best: {r['backend']} · {r['dtype']} · {r['pass']} · "
                                             f"{r['layout']} {fmt_shape(r['shape'])}; click for "
                                             f"{n}'s figures on {hw}")

    def overview(self) -> Page:
        hws = self.kernel_hws
        matrix = self.matrix()
        every = sorted(self.hw_entries)
        devices = every
        if self.many_site():   # the best machines' results; every machine is in the matrix and the devices page
            hws = self.top_machines[:TOP_MACHINES]
            devices = hws
            if matrix.src:
                self.data_files[matrix.data_path] = matrix
        top = {hw: self.rows_at(hw, self.machine_summary(hw)["top"]) for hw in hws}
        top_copy = {hw: self.rows_at(hw, self.machine_summary(hw)["top_copy"]) for hw in hws}
        tables = []
        for key, cells in self._acc_tables:
            ranked = self._ranked_tables[key][:3]
            if ranked:
                tables.append((key, self.cell_page_file(key), ranked))
        return Page("index.html", "index.html", "Normalization layer leaderboard", active="index.html", ctx=dict(
            n_kernel=len(self.kernels), n_acc=len(self.acc_rows), n_norms=len(self.norm_meta),
            hws=[(hw, self.hw_name(hw), device_file(hw)) for hw in devices], n_hws=len(every),
            n_more=len(every) - len(devices), matrix=matrix,
            top=[(hw, self.hw_name(hw), device_file(hw), [self._top_row(r) for r in top[hw]]) for hw in hws],
            top_copy=[(hw, self.hw_name(hw), device_file(hw), [self._top_row(r, copy=True) for r in top_copy[hw]])
                      for hw in hws if top_copy[hw]],
            acc_tables=tables, n_rejected=len(self.loaded.rejected), empty=not self.loaded.entries,
            n_unranked=sum(r["flagged"] for r in self.kernels),
            n_legacy=sum(LEGACY in r["flags"] for r in self.kernels),
            n_stale=sum("stale" in r["flags"] for r in self.kernels)))

    def _top_row(self, r: dict, copy: bool = False) -> dict:
        """A row of a top table: ``pct`` of the DRAM ceiling, or with ``copy`` of the same-size copy."""
        return {"norm": r["norm"], "norm_href": norm_file(r["norm"]), "backend": r["backend"],
                "shape": f"{r['layout']} {fmt_shape(r['shape'])}", "dtype": r["dtype"], "pass": r["pass"],
                "time": fmt_time(r["time"]), "gbps": fmt_gbps(r["gbps"]),
                "pct": fmt_pct(r["pct_copy"] if copy else r["pct"]),
                "href": self.rec_href(r["entry"], ""), "rid": r["entry"].rid[:10]}

    @staticmethod
    def best_per_case(rows: list[dict]) -> list[dict]:
        """One row per device, norm, backend, dtype, pass, shape class, layout and timing: its shape closest to the
        ceiling (a flagged one only where the case has no ranked record). The leaderboard's unit; every record is
        on its norm's page."""
        best: dict[tuple, dict] = {}
        for r in agg.rank_by_bandwidth(rows):
            best.setdefault((r["hardware"], r["norm"], r["backend"], r["dtype"], r["pass"], r["shape_class"],
                             r["layout"], r["timing"], r["harness"]), r)
        return list(best.values())

    def many_site(self) -> bool:
        """Whether any norm is on many machines (``MANY_MACHINES``): a public leaderboard of submitted machines."""
        memo = self.__dict__.setdefault("_many_site", [])
        if not memo:
            memo.append(any(self.many(n) for n in self.by_norm))
        return memo[0]

    @staticmethod
    def leaderboard_file(hw: str) -> str:
        """A machine's rows of the kernel leaderboard (its best per case), in a many-machine site (site-relative)."""
        return Table(slug("kl", hw), []).data_path

    def kernels_part(self, hw: str):
        """A machine's rows of the leaderboard (``best_per_case`` is per machine, so the leaderboard is the union of
        these), each with its rank key, in one data file per machine that ``kernels.html`` loads together: a changed
        machine rewrites its own file, not a 13 MB one of every machine's rows. No page."""
        self.kernel_table(slug("kl", hw), self.rows_at(hw, self.machine_summary(hw)["per_case"]), "", file=True)
        return iter(())

    def kernels_page(self) -> Page:
        # best_per_case's key holds the machine: the union of each machine's is the leaderboard's (ranked below)
        rows = [r for hw in self.kernel_hws for r in self.rows_at(hw, self.machine_summary(hw)["per_case"])]
        # Many machines: the page holds the first rows; every row is in the machines' files (``kernels_part``).
        table = self.kernel_table("kernels", rows, "", srcs=[self.leaderboard_file(hw) for hw in self.kernel_hws]
                                  if self.many_site() else None)
        return Page("kernels.html", "kernels.html", "Kernel leaderboard", active="kernels.html", ctx=dict(
            table=table, n=len(self.kernels), flags=[(FLAG_LABELS.get(f, f), f) for f in FLAGS],
            hws=[(hw, self.hw_name(hw), device_file(hw), len(self.by_hw[hw])) for hw in self.kernel_hws],
            norms=[(n, norm_file(n), len(self.by_norm[n])) for n in sorted(self.by_norm)]))

    def device_page(self, hw: str) -> Page:
        p = Page(device_file(hw), "device.html", hw, active="devices.html", lead=self.hw_name(hw),
                 crumbs=[("devices.html", "Devices")])
        rows = self.by_hw.get(hw, [])
        norms = sorted({r["norm"] for r in rows})
        summary = self.machine_summary(hw)
        best = {r["norm"]: r for r in self.rows_at(hw, summary["best"])}
        best_copy = {r["norm"]: r for r in self.rows_at(hw, summary["best_copy"])}
        if any(self.many(n) for n in norms):
            # Every kernel record of the machine, once, in its data file: its first rows in this page, and the norm
            # pages load a machine's rows of their norm from it (a best-per-case table beside it held the same rows
            # again: ~400 kB a machine; the leaderboard has them per case, filterable by device).
            table = self.kernel_table(slug("km", hw), rows, p.up, with_hw=False, file=True,
                                      preview=_tables.DEEP_PREVIEW)
        else:
            table = self.kernel_table(slug("kd", hw), self.best_per_case(rows), p.up, with_hw=False) if rows else None
        p.ctx = dict(facts=self.hw_facts(hw), n=len(rows), every=table is not None and table.id.startswith("km-"),
                     norms=[(n, self.norm_hw_href(n, hw, "../"), best.get(n), best_copy.get(n)) for n in norms],
                     table=table,
                     fmt_pct=fmt_pct)
        return p

    def hw_facts(self, hw: str) -> list[tuple[str, str]]:
        memo = self.__dict__.setdefault("_facts", {})   # the devices page and each device's page show them
        if hw not in memo:   # a function of the machine's own records: kept between builds
            memo[hw] = self.per_machine("hw_facts", hw, lambda: self._hw_facts(hw))
        return memo[hw]

    def _hw_facts(self, hw: str) -> list[tuple[str, str]]:
        entries = self.hw_entries[hw]
        provs = [e.rec["provenance"] for e in entries]
        h = provs[-1].get("hardware") if isinstance(provs[-1].get("hardware"), dict) else {}

        def seen(key):
            return ", ".join(sorted({str(p.get(key)) for p in provs if p.get(key) not in (None, "")})) or "–"

        ts = sorted(_s(p.get("timestamp")) for p in provs if _s(p.get("timestamp")))
        kr = self.by_hw.get(hw, [])
        ceil = sorted(r["ceiling"] for r in kr if r["ceiling"])
        methods = sorted({m for r in kr if isinstance(m := r["entry"].rec["metrics"].get("ceiling_method"), str)})
        peak = sorted({r["datasheet"] for r in kr if r["datasheet"]})
        commits = sorted({_s(p.get("git_commit"))[:10] for p in provs if _s(p.get("git_commit"))})
        plugins = sorted({f"{k} {v}" for p in provs if isinstance(p.get("plugins"), dict)
                          for k, v in p["plugins"].items()})
        commands = Counter(_s(p.get("command")) for p in provs if _s(p.get("command")))
        return [
            ("CPU", _s(h.get("cpu")) or "–"),
            ("cores / threads", f"{h.get('cores', '–')} / {h.get('threads', '–')}"),
            ("GPU", _s(h.get("gpu")) or "none"),
            ("GPU memory", f"{h.get('gpu_memory_gb')} GB" if num(h.get("gpu_memory_gb")) else "–"),
            ("driver / CUDA", f"{h.get('driver') or '–'} / {h.get('cuda') or '–'}"),
            ("copy ceiling (measured)", (f"{fmt_gbps(ceil[len(ceil) // 2])} median, {fmt_gbps(ceil[0])} – "
                                         f"{fmt_gbps(ceil[-1])}") if ceil else "–"),
            ("ceiling method", "; ".join(methods[:5]) or "–"),
            ("datasheet peak", ", ".join(fmt_gbps(p) for p in peak) or "–"),
            ("platform", seen("platform")), ("Python", seen("python")), ("torch", seen("torch")),
            ("Triton", seen("triton")),
            ("normbench", seen("normbench_version") + (f" (commits {', '.join(commits)})" if commits else "")),
            ("plugins", ", ".join(plugins) or "–"),
            ("records", f"{len(kr)} kernel, {sum(r['hardware'] == hw for r in self.acc_rows)} accuracy"),
            ("taken", f"{ts[0]} – {ts[-1]}" if ts else "–"),
            ("commands", " | ".join(f"{c} (×{n})" for c, n in commands.most_common(3)) or "–"),
        ]

    def compared_norms(self) -> list[str]:
        """Norms measured on more than one device."""
        return [n for n in sorted(self.by_norm) if len(self.norm_hws(n)) > 1]

    def devices_page(self) -> Page:
        hws = sorted(self.hw_entries)
        matrix = self.matrix()
        return Page("devices.html", "devices.html", "Devices", active="devices.html", ctx=dict(
            hws=[(hw, self.hw_name(hw), device_file(hw), self.hw_facts(hw)) for hw in hws], matrix=matrix,
            compared=[(n, norm_compare_file(n), len(self.norm_hws(n)))
                      for n in self.compared_norms()]))

    def compare_page(self, name: str) -> Page:
        """One norm across devices: % of each device's own ceiling against hidden size, one figure per layout, dtype
        and pass (most measured first) while the page stays small."""
        import pandas as pd

        p = Page(norm_compare_file(name), "compare.html", f"{name} across devices", active="devices.html",
                 crumbs=[("devices.html", "Devices"), (norm_file(name), name)])
        # combination -> device -> (its valid rows, their ``_width_best`` points), from each machine's summary
        combos: dict[tuple, dict[str, tuple]] = {}
        for hw in self.norm_hws(name):
            for combo, (n, best) in self.machine_summary(hw)["compare"].get(name, {}).items():
                combos.setdefault(combo, {})[hw] = (n, [(key, self.by_hw[hw][i]) for key, i in best])
        figs, points, left = [], 0, []
        for combo, per_hw in sorted(combos.items(), key=lambda kv: (-sum(n for n, _ in kv[1].values()), kv[0])):
            # Each device's points (``width_frame``'s), chosen without making frames: the page is digested by them
            # on every build and its figures' frames are made only when it is drawn.
            bests = [b for hw in sorted(per_hw) if (b := per_hw[hw][1])]
            if len(bests) < 2 or len({key[4] for b in bests for key, _ in b}) < 2:
                continue
            n = sum(map(len, bests))
            label = " · ".join(combo)
            if figs and points + n > COMPARE_POINTS:
                left.append(label)
                continue

            def frame(bests=bests, up=p.up):
                return pd.concat([self._frame(b, up) for b in bests], ignore_index=True)

            fig = self.figure("device_compare_chart", frame, slug("dc", name, *combo),
                              f"{name} ({label}): % of each device's copy ceiling against hidden size, one colour "
                              "per device, one panel per backend", title=f"{name} · {label}",
                              inputs=repr([self._best_print(b, p.up) for b in bests]),
                              static=False)   # a deep page: the browser draws it (each device's page has the records)
            if fig:
                figs.append(fig)
                points += n
        p.charts = bool(figs)
        p.ctx = dict(name=name, figs=figs, left=left, norm_href=p.up + norm_file(name),
                     devices=[(hw, self.norm_hw_href(name, hw, p.up)) for hw in self.norm_hws(name)
                              if name in self.machine_summary(hw)["compare"]])
        return p

    def norms_index(self) -> Page:
        t = Table("norms", [Col("name"), Col("title"), Col("family"), Col("kind"), Col("paper"), Col("year", True),
                            Col("kernel results", True), Col("training runs", True), Col("package")],
                  filters=[("family", "family"), ("kind", "kind")], cls="wrapping")
        for name in sorted(self.norm_meta):
            m = self.norm_meta[name]
            paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
            year = paper.get("year") if isinstance(paper.get("year"), int) else None
            url = safe_url(paper.get("url"))
            nk = len(self.by_norm.get(name, []))
            na = sum(r["norm"] == name for r in self.acc_rows)
            t.add([cell(name, name, href=norm_file(name)), cell(_s(m.get("title")), _s(m.get("title"))),
                   cell(_s(m.get("family")), _s(m.get("family"))), cell(_s(m.get("kind")), _s(m.get("kind"))),
                   cell(_s(paper.get("title")) or "paper", _s(paper.get("title")), href=url, ext=bool(url)),
                   cell(year or "–", float(year) if year else None), cell(nk, float(nk)), cell(na, float(na)),
                   cell(_s(m.get("package")), _s(m.get("package")))],
                  {"family": _s(m.get("family")), "kind": _s(m.get("kind"))})
        return Page("norms.html", "norms.html", "Norms", active="norms.html", ctx=dict(table=t),
                    lead="Every norm with results, as described by the records themselves (so a plugin's norm shows "
                         "here even where the plugin is not installed). Each norm's page has its GB/s-against-hidden-"
                         "size figures per device and its training results.")

    def norm_page(self, name: str) -> Page:
        m = self.norm_meta[name]
        p = Page(norm_file(name), "norm.html", _s(m.get("title")) or name, active="norms.html",
                 crumbs=[("norms.html", "Norms")])
        up = p.up
        paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
        rows = self.by_norm.get(name, [])
        devices = []
        inline = self.norm_inline(name)
        many = self.many(name)
        for hw in self.norm_hws(name):
            # The machine's section, from what its summary keeps of this norm (``machine_summary``)
            sec = self.machine_summary(hw)["norms"][name]
            if inline:
                figs, points = self._width_figures(name, hw, self.by_norm_hw.get((name, hw), []), up)
            else:
                # With many machines and no figures inline, a machine's section is its button: its figures are not
                # shown, so not planned either (their frames were most of a rebuild's norm pages), only counted.
                n_figs, points = sec["counts"] if self.charts is not None else (0, 0)
                figs = [Markup("")] * n_figs
            devices.append({"hw": hw, "name": self.hw_name(hw), "anchor": slug("d", hw), "figs": figs,
                            "points": points, "href": up + device_file(hw),
                            "fig_href": up + self.norm_hw_href(name, hw),
                            "pick": up + self.machine_file(hw) if many else None,
                            "widths": sec["widths"], "n": sec["n"],
                            "best": [self._top_row(r) | {"href": self.rec_href(r["entry"], up)}
                                     for r in self.rows_at(hw, sec["best"])],
                            "best_copy": [self._top_row(r, copy=True) | {"href": self.rec_href(r["entry"], up)}
                                          for r in self.rows_at(hw, sec["best_copy"])]})
        # Figures inline while the page stays small; with many devices each has its figure page (one click).
        acc = []
        for key, table in self._acc_tables:   # sorted by table_order, as the keys of the norm's cells were
            cells = [c for c in table if c.norm == name and not c.tuning]
            if cells:
                ranked = self._ranked_tables[key]
                for c in cells:
                    acc.append(self._cell_summary(c, ranked.index(c) + 1, len(ranked), up, key))
        p.charts = inline and any(d["figs"] for d in devices)
        p.ctx = dict(
            name=name, meta=m, paper=paper, paper_url=paper.get("url"), devices=devices, acc=acc, inline=inline,
            compare_href=norm_compare_file(name),
            layouts=", ".join(str(x) for x in m.get("layouts") or [] if isinstance(x, (str, int))),
            backends=", ".join(str(x) for x in m.get("backends") or [] if isinstance(x, (str, int))),
            table=(self.kernel_table(slug("kn", name), rows, up, with_norm=False,
                                     srcs=[Table(slug("knd", name, hw), []).data_path
                                           for hw in sorted({r["hardware"] for r in rows})])
                   if self.norm_shared(name) else
                   self.kernel_table(slug("kn", name), rows, up, with_norm=False, srcs=[] if many else None))
            if rows else None)
        if many and p.ctx["table"] is not None:
            p.ctx["table"].only = ("norm", name)   # a machine's file holds every norm's rows
        return p

    def norm_device_page(self, name: str, hw: str) -> Page:
        """One norm on one device: its GB/s and %-of-ceiling figures and the records behind them."""
        p = Page(norm_device_file(name, hw), "norm_device.html", f"{name} on {hw}", active="norms.html",
                 lead=self.hw_name(hw), crumbs=[("norms.html", "Norms"), (norm_file(name), name)])
        hr = self.by_norm_hw.get((name, hw), [])
        # Static SVG where the norm's page draws the same figures (few points: drawn once, shared); else the browser
        # draws them from their spec and the records table below is the view without JavaScript.
        figs, _ = self._width_figures(name, hw, hr, p.up, static=self.norm_inline(name))
        p.charts = bool(figs)
        p.ctx = dict(name=name, hw=hw, figs=figs, device_href=p.up + device_file(hw), n=len(hr),
                     widths=len({r["num_features"] for r in hr}),
                     table=self.kernel_table(slug("knd", name, hw), hr, p.up, with_norm=False,
                                             with_hw=self.norm_shared(name), file=self.norm_shared(name),
                                             preview=_tables.DEEP_PREVIEW))
        return p

    def machine_figures_page(self, hw: str) -> Page:
        """A machine's GB/s and %-of-ceiling figures against hidden size, one section per norm it measured that is on
        many machines (``MANY_MACHINES``: no page per norm and machine), drawn in the browser from their specs (no
        SVG at build time: one page a machine, whatever the number of norms)."""
        p = Page(figures_file(hw), "machine_figures.html", f"Figures of {hw}", active="devices.html",
                 lead=self.hw_name(hw), crumbs=[("devices.html", "Devices"), (device_file(hw), hw)])
        sections = []
        for name in self.machine_norms(hw):
            if not self.many(name):
                continue
            hr = self.by_norm_hw.get((name, hw), [])
            figs, _ = self._width_figures(name, hw, hr, p.up, static=False)
            sections.append({"norm": name, "hw": hw, "anchor": slug("f", name), "figs": figs, "n": len(hr),
                             "widths": len({r["num_features"] for r in hr}),
                             "norm_href": f"{p.up}{norm_file(name)}#{slug('d', hw)}"})
        p.charts = any(x["figs"] for x in sections)
        p.ctx = dict(hw=hw, sections=sections, device_href=p.up + device_file(hw))
        return p

    # --- by model (``bymodel``: normbench best's answer per model, device, site and regime) -------------------------

    def bymodel(self):
        if not hasattr(self, "_bymodel"):
            from normbench.site.bymodel import ByModel

            self._bymodel = ByModel(self.loaded.entries, self.per_machine)
        return self._bymodel

    def models_index(self) -> Page:
        from normbench.site import bymodel as bm

        b = self.bymodel()
        t = Table("models", [Col("model"), Col("device"), Col("family"), Col("dtype"), Col("pass"),
                             Col("answered", True, "cells with a winner, a tie, or the only eligible backend"),
                             Col("undecided", True, "the paired interval holds 1 and leaves the tie band"),
                             Col("flagged", True, "only flagged records (or errors above tolerance)"),
                             Col("missing", True, "no record"), Col("cells", True, "sites x regimes")],
                  filters=[("model", "model"), ("hardware", "device"), ("dtype", "dtype"), ("pass", "pass")])
        hub = self.many_site()
        for r in bm.index_rows(b, self.per_machine, hub):
            t.add([cell(r["name"], r["name"], href=r["href"]), cell(r["hw"], r["hw"], href=device_file(r["hw"])),
                   cell(r["family"], r["family"]), cell(r["dtype"], r["dtype"]), cell(r["pass"], r["pass"]),
                   cell(r["answered"], r["answered"]), cell(r["undecided"], r["undecided"]),
                   cell(r["flagged"], r["flagged"]), cell(r["missing"], r["missing"]), cell(r["cells"], r["cells"])],
                  {"model": r["key"], "hardware": r["hw"], "dtype": r["dtype"], "pass": r["pass"]})
        shard = t.shard("")   # one row per model, machine, dtype and pass: 1,800 rows (1 MB) at 100 machines
        if shard:
            self.data_files[shard[0]] = shard[1]
        measured = {k for k, _ in b.pairs()}
        return Page("models.html", "models.html", "By model", active="models.html", ctx=dict(
            table=t if t.rows else None,
            pages=([(m.name, None, bm.model_hub_file(m.key)) for m in b.models if m.key in measured] if hub else
                   [(m.name, hw, bm.model_file(k, hw)) for k, hw in b.pairs() for m in [b.model(k)]]),
            unmeasured=[(m.key, m.name, m.family) for m in b.models if m.key not in measured]),
            lead="For the norms in a model, at the model's own shapes, which implementation to use on a device: "
                 "normbench best's answer per norm site and regime, and what each choice costs in norm time.")

    def model_page(self, key: str, hw: str) -> Page:
        """A model's answer on one machine: its page, or with many machines (``many_site``) a part of the model's one
        page (``model_hub``), loaded when the machine is picked (a machine's seven model pages were ~0.64 MB of
        mostly "missing" cells; as compressed parts ~0.07 MB)."""
        from normbench.site import bymodel as bm

        b = self.bymodel()
        if self.many_site():
            p = Page(bm.model_part_file(key, hw), "model_part.html", f"{b.model(key).name} on {hw}",
                     part=bm.part_id(key, hw))
        else:
            p = Page(bm.model_file(key, hw), "model.html", f"{b.model(key).name} on {hw}", active="models.html",
                     lead=self.hw_name(hw), crumbs=[("models.html", "By model")])
        p.ctx = {**bm.page_context(b, key, hw, p.up), "device_href": p.up + device_file(hw)}
        return p

    def model_hub(self, key: str) -> Page:
        """A model's one page in a many-machine site: a machine picker; the picked machine's answer is loaded from its
        part (``model_page``), so the page does not grow with the machines' answers."""
        from normbench.site import bymodel as bm

        b = self.bymodel()
        m = b.model(key)
        p = Page(bm.model_hub_file(key), "model_hub.html", m.name, active="models.html",
                 crumbs=[("models.html", "By model")])
        p.ctx = dict(key=key, name=m.name, family=m.family,
                     machines=[(hw, slug(hw), self.hw_name(hw), p.up + bm.model_part_file(key, hw), bm.part_id(key, hw))
                               for k, hw in b.pairs() if k == key])
        return p

    # --- accuracy ------------------------------------------------------------------------------------------------

    @functools.cached_property
    def _acc_tables(self) -> list[tuple[tuple, list]]:
        """The accuracy tables (``Cell.table_key`` -> its cells), in ``table_order``."""
        tables: dict[tuple, list] = {}
        for c in self.cells:
            tables.setdefault(c.table_key, []).append(c)
        return sorted(tables.items(), key=lambda kv: self.table_order(kv[0]))

    @functools.cached_property
    def _ranked_tables(self) -> dict[tuple, list]:
        """``agg.rank_cells`` of each accuracy table's cells, once per build: the overview, the accuracy page, each
        table's page and every norm's page read them."""
        return {key: agg.rank_cells(cells) for key, cells in self._acc_tables}

    @staticmethod
    def table_order(key: tuple) -> tuple:
        """Where a table (``Cell.table_key``) goes: real tasks first, full budgets before quick ones, then task,
        model, the default variant before the others, and machine."""
        offline, task, model, quick, variant, hardware = key
        return (offline, quick, task, model, variant != "default", variant, hardware)

    @staticmethod
    def cell_page_file(key: tuple) -> str:
        offline, task, model, quick, variant, hardware = key
        return f"accuracy/{slug(task, model, variant, 'quick' if quick else 'full', hardware)}.html"

    @staticmethod
    def table_title(key: tuple) -> str:
        offline, task, model, quick, variant, hardware = key
        return f"{task} · {model}" + ("" if variant == "default" else f" · {variant}") + f" on {hardware}"

    def _mean_ci(self, c) -> tuple[str, str]:
        st = c.final
        if st.mean is None:
            return "no finished run", ""
        s = fmt_metric(st.mean, c.metric)
        if st.low is None:
            return s, "one finished seed: no interval"
        tip = (f"geometric mean over {st.n} finished seeds; 95 % CI from a t-interval of log values; sd of log "
               f"{st.std:.3g}" if st.log else f"mean over {st.n} finished seeds; 95 % CI (Student t); "
                                              f"sd {fmt_metric(st.std, c.metric)}")
        return f"{s} [{fmt_metric(st.low, c.metric)}, {fmt_metric(st.high, c.metric)}]", tip

    def _vs_ref(self, c) -> tuple[str, str, float | None]:
        memo = self.__dict__.setdefault("_vs", {})   # a cell's line on its norm's page and in its table
        got = memo.get(id(c))
        if got is None or got[0] is not c:
            got = memo[id(c)] = (c, self._versus_ref(c))
        return got[1]

    def _versus_ref(self, c) -> tuple[str, str, float | None]:
        ref = agg.reference_cell(c, self.cells)
        if ref is None:
            return ("reference" if S.reference_of(c.model) == (c.norm, c.placement) else ""), "", None
        d = S.versus(c.values, ref.values, log=S.is_log_metric(c.metric))
        if d is None:
            return "too few finished seeds", "", None
        name = ref.norm + (f" ({ref.placement})" if ref.placement else "")
        return S.versus_text(d, c.metric), f"against {name}", d.p

    @staticmethod
    def _lr(c) -> str:
        lrs = sorted({str(r["recipe"].get("lr")) for r in c.runs if r["recipe"].get("lr") is not None})
        return ", ".join(lrs) or "–"

    def _cell_summary(self, c, rank: int, of: int, up: str, key: tuple) -> dict:
        mean, tip = self._mean_ci(c)
        return {"title": self.table_title(key), "href": up + self.cell_page_file(key), "placement": c.placement,
                "rank": rank, "of": of, "mean": mean, "tip": tip, "diverged": c.n_diverged, "n": c.n,
                "lr": self._lr(c), "tuned": c.tuned, "metric": c.metric, "hardware": c.hardware,
                "vs": self._vs_ref(c)[0], "offline": key[0], "quick": key[3]}

    def seed_links(self, c, up: str) -> list[tuple[str, str, str]]:
        out = []
        for r in c.runs:
            label = f"s{int(r['seed'])}" if r["seed"] is not None else "run"
            why = ""
            if r["status"] == "diverged":
                label, why = label + "✗", "diverged"
            elif r["status"] == "flagged":
                label, why = label + "⚠", "flagged: " + ", ".join(r["flags"])
            out.append((label, self.rec_href(r["entry"], up), why))
        return out

    def acc_table(self, tid: str, cells: list, up: str) -> Table:
        c0 = cells[0]
        centre = "geometric mean" if S.is_log_metric(c0.metric) else "mean"
        cols = [Col("#", True, sorted="ascending"), Col("norm"), Col("placement"),
                Col(f"{c0.metric} {centre} [95 % CI]", True, _metric_label(c0.metric, c0.higher)),
                Col("best", True, "best evaluation over training, mean over seeds"),
                Col("time to target", True, "mean over the seeds that reached the target (k/n reached)"),
                Col("diverged", True, "seeds whose loss became NaN/inf, of the counted seeds; ranks first"),
                Col("vs reference", True, "against the table's reference (LayerNorm, Pre-LN in GPT tables; BatchNorm "
                    "in ResNet tables): ratio of geometric means (perplexity) or difference (accuracy) with its 95 % "
                    "Welch interval; Welch p, Mann–Whitney p; not corrected for multiple comparisons"),
                Col("lr", True, "learning rate of the counted runs (chosen by the search on the validation split "
                    "when tuned)"),
                Col("wall time", True, "training wall time, mean over seeds"), Col("seeds", True), Col("records")]
        t = Table(tid, cols, filters=[("placement", "placement")])  # one machine's table (its title names it)
        for i, c in enumerate(agg.rank_cells(cells)):
            if c.ttt.mean is not None:
                tgt = cell(fmt_seconds_human(c.ttt.mean), c.ttt.mean, note=f"({c.n_reached}/{c.n})")
            elif c.target is not None:
                tgt = cell(f"not reached (0/{c.n})", None, cls="muted")
            else:
                tgt = cell("no target", None, cls="muted")
            mean, tip = self._mean_ci(c)
            vs, vtip, vp = self._vs_ref(c)
            div = f"{c.n_diverged}/{c.n}"
            seeds = self.seed_links(c, up)
            t.add([
                cell(i + 1, float(i + 1)),
                cell(c.norm, f"{c.norm} {c.options}".strip(), href=up + norm_file(c.norm), note=c.options or None),
                cell(c.placement or "–", c.placement or ""),
                cell(mean, c.final.mean, title=tip, cls="muted" if c.final.mean is None else None),
                cell(fmt_metric(c.best.mean, c.metric), c.best.mean), tgt,
                cell(div, c.divergence_rate, cls="warn" if c.n_diverged else None,
                     note=f"+{c.n_flagged} flagged" if c.n_flagged else None),
                cell(vs, vp, title=vtip, cls="muted" if vp is None else None),
                cell(self._lr(c), num(c.runs[0]["recipe"].get("lr")), note="tuned" if c.tuned else None),
                cell(fmt_seconds_human(c.wall.mean), c.wall.mean), cell(c.n, float(c.n)),
                cell(" ".join(s[0] for s in seeds), None, href=seeds[0][1] if seeds else None,
                     title="records: see the seed table on the cell page"),
            ], {"placement": c.placement or ""}, "diverged" if c.final.mean is None else "")
        return t

    def tuning_rows(self, cells: list, up: str) -> list[dict]:
        """The learning-rate search runs of a table: shown so the choice can be checked, never ranked."""
        out = []
        for c in sorted((c for c in cells if c.tuning), key=lambda c: (c.norm, c.placement or "",
                                                                       str(c.recipe.get("lr")))):
            fin = [r["final"] for r in c.runs if r["final"] is not None]
            val = S.summarize(fin, log=S.is_log_metric(c.metric)).mean
            out.append({"norm": c.norm, "href": up + norm_file(c.norm), "placement": c.placement or "–",
                        "lr": c.recipe.get("lr", "–"), "value": fmt_metric(val, c.metric) if val is not None else "–",
                        "diverged": f"{sum(r['diverged'] for r in c.runs)}/{len(c.runs)}",
                        "seeds": self.seed_links(c, up)})
        return out

    def accuracy_page(self) -> Page:
        tables = []
        for key, cells in self._acc_tables:
            ranked = [c for c in cells if not c.tuning]
            c0 = cells[0]
            tables.append({"key": key, "title": self.table_title(key), "href": self.cell_page_file(key),
                           "anchor": slug("t", *map(str, key)), "offline": key[0], "quick": key[3],
                           "metric": _metric_label(c0.metric, c0.higher),
                           "table": self.acc_table(slug("at", *map(str, key)), ranked, "") if ranked else None,
                           "n_tuning": sum(len(c.runs) for c in cells if c.tuning)})
        # Per norm across cells: its rank and centre in every table it appears in.
        summary = Table("acc-summary", [Col("norm")] + [Col(t["title"], True, t["metric"]) for t in tables],
                        search=False, cls="narrow")
        for n in sorted({c.norm for c in self.cells if not c.tuning}):
            row = [cell(n, n, href=norm_file(n))]
            for key, ranked in self._ranked_tables.items():
                mine = [c for c in ranked if c.norm == n]
                if not mine:
                    row.append(cell("–"))
                    continue
                c = mine[0]
                mean, tip = self._mean_ci(c)
                row.append(cell(f"#{ranked.index(c) + 1}/{len(ranked)}", float(ranked.index(c) + 1),
                                href=self.cell_page_file(key), note=fmt_metric(c.final.mean, c.metric)
                                if c.final.mean is not None else "no finished run",
                                title=f"{mean}; {c.n_diverged}/{c.n} diverged" + (f" ({c.placement})"
                                                                                   if c.placement else "")))
            summary.add(row)
        return Page("accuracy.html", "accuracy.html", "Accuracy leaderboard", active="accuracy.html",
                    ctx=dict(tables=tables, summary=summary if tables else None))

    def cell_page(self, key: tuple, cells: list) -> Page:
        p = Page(self.cell_page_file(key), "cell.html", self.table_title(key), active="accuracy.html",
                 crumbs=[("accuracy.html", "Accuracy")])
        up = p.up
        ranked = self._ranked_tables[key]
        c0 = cells[0]
        import pandas as pd

        seeds, curves = [], []
        for order, c in enumerate(ranked):
            name = c.norm + (f" ({c.placement})" if c.placement else "") + (f" {c.options}" if c.options else "")
            for r in c.runs:
                if r["status"] not in ("ok", "diverged"):
                    continue
                href = self.rec_href(r["entry"], up)
                seeds.append({"norm": name, "order": order, "seed": int(r["seed"] or 0), "value": r["final"],
                              "diverged": r["status"] == "diverged" or r["final"] is None,
                              "centre": c.final.mean, "ci_lo": c.final.low, "ci_hi": c.final.high,
                              "lr": num(r["recipe"].get("lr")), "url": href,
                              "label": f"{name} seed {r['seed']}: " + ("diverged" if r["final"] is None
                                                                       else fmt_metric(r["final"], c.metric))})
                for step, _loss, ev in r["curve"]:
                    if ev is not None:
                        curves.append({"norm": name, "seed": int(r["seed"] or 0), "step": step, "value": ev,
                                       "url": href})
        figs = []
        if seeds:
            figs.append(self.figure("accuracy_seed_chart", pd.DataFrame(seeds), slug("seeds", *map(str, key)),
                                    f"{self.table_title(key)}: final {c0.metric} of every seed per norm, with the "
                                    "95 % interval; diverged seeds marked at the edge", metric=c0.metric,
                                    higher_is_better=c0.higher, title=f"final {c0.metric} per seed"))
        if curves:
            figs.append(self.figure("training_curves_chart", pd.DataFrame(curves), slug("curves", *map(str, key)),
                                    f"{self.table_title(key)}: {c0.metric} during training, one line per seed, one "
                                    "colour per norm", metric=c0.metric, log_y=S.is_log_metric(c0.metric),
                                    title=f"{c0.metric} during training"))
        scatter = []
        for c in ranked:
            if c.final.mean is not None and c.wall.mean is not None:
                name = c.norm + (f" ({c.placement})" if c.placement else "")
                scatter.append({"norm": name, "x": c.wall.mean, "y": c.final.mean,
                                "url": self.rec_href(c.runs[0]["entry"], up),
                                "label": f"{name}: {fmt_metric(c.final.mean, c.metric)} in "
                                         f"{fmt_seconds_human(c.wall.mean)} ({c.final.n} seeds)"})
        if len(scatter) >= 2:
            front = set(agg.pareto_front([(d["x"], d["y"]) for d in scatter], c0.higher))
            for i, d in enumerate(scatter):
                d["front"] = i in front
            figs.append(self.figure("scatter_chart", pd.DataFrame(scatter), slug("sc", *map(str, key)),
                                    f"{self.table_title(key)}: training wall time against final {c0.metric}",
                                    x="x", y="y", label="norm", x_title="training wall time (s)",
                                    y_title=c0.metric, title=f"time against {c0.metric}"))
        figs = [f for f in figs if f]
        seed_rows = []
        for c in ranked:
            for r in c.runs:
                seed_rows.append({"norm": c.norm, "placement": c.placement or "–", "seed": r["seed"],
                                  "status": r["status"], "final": fmt_metric(r["final"], c.metric),
                                  "lr": r["recipe"].get("lr", "–"), "steps": r["steps"],
                                  "wall": fmt_seconds_human(r["wall"]), "href": self.rec_href(r["entry"], up),
                                  "flags": ", ".join(r["flags"])})
        p.charts = bool(figs)
        p.ctx = dict(key=key, offline=key[0], quick=key[3], metric=_metric_label(c0.metric, c0.higher),
                     target=fmt_metric(c0.target, c0.metric) if c0.target is not None else None,
                     table=self.acc_table(slug("ac", *map(str, key)), [c for c in cells if not c.tuning], up)
                     if ranked else None, tuning=self.tuning_rows(cells, up), figs=figs, seeds=seed_rows,
                     recipe_href=f"{up}methodology.html#{slug('recipe', key[1], key[2])}")
        return p

    # --- claims, softmax -----------------------------------------------------------------------------------------

    def claim_results(self) -> list[dict]:
        if not hasattr(self, "_claims"):
            from normbench import claims as C

            # Only the records a claim may read (``claims.reads``): the entries are one per id already, so the
            # outcome is the same. The speed comparisons' rows per machine, kept between builds (``per_machine``):
            # each reads one machine's kernel records, and their scipy tests were a third of a 100-machine rebuild.
            kern: dict[str, list] | None = None   # each machine's kernel entries in the order read

            def machine_rows(hw: str) -> dict:
                nonlocal kern
                if kern is None:   # made once, where a machine's rows are not kept
                    kern = {}
                    for e in self.loaded.entries:
                        if e.kind == "kernel":
                            kern.setdefault(e.hw, []).append(e)
                return C.machine_speed_rows([e.rec for e in kern.get(hw, []) if C.reads(e.rec)])

            speed: dict[str, list[dict]] = {}
            for hw in sorted(self.hw_entries):
                rows = self.per_machine("claims_speed", hw, lambda hw=hw: machine_rows(hw))
                for key, got in rows.items():
                    speed.setdefault(key, []).extend(got)
            self._claims = C.evaluate((e.rec for e in self.loaded.entries
                                       if e.kind != "kernel" and C.reads(e.rec)), speed=speed)
        return self._claims

    def claims_page(self) -> Page:
        from normbench import claims as C

        by_id = {e.rid: e for e in self.loaded.entries}
        results = self.claim_results()
        claims = []
        for c in results:
            comps = []
            for r in c["comparisons"]:
                recs = [(rid[:10], self.rec_href(by_id[rid], "")) for rid in r.get("records", []) if rid in by_id]
                comps.append({**r, "p_welch_s": C.format_p(r.get("p_welch")),
                              "p_mw_s": C.format_p(r.get("p_mann_whitney")),
                              "p_for_s": C.format_p(r.get("p_for_holm")),
                              "p_against_s": C.format_p(r.get("p_against_holm")), "recs": recs})
            claims.append({**c, "anchor": slug("claim", c["id"]), "comps": comps,
                           "p_holm_s": C.format_p(c.get("p_holm")), "vslug": c["verdict"].replace(" ", "-")})
        counts = {v: sum(c["verdict"] == v for c in results) for v in C.VERDICTS}
        return Page("claims.html", "claims.html", "Paper claims", active="claims.html", ctx=dict(
            claims=claims, counts=counts, alpha=C.ALPHA, n_comp=sum(len(c["comparisons"]) for c in results)))

    @staticmethod
    def _softmaxish(r: dict) -> bool:
        return r["family"] == "softmax" or r["norm"] in ("softmax", "log_softmax")

    def softmax_page(self) -> Page:
        rows = [r for r in self.kernels if self._softmaxish(r)]
        algorithms: dict[str, str] = {}
        if rows:
            try:
                from normbench.softmax import ALGORITHM_BACKENDS as algorithms
            except Exception:  # the algorithm notes are a nicety; the records are what is shown
                algorithms = {}
        backends = []
        for b in sorted({r["backend"] for r in rows}):
            br = [r for r in rows if r["backend"] == b]
            passes = sorted({f"{r['pass']}: {int(p)}" for r in br
                             if (p := r["row_passes"]) is not None})
            backends.append({"backend": b, "algorithm": algorithms.get(b, "not defined by normbench (library "
                                                                           "kernel)"),
                             "passes": ", ".join(passes) or "–", "n": len(br)})
        sections, plans = [], []
        for n in sorted({r["norm"] for r in rows}):
            for hw in sorted({r["hardware"] for r in rows if r["norm"] == n}):
                hr = [r for r in self.by_norm_hw.get((n, hw), []) if self._softmaxish(r)]   # ``rows``' order
                plans.append((n, hw, hr, self._width_points(n, hw, hr, "")))
        inline = sum(x[3] for x in plans) <= INLINE_POINTS
        for n, hw, hr, _ in plans:
            figs, points = self._width_figures(n, hw, hr, "", draw=inline)
            sections.append({"norm": n, "hw": hw, "href": norm_file(n), "figs": figs, "points": points,
                             "fig_href": self.norm_hw_href(n, hw),
                             "best": [self._top_row(r) for r in agg.best_by_bandwidth(hr, 5)]})
        # As on a norm's page: figures inline while the page stays small, else one click away per device.
        for x in sections:
            x["inline"] = inline
        claim = next((c for c in self.claim_results() if "softmax" in c["id"]), None)
        return Page("softmax.html", "softmax.html", "Softmax kernels", active="softmax.html",
                    charts=any(x["figs"] and x["inline"] for x in sections), ctx=dict(
                        backends=backends, sections=sections, claim=claim,
                        claim_anchor=slug("claim", claim["id"]) if claim else "", n=len(rows),
                        table=self.kernel_table("softmax", rows, "") if rows else None))

    # --- records -------------------------------------------------------------------------------------------------

    @staticmethod
    def record_summary(e: Entry) -> str:
        """A record's one line on its machine's record page (its detail is loaded on demand): norm, kind and the
        config that tells it from its neighbours."""
        rec, cfg = e.rec, e.rec.get("config") or {}
        keys = (("backend", "shape_label", "dtype", "pass", "timing", "layout") if e.kind == "kernel"
                else ("task", "model", "placement", "seed", "lr"))
        parts = [_text(cfg[k]) for k in keys if cfg.get(k) not in (None, "")]
        return f"{rec['norm']['name']} · {rec['kind']}" + (": " + " · ".join(parts) if parts else "")

    def record_flags(self, e: Entry) -> dict:
        rec = e.rec
        return (agg.record_flags(rec) if e.kind == "kernel"
                else {f: _s((rec.get("flag_reasons") or {}).get(f)) for f in rec.get("flags") or []})

    def record_data(self, entries: list[Entry]) -> str:
        """A record page's data file (``data/machines/<page>.js``): each record's detail, which ``assets/site.js``
        (``nbRecords``) shows when the record is opened. Every string once in ``s``, each list of keys once in ``k``
        (a machine's records share a few), each run's provenance once in ``p`` (``[keys, values]``); a record is
        ``[config keys, config values, metrics keys, metrics values, provenance, file, position in it, check, timing,
        [[flag label, flag, reason]...], reproduce command, 0 ranked | 1 flagged | 2 invalid]`` with strings as
        indices (null where absent), compressed as every data file is (``tables.data_script``)."""
        strings: dict[str, int] = {}
        keysets: dict[tuple, int] = {}
        provs: dict[str, int] = {}
        prov_rows: list = []

        def st(v):
            return None if v is None else strings.setdefault(v, len(strings))

        named: dict[tuple, int] = {}   # a part's keys (as text) -> its key set: a machine's records share a few

        def part(obj) -> list:
            flat = _flat(obj)
            names = tuple([k for k, _ in flat])
            ks = named.get(names)
            if ks is None:   # the keys take their indices in ``s`` here, before the values, as they always did
                ks = named[names] = keysets.setdefault(tuple([st(k) for k in names]), len(keysets))
            return [ks, [st(v) for _, v in flat]]

        recs = []
        for e in entries:
            rec = e.rec
            prov = {k: v for k, v in rec["provenance"].items() if k != "hardware"}
            pkey = _text(prov)
            if pkey not in provs:
                provs[pkey] = len(prov_rows)
                prov_rows.append(part(rec["provenance"]))
            flags = self.record_flags(e)
            chk = rec.get("check")
            check = (f"check: {_text(chk.get('status'))}" if isinstance(chk, dict)
                     else "never checked (check: null)" if chk is None else None)
            status = 2 if any(f in INVALID_FLAGS for f in flags) else 1 if flags else 0
            recs.append(part(rec.get("config")) + part({k: v for k, v in rec["metrics"].items() if k != "curve"})
                        + [provs[pkey], st(e.path), e.index, st(check), st(timing_text(rec)),
                           [[st(label), st(f), st(why)] for label, f, why in flag_badges(flags)],
                           st(command(rec)), status])
        return _tables.data_script("nbRecords", (), {"s": list(strings), "k": [list(k) for k in keysets],
                                                      "p": prov_rows, "r": recs})

    def record_page(self, path: str, entries: list[Entry]) -> Page:
        """The records of one machine (or one bucket of them): a line per record, anchored by its key, whose detail
        (flags with reasons, the reproduce command, config, metrics, its run's provenance) the page's script loads
        from the machine's data file when the record is opened; the records as validated in ``<page>.json.gz``."""
        from normbench.site.records import record_data_file

        hw = entries[0].rec["provenance"]["hardware_id"]
        p = Page(path, "record.html", f"Records of {hw}", lead=self.hw_name(hw),
                 crumbs=[("devices.html", "Devices"), (device_file(hw), hw)])
        data = record_data_file(path)
        self.data_files[data] = self.record_data(entries)
        # The page's records exactly as validated. gzip (no name, no time: the same records give the same bytes): a
        # page's records repeat their run's provenance and config keys, so they compress ~10x.
        text = "[\n" + ",\n".join(json.dumps(e.rec, ensure_ascii=False, separators=(",", ":")) for e in entries)
        # A download like the CSV (``downloads.GZIP``): a 1,000-record machine's 2.97 MB of JSON in 0.395 MB and 76 ms
        # (level 9, Python's default: 0.386 MB in 121 ms; level 1: 0.555 MB in 27 ms).
        self.extra_files[entries[0].json_file] = gzip.compress((text + "\n]\n").encode("utf-8"),
                                                               compresslevel=downloads.GZIP, mtime=0)
        rows = []
        for i, e in enumerate(entries):
            flags = self.record_flags(e)
            rows.append((e.key, e.rid, self.record_summary(e), flag_badges(flags), i))
        norms = Counter(e.rec["norm"]["name"] for e in entries)
        p.ctx = dict(rows=rows, hw=hw, json_href=entries[0].json_file.rsplit("/", 1)[-1], data_href=p.up + data,
                     hw_href=f"../{device_file(hw)}",
                     norms=[(n, f"../{norm_file(n)}", k) for n, k in sorted(norms.items())])
        return p

    # --- methodology, downloads, rejected -------------------------------------------------------------------------

    def methodology_page(self) -> Page:
        # Each formula's norms, and as its example the model of its first row in ``kernels``' order: per machine
        # (kept between builds, ``per_machine``), then the machines' first rows compared by their place in it.
        place = {id(r): i for i, r in enumerate(self.kernels)}
        bm: dict[str, dict] = {}
        for hw, rows in self.by_hw.items():
            for formula, (at, model, norms) in self.per_machine("bytes_models", hw,
                                                                lambda rows=rows: _bytes_models(rows)).items():
                got = bm.setdefault(formula, {"norms": set(), "example": model, "at": place[id(rows[at])]})
                got["norms"].update(norms)
                if place[id(rows[at])] < got["at"]:
                    got["example"], got["at"] = model, place[id(rows[at])]
        recipes: dict[tuple, set] = {}
        for r in self.acc_rows:
            try:
                text = json.dumps(r["recipe"], indent=1, sort_keys=True, default=str)
            except (TypeError, ValueError):
                text = str(r["recipe"])
            recipes.setdefault((r["task"], r["model"]), set()).add(text)
        docs = [(f"methodology/{name}.html", title, key in self.docs) for name, key, title in DOCS]
        return Page("methodology.html", "methodology.html", "Methodology", active="methodology.html", ctx=dict(
            docs=docs,
            bytes_models=[(f, ", ".join(sorted(v["norms"])), json.dumps(v["example"], indent=1, sort_keys=True,
                                                                       default=str)) for f, v in sorted(bm.items())],
            recipes=[(slug("recipe", t, m), f"{t} · {m}", sorted(texts)) for (t, m), texts in sorted(recipes.items())]))

    def doc_page(self, name: str, key: str, title: str) -> Page:
        text = self.docs.get(key)
        if text is not None:
            m = re.match(r"\s*#\s+(.+?)\s*#*\s*(\n|$)", text)
            if m:  # the document's own title heads its page
                title, text = m.group(1), text[m.end():]
        return Page(f"methodology/{name}.html", "doc.html", title, active="methodology.html",
                    crumbs=[("methodology.html", "Methodology")],
                    ctx=dict(html=markdown.render(text, heading_offset=1) if text is not None else None, key=key))

    def hw_records(self, hw: str) -> list[Entry]:
        """A device's records in record-page order (its download files' rows)."""
        if not hasattr(self, "_hw_records"):
            self._hw_records: dict[str, list[Entry]] = {}
            for es in self._record_groups().values():
                for e in es:
                    self._hw_records.setdefault(e.hw, []).append(e)
        return self._hw_records.get(hw, [])

    def download_part(self, hw: str):
        """A device's records as gzip-compressed CSV and Parquet (``downloads.part_files``); no page."""

        csv, parquet = downloads.part_files(self.hw_records(hw))
        stem = download_stem(hw)
        self.extra_files[f"{stem}.csv.gz"] = csv
        self.extra_files[f"{stem}.parquet"] = parquet
        return iter(())

    def downloads_page(self) -> Page:
        parts = [(hw, self.hw_name(hw), download_stem(hw), len(self.hw_records(hw))) for hw in sorted(self.hw_entries)]
        return Page("downloads.html", "downloads.html", "Downloads", ctx=dict(
            n=len(self.loaded.entries), n_kernel=len(self.kernels), n_acc=len(self.acc_rows), parts=parts))

    def rejected_page(self) -> Page:
        return Page("rejected.html", "rejected.html", "Rejected records", active="rejected.html", ctx=dict(
            rejected=self.loaded.rejected,
            superseded=[(old, new, self.rec_href(new, "")) for old, new in self.loaded.superseded]))

    def jobs(self) -> list[tuple]:
        """The build's units of work, in page order: each job renders one or more pages (``run``) from this site's
        data alone, so jobs may run in any order and in other processes (``build._render_all``) with the same bytes."""
        jobs: list[tuple] = [("overview",), ("kernels_page",), ("models_index",)]
        jobs += [("model_page", key, hw) for key, hw in self.bymodel().pairs()]
        if self.many_site():
            jobs += [("model_hub", key) for key in dict.fromkeys(key for key, _ in self.bymodel().pairs())]
        jobs.append(("devices_page",))
        jobs += [("compare_page", name) for name in self.compared_norms()]
        jobs += [("device_page", hw) for hw in sorted(self.hw_entries)]
        jobs += [("machine_figures_page", hw) for hw in self.kernel_hws if any(self.many(n) for n in
                                                                                self.machine_norms(hw))]
        jobs.append(("norms_index",))
        for name in sorted(self.norm_meta):
            jobs.append(("norm", name))
            if not self.many(name):
                jobs += [("norm_device", name, hw) for hw in self.norm_hws(name)]
        jobs += [("accuracy_page",)]
        jobs += [("cell_page", key) for key, _ in self._acc_tables]
        # The claims page and the softmax page in one job: both show the claims' verdicts (``claim_results``, a
        # second or two at 100 machines), which two jobs made once in each of two workers.
        jobs += [("claims_page",), ("methodology_page",)]
        jobs += [("doc_page", *d) for d in DOCS]
        jobs += [("downloads_page",), ("rejected_page",)]
        jobs += [("download_part", hw) for hw in sorted(self.hw_entries)]
        if self.many_site():
            jobs += [("kernels_part", hw) for hw in self.kernel_hws]
        jobs += [("record_page", path) for path in self._record_groups()]
        return jobs

    def run(self, job: tuple):
        """The pages of one job (see ``jobs``)."""
        what, *args = job
        if what in ("norm", "norm_device") and getattr(self, "_memo_norm", None) != args[0]:
            self._wfig.clear()   # a norm's figure frames, shared by its pages; one norm's at a time
            self._wplan.clear()
            self._memo_norm = args[0]
        if what == "machine_figures_page":   # a machine's figures of every norm: its frames are its own
            self._wfig.clear()
            self._wplan.clear()
            self._memo_norm = None
        if what == "norm":
            yield self.norm_page(args[0])
        elif what == "norm_device":
            yield self.norm_device_page(*args)
        elif what == "cell_page":
            yield self.cell_page(args[0], dict(self._acc_tables)[args[0]])
        elif what == "record_page":
            yield self.record_page(args[0], self._record_groups()[args[0]])
        elif what == "download_part":
            yield from self.download_part(args[0])
        elif what == "kernels_part":
            yield from self.kernels_part(args[0])
        elif what == "claims_page":
            yield self.claims_page()
            yield self.softmax_page()
        else:
            yield getattr(self, what)(*args)

    def _record_groups(self) -> dict[str, list[Entry]]:
        if not hasattr(self, "_groups"):
            self._groups = pages_of(self.loaded.entries)
        return self._groups

    def pages(self):
        for job in self.jobs():
            yield from self.run(job)


def _na(v) -> bool:
    """Whether a frame would hold ``v`` as missing (``pandas.isna``: None or NaN)."""
    return v is None or (isinstance(v, float) and v != v)


def _metric_label(metric: str, higher: bool) -> str:
    return f"{metric} ({'higher' if higher else 'lower'} is better)"


def _flat(obj, prefix: str = "", depth: int = 0, out: list | None = None) -> list[tuple[str, str]]:
    """(dotted key, value as text) of a record part, two levels deep, for the record page's tables."""
    out = [] if out is None else out
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if isinstance(v, dict) and depth < 1 and v:
            _flat(v, f"{prefix}{k}.", depth + 1, out)
        else:
            out.append((f"{prefix}{k}", _text(v)))
    return out


def _text(v) -> str:
    """A value as the record pages show it: text as is, anything else as JSON (``json.dumps``, whose output for a
    finite float, an int, a bool and null is written directly here: the same text, without its machinery)."""
    t = type(v)
    if t is str:
        return v
    if t is float and math.isfinite(v):
        return float.__repr__(v)
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(v)


def read_docs(docs_dir: Path | None) -> dict[str, str]:
    out = {}
    if docs_dir is None:
        return out
    for _, key, _ in DOCS:
        p = docs_dir / key
        if p.is_file():
            try:
                # The markers around generated blocks (normbench.gendocs) are for the generator, not the reader.
                out[key] = MARKER_LINE.sub("", p.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                pass
    return out
