"""Turning records into leaderboard rows: kernel rows with speed-ups, accuracy cells, rankings and Pareto fronts.

Pure functions over plain data; no HTML here. The statistics themselves (how seeds combine, what ranks first) are
``normbench.stats``, shared with ``normbench claims``, the ``train`` summary and the generated docs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from normbench import stats as S
from normbench.records.residency import known_caches, ranked_against_dram, record_residency
from normbench.records.schema import INVALID_FLAGS, bound_by, implied_flags
from normbench.site.fmt import num
from normbench.site.records import Entry

# --- kernels ---------------------------------------------------------------------------------------------------------

def _s(v, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _err(err, part: str, key: str) -> float | None:
    if isinstance(err, dict) and isinstance(err.get(part), dict):
        return num(err[part].get(key))
    return None


def _shape(shape) -> tuple:
    if isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return tuple(shape)
    return ()


def record_flags(rec: dict) -> dict[str, str]:
    """{flag: reason} of a record: its v2 flags, or what a v1 record's data implies (never an empty reason)."""
    flags = rec.get("flags")
    if not isinstance(flags, list):
        return implied_flags(rec)
    reasons = rec.get("flag_reasons") if isinstance(rec.get("flag_reasons"), dict) else {}
    return {str(f): _s(reasons.get(f)) or f"flagged {f}" for f in flags}


def kernel_row(e: Entry) -> dict:
    """The flat view of a kernel record that tables, plots and rankings use.

    ``flags`` maps each flag to its reason; a row with any flag is ``flagged`` and never ranked, one with an invalid
    flag (non-finite output or gradient) is ``invalid``: shown as failed, its numbers not used anywhere.
    """
    rec = e.rec
    cfg, met, prov = rec["config"], rec["metrics"], rec["provenance"]
    flags = record_flags(rec)
    shape = _shape(cfg.get("shape"))
    elems = math.prod(shape) if shape else None
    return {
        "entry": e,
        "hardware": prov["hardware_id"],
        "norm": rec["norm"]["name"],
        "family": _s(rec["norm"].get("family")),
        "backend": _s(cfg.get("backend"), "?"),
        "layout": _s(cfg.get("layout"), "?"),
        "shape": shape,
        "elements": elems,
        "num_features": num(cfg.get("num_features")),
        "dtype": _s(cfg.get("dtype"), "?"),
        "pass": _s(cfg.get("pass"), "?"),
        "device": _s(cfg.get("device"), "?"),
        "timing": _s(cfg.get("timing"), "?"),
        "threads": num(cfg.get("threads")),
        # cli, asv or pytest-benchmark: the same configuration timed by two harnesses is two rows.
        "harness": _s(cfg.get("harness"), "cli"),
        "shape_class": _s(cfg.get("shape_class"), "?"),
        "time": num(met.get("time_median_s")),
        # Issue #35: the host's time in one call (GPU records) and which of the two bounds a stream of calls.
        "host": num(met.get("host_s")),
        "bound": bound_by(rec),
        "iqr": num(met.get("time_iqr_s")),
        "reps": num(met.get("reps")),
        "bytes": num(met.get("bytes_moved")),
        "gbps": num(met.get("gbps")),
        "ceiling": num(met.get("ceiling_gbps")),
        "pct": num(met.get("pct_of_ceiling")),
        # Issue #28: the same-size copy reference, and where the data lived (filled in by add_cache_residency).
        "copy_gbps": num(met.get("copy_same_size_gbps")),
        "pct_copy": num(met.get("pct_of_same_size_copy")),
        "cache": met.get("cache_resident") if met.get("cache_resident") in ("L2", "LLC", "none") else None,
        "cache_how": "recorded" if met.get("cache_resident") in ("L2", "LLC", "none") else "unknown",
        "dram": met.get("cache_resident") in ("none", None),
        "datasheet": num(met.get("datasheet_peak_gbps")),
        "flags": flags,
        "flagged": bool(flags),
        "invalid": any(f in INVALID_FLAGS for f in flags),
        "suspect": "suspect" in flags,
        "suspect_reason": flags.get("suspect", ""),
        "peak_mem": num(met.get("peak_mem_bytes")),
        "saved": num(met.get("saved_bytes")),
        "err_y": _err(met.get("err"), "y", "max_abs"),
        "err_y_rel": _err(met.get("err"), "y", "max_rel"),
        "err_dx": _err(met.get("err"), "dx", "max_abs"),
        "err_dw": _err(met.get("err"), "dw", "max_abs"),
        "timestamp": _s(prov.get("timestamp")),
        "speedup": None,
        "row_passes": num(met.get("row_passes")),   # softmax: the passes over a row its algorithm makes
    }


def kernel_rows(entries: list[Entry], store=None) -> list[dict]:
    """``kernel_row`` of each kernel entry, in order. ``store`` (a ``results.readcache.PickleDir`` whose namespace
    covers the code that judges records and makes rows: the site cache's ``rows``) keeps each record file's rows
    under its bytes' hash (``Entry.digest``), so an unchanged file's rows are one unpickle instead of a row per
    record: a row is a function of its record as judged (the file's bytes and the judging code; the stale and legacy
    flags ``records_that_count`` gives a copy that counts are part of that) and of this code. What depends on other
    records (speed-up, cache residency) is set afterwards, on every build."""
    kern = [e for e in entries if e.kind == "kernel"]
    if store is None:
        return [kernel_row(e) for e in kern]
    files: dict[tuple[str, str], list[Entry]] = {}
    for e in kern:   # by file (two files of the same bytes each get their own rows)
        files.setdefault((e.digest, e.path), []).append(e)
    rows: dict[int, dict] = {}
    for (digest, _path), es in files.items():
        if not digest:   # not read through the read cache: no identity to keep rows under
            rows.update((id(e), kernel_row(e)) for e in es)
            continue
        kept = store.get(("kernel rows", digest))
        kept = kept if isinstance(kept, dict) else {}
        fresh = False
        for e in es:
            r = kept.get(e.index)
            if r is None:
                kept[e.index] = r = kernel_row(e)
                fresh = True
            else:
                r["entry"] = e   # each build unpickles its own copy
            rows[id(e)] = r
        if fresh:   # as made (before speed-ups and residency are set), without their entries
            store.put(("kernel rows", digest), {i: dict(r, entry=None) for i, r in kept.items()})
    return [rows[id(e)] for e in kern]


def _same_measurement(r: dict) -> tuple:
    """Everything that must match for two kernel rows to be timed against each other (all but the backend)."""
    return (r["hardware"], r["norm"], r["layout"], r["shape"], r["dtype"], r["pass"], r["device"], r["timing"],
            r["threads"], r["harness"])


def add_speedups(rows: list[dict]) -> None:
    """Set ``speedup`` = eager time / this time where an unflagged eager run of the same measurement exists
    (an invalid row gets none: its time is of a broken computation)."""
    eager = {_same_measurement(r): r["time"] for r in rows
             if r["backend"] == "eager" and r["time"] and not r["flagged"]}
    for r in rows:
        base = eager.get(_same_measurement(r))
        r["speedup"] = base / r["time"] if base and r["time"] and not r["invalid"] else None


def add_cache_residency(rows: list[dict]) -> None:
    """Set each row's ``cache`` (``L2``, ``LLC``, ``none`` or None: unknown), how it is known (``cache_how``:
    recorded, derived from the cache sizes its hardware's newer records recorded, assumed for an unknown quick shape,
    unknown) and ``dram``: whether it may be ranked against the DRAM copy ceiling (``normbench.records.residency``)."""
    known = known_caches(r["entry"].rec for r in rows)
    for r in rows:
        r["cache"], r["cache_how"] = record_residency(r["entry"].rec, known)
        r["dram"] = ranked_against_dram(r["cache"])


def derive_machine(rows: list[dict]) -> list[tuple]:
    """What the rows of one machine get from its other rows: ``add_speedups``, ``add_cache_residency`` and
    ``keep_bandwidth_keys`` on them, then (speedup, cache, cache_how, dram, bandwidth key) of each row in order, for
    ``apply_derived`` (a site keeps it per machine between builds: each reads that machine's records alone)."""
    add_speedups(rows)
    add_cache_residency(rows)
    keep_bandwidth_keys(rows)
    return [(r["speedup"], r["cache"], r["cache_how"], r["dram"], r["_bkey"]) for r in rows]


def apply_derived(rows: list[dict], derived: list[tuple]) -> None:
    """Set what ``derive_machine`` gave for the same rows (a no-op on the rows it was computed on)."""
    if len(derived) != len(rows):
        raise ValueError(f"derived values for {len(derived)} rows, not {len(rows)}")
    for r, (speedup, cache, how, dram, key) in zip(rows, derived):
        r["speedup"], r["cache"], r["cache_how"], r["dram"], r["_bkey"] = speedup, cache, how, dram, key


def _tier(r: dict) -> int:
    """0: ranked against the DRAM ceiling; 1: cache-resident, ranked against its same-size copy; 2: neither."""
    if r.get("dram", True):
        return 0 if r["pct"] is not None or r["gbps"] is not None else 2
    return 1 if r.get("pct_copy") is not None else 2


def _score(r: dict) -> float:
    pct = r["pct"] if _tier(r) == 0 else r.get("pct_copy")
    return pct if pct is not None else -1.0


def rank_by_bandwidth(rows: list[dict]) -> list[dict]:
    """Closest to the bandwidth ceiling first: rows whose data came from DRAM by percent of the DRAM copy ceiling
    (then GB/s), then cache-resident rows by percent of their same-size copy (issue #28: a cache-resident case is
    never ranked against the DRAM ceiling), then the rest. Flagged rows go after every unflagged one (invalid ones
    last), rows without numbers after them."""
    return sorted(rows, key=bandwidth_key)


def bandwidth_key(r: dict) -> tuple:
    """The sort key of ``rank_by_bandwidth`` (kept in the row as ``_bkey`` by ``keep_bandwidth_keys``)."""
    key = r.get("_bkey")
    return key if key is not None else _bandwidth_key(r)


def keep_bandwidth_keys(rows: list[dict]) -> None:
    """Store each row's ``bandwidth_key`` in it (rows final: speed-ups and cache residency set), so the many rankings
    of a site sort without computing it again."""
    for r in rows:
        r["_bkey"] = _bandwidth_key(r)


def _bandwidth_key(r: dict) -> tuple:
    return (r["invalid"], r["flagged"], r["pct"] is None and r["gbps"] is None, _tier(r), -_score(r),
            -(r["gbps"] or 0.0), r["entry"].rid)


def rank_json(key: tuple) -> list:
    """``bandwidth_key`` as JSON for a data file (``assets/site.js`` orders the union of several files by it):
    booleans as 0/1, numbers finite."""
    out = []
    for v in key:
        if isinstance(v, bool):
            out.append(int(v))
        elif isinstance(v, float):
            out.append(v if math.isfinite(v) else (1e308 if v > 0 else -1e308))
        else:
            out.append(v)
    return out


def best_by_bandwidth(rows: list[dict], n: int = 5) -> list[dict]:
    """The ``n`` unflagged rows closest to the DRAM copy ceiling, among rows that are not cache-resident."""
    return [r for r in rank_by_bandwidth(rows) if not r["flagged"] and _tier(r) == 0][:n]


def best_by_same_size_copy(rows: list[dict], n: int = 5) -> list[dict]:
    """The ``n`` unflagged cache-resident rows closest to their same-size copy (``pct_copy``)."""
    return [r for r in rank_by_bandwidth(rows) if not r["flagged"] and _tier(r) == 1][:n]


def best_backend_per_norm(rows: list[dict], basis: str = "dram") -> list[dict]:
    """For each norm, its best unflagged row, sorted best first: ``basis="dram"`` by percent of the DRAM ceiling
    (GB/s where no ceiling) among rows that are not cache-resident; ``"copy"`` by percent of the same-size copy among
    cache-resident rows."""
    tier = {"dram": 0, "copy": 1}[basis]
    best: dict[str, dict] = {}
    for r in rows:
        if r["flagged"] or _tier(r) != tier:
            continue
        cur = best.get(r["norm"])
        if cur is None or (_score(r), r["gbps"] or 0.0) > (_score(cur), cur["gbps"] or 0.0):
            best[r["norm"]] = r
    return sorted(best.values(), key=lambda r: (-_score(r), -(r["gbps"] or 0.0), r["norm"]))


# --- accuracy --------------------------------------------------------------------------------------------------------

def accuracy_row(e: Entry) -> dict:
    rec = e.rec
    cfg, met, prov = rec["config"], rec["metrics"], rec["provenance"]
    curve = []
    for p in met.get("curve") or []:
        if isinstance(p, list) and len(p) == 3 and isinstance(p[0], int) and not isinstance(p[0], bool):
            curve.append((p[0], num(p[1]), num(p[2])))
    rest = {k: v for k, v in cfg.items() if k != "seed"}
    try:
        cell = json.dumps([prov["hardware_id"], rec["norm"]["name"], rest], sort_keys=True, default=str)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted; the record then is its own cell
        cell = e.rid
    return {
        "entry": e,
        "hardware": prov["hardware_id"],
        "norm": rec["norm"]["name"],
        "task": _s(cfg.get("task"), "?"),
        "offline": cfg.get("task_offline") is True,
        "model": _s(cfg.get("model"), "?"),
        "placement": cfg.get("placement") if isinstance(cfg.get("placement"), str) else None,
        "quick": cfg.get("quick") is True,
        "seed": num(cfg.get("seed")),
        "recipe": cfg.get("recipe") if isinstance(cfg.get("recipe"), dict) else {},
        # A recipe variant (batch size 2, a deep stack, ...) is its own experiment and gets its own table.
        "variant": _s(cfg.get("variant"), "default") or "default",
        "options": _options(cfg),
        "metric": _s(met.get("metric"), "metric"),
        "higher": met.get("higher_is_better") is not False,
        "final": num(met.get("final")),
        "best": num(met.get("best")),
        "steps": num(met.get("steps")),
        "wall": num(met.get("wall_time_s")),
        "target": num(met.get("target")),
        "ttt": num(met.get("time_to_target_s")),
        "stt": num(met.get("steps_to_target")),
        "diverged": met.get("diverged") is True or "diverged" in _flags(rec),
        # ok | diverged | tuning | flagged (normbench.stats.record_status): only ok and diverged runs count.
        "status": S.record_status(rec),
        "flags": _flags(rec),
        "curve": curve,
        "timestamp": _s(prov.get("timestamp")),
        "cell": cell,
    }


def _flags(rec: dict) -> list[str]:
    flags = rec.get("flags")
    return [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []


@dataclass
class Cell:
    """All seeds of one (hardware, norm, config-but-seed): the unit a leaderboard row summarises.

    Diverged runs count in the divergence rate (they have no final metric); flagged runs are listed but never
    counted; a cell of tuning runs (the learning-rate search) is shown apart and never ranked.
    """

    runs: list[dict]
    final: S.Summary = field(init=False)
    best: S.Summary = field(init=False)
    wall: S.Summary = field(init=False)
    ttt: S.Summary = field(init=False)

    def __post_init__(self):
        self.runs.sort(key=lambda r: (r["seed"] if r["seed"] is not None else math.inf, r["entry"].rid))
        ok = [r for r in self.runs if r["status"] == "ok" and r["final"] is not None]
        counted = [r for r in self.runs if r["status"] in ("ok", "diverged")]
        log = S.is_log_metric(self.runs[0]["metric"])
        self.final = S.summarize([r["final"] for r in ok], log=log)
        self.best = S.summarize([r["best"] for r in ok], log=log)
        self.wall = S.summarize([r["wall"] for r in counted])
        self.ttt = S.summarize([r["ttt"] for r in ok if r["ttt"] is not None])
        self._counted = counted

    def __getattr__(self, name):
        # Fields every run of a cell shares (hardware, norm, task, model, placement, metric, ...).
        if name in ("hardware", "norm", "task", "offline", "model", "placement", "quick", "metric", "higher",
                    "target", "recipe", "variant", "options"):
            return self.runs[0][name]
        raise AttributeError(name)

    @property
    def values(self) -> list[float]:
        """Final metrics of the finished, unflagged runs (what the statistics use)."""
        return [r["final"] for r in self.runs if r["status"] == "ok" and r["final"] is not None]

    @property
    def n(self) -> int:
        """Runs that count: finished or diverged (flagged and tuning runs do not)."""
        return len(self._counted)

    @property
    def n_diverged(self) -> int:
        """Counted runs without a finite final metric (diverged)."""
        return sum(r["status"] == "diverged" or r["final"] is None for r in self._counted)

    @property
    def n_flagged(self) -> int:
        return sum(r["status"] == "flagged" for r in self.runs)

    @property
    def tuned(self) -> bool:
        """Test runs at a learning rate chosen on the validation split (``config.lr_search``)."""
        return any(isinstance(r["entry"].rec["config"].get("lr_search"), dict) for r in self.runs)

    @property
    def tuning(self) -> bool:
        """A cell of learning-rate search runs: shown apart, never ranked."""
        return bool(self.runs) and all(r["status"] == "tuning" for r in self.runs)

    @property
    def divergence_rate(self) -> float | None:
        return self.n_diverged / self.n if self.n else None

    @property
    def n_reached(self) -> int:
        return sum(r["ttt"] is not None or r["stt"] is not None for r in self._counted)

    @property
    def table_key(self) -> tuple:
        """The leaderboard table this cell belongs to: one per task, model, budget, recipe variant and machine
        (cells never compare across hardware: a table ranks one machine's runs)."""
        return (self.offline, self.task, self.model, self.quick, self.variant, self.hardware)


def _options(cfg: dict) -> str:
    """Model options besides the norm and placement that distinguish cells of one table (QK-norm, a base norm)."""
    opts = []
    if cfg.get("qk_norm") is True:
        opts.append("+qk_norm")
    if isinstance(cfg.get("base_norm"), str) and cfg.get("base_norm"):
        opts.append(f"on {cfg['base_norm']}")
    if isinstance(cfg.get("backend"), str) and cfg["backend"] != "eager":
        opts.append(f"via {cfg['backend']}")
    return " ".join(opts)


def accuracy_cells(rows: list[dict]) -> list[Cell]:
    """Cells of runs sharing hardware, norm and config but the seed; tuning runs never share a cell with others."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["cell"], r["status"] == "tuning"), []).append(r)
    return [Cell(runs) for runs in groups.values()]


def reference_cell(c: Cell, cells: list[Cell]) -> Cell | None:
    """The cell ``c`` is tested against (``normbench.stats.reference_of``): same table and hardware; a tuned one
    before an untuned one, then the one with the most runs; None for the reference itself or where there is none."""
    ref = S.reference_of(c.model)
    if ref is None or c.tuning:
        return None
    match = [x for x in cells if not x.tuning and x.table_key == c.table_key and x.hardware == c.hardware
             and x.options == c.options and (x.norm, x.placement) == ref]
    best = max(match, key=lambda x: (x.tuned, x.n), default=None)
    return None if best is None or best is c else best


def rank_cells(cells: list[Cell]) -> list[Cell]:
    """Best first (``normbench.stats.rank_key``): lowest divergence rate, then the final metric in its own
    direction (geometric mean for perplexity); cells with no counted or no finished run go last. Tuning cells are
    not ranked (left out)."""
    return sorted((c for c in cells if not c.tuning),
                  key=lambda c: (S.rank_key(c.divergence_rate, c.final.mean, c.higher), -c.final.n, c.norm))


def pareto_front(points: list[tuple[float, float]], higher_is_better: bool = True) -> list[int]:
    """Indices of the points no other point beats on both cost (x, lower is better) and quality (y).

    Returned in order of increasing x. Ties in x keep only the best y.
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1] if higher_is_better
                                                      else points[i][1]))
    front, best = [], None
    for i in order:
        y = points[i][1]
        if best is None or (y > best if higher_is_better else y < best):
            front.append(i)
            best = y
    return front

