"""The core of a build's ``Site``: the records' rows by machine and norm, what is memoised per build and kept
between builds (``per_machine``), and the build's jobs (``jobs``, ``run``): each page module adds its pages to it.
"""

from __future__ import annotations

import functools

from normbench.site import aggregate as agg
from normbench.site import pages
from normbench.site.fmt import num
from normbench.site.pages.base import DOCS, SiteInfo, _s, figures_file, norm_device_file
from normbench.site.records import Entry, Loaded, pages_of, slug
from normbench.site.tables import Table


class SiteCore:
    """A build's records as the pages read them (rows by machine and norm), its memos, and its jobs."""

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
        return len(self.norm_hws(name)) > pages.MANY_MACHINES

    def norm_hw_href(self, name: str, hw: str, up: str = "") -> str:
        """Where a norm on one machine is shown: its figure page, or (``many``) the norm's section of the machine's
        figures page (which links the machine's section of the norm's page, whose button loads its every record)."""
        return up + (f"{figures_file(hw)}#{slug('f', name)}" if self.many(name) else norm_device_file(name, hw))

    @staticmethod
    def machine_file(hw: str) -> str:
        """A machine's every kernel record as table rows (site-relative; written with its device page)."""
        return Table(slug("km", hw), []).data_path

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

    def hw_records(self, hw: str) -> list[Entry]:
        """A device's records in record-page order (its download files' rows)."""
        if not hasattr(self, "_hw_records"):
            self._hw_records: dict[str, list[Entry]] = {}
            for es in self._record_groups().values():
                for e in es:
                    self._hw_records.setdefault(e.hw, []).append(e)
        return self._hw_records.get(hw, [])

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
