"""Measure the site build at scale: synthetic v2 kernel records (copies of committed ones, varied) in a temp dir.

    python scripts/site_scale.py 10000 100000        # builds each, prints build time and the largest files
    python scripts/site_scale.py 10000 --dir /tmp/nbs --only cold --jobs 1 --profile /tmp/nbs/prof
    python scripts/site_scale.py 10000 --dir /tmp/nbs --only rebuild --jobs 1 --profile /tmp/nbs/prof
    python scripts/site_scale.py --machines 100 --records-per-machine 1000 --dir /tmp/nbm   # the machines layout

Two layouts. By size (the positional sizes): each synthetic record copies a committed kernel record of the same norm
and varies device (10 hardware ids at 100k), backend, dtype, pass and hidden size; time, GB/s and percent of ceiling
are recomputed so every record is valid (a measurement of the build, not of any kernel). By machines (``--machines N
--records-per-machine M``): the committed kernel records copied as they are onto N synthetic machines, M records each
(a public leaderboard's shape: many submitted machines, each with its own sweep, every norm on every machine). The
committed accuracy records are copied too. Nothing is written outside the temp dir.
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from normbench.records import iter_records, write_records  # noqa: E402
from normbench.records.schema import record_id  # noqa: E402

BACKENDS = ("eager", "compile", "triton")
DTYPES = ("float32", "bfloat16", "float16")
PASSES = ("fwd", "bwd", "fwd+bwd")
WIDTHS = (256, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 11008, 12288, 16384)
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA RTX 4090",
        "NVIDIA B200", "AMD Instinct MI300X", "NVIDIA GH200")


def synthetic(n: int, seed: int = 0) -> list[dict]:
    """``n`` valid kernel records: devices x norms x backends x dtypes x passes x widths, in that order."""
    rng = random.Random(seed)
    templates: dict[str, dict] = {}
    for _, rec in iter_records(REPO / "results"):
        if rec["kind"] == "kernel" and rec["config"]["layout"] == "tokens":
            templates.setdefault(rec["norm"]["name"], rec)
    norms = sorted(templates)
    per_device = len(norms) * len(BACKENDS) * len(DTYPES) * len(PASSES) * len(WIDTHS)
    out = []
    for d in range(math.ceil(n / per_device)):
        gpu = GPUS[d % len(GPUS)]
        hwid = f"gpu-synthetic-{d}"
        ceiling = rng.uniform(1500, 4500)
        for name in norms:
            base = templates[name]
            for backend in BACKENDS:
                for dtype in DTYPES:
                    elem = 4 if dtype == "float32" else 2
                    for pss in PASSES:
                        for width in WIDTHS:
                            if len(out) == n:
                                return out
                            rows = 8192
                            rec = copy.deepcopy(base)
                            cfg, met, prov = rec["config"], rec["metrics"], rec["provenance"]
                            cfg.update(backend=backend, dtype=dtype, device="cuda", timing="cold", threads=1,
                                       shape=[rows, width], num_features=width, shape_class="llm",
                                       shape_label=f"llm-{rows}x{width}")
                            cfg["pass"] = pss
                            nbytes = (2 if pss == "fwd" else 3 if pss == "bwd" else 5) * rows * width * elem
                            frac = min(0.95, 0.2 + 0.75 * (1 - math.exp(-width / 3000))) * rng.uniform(0.6, 1.0)
                            t = nbytes / (frac * ceiling * 1e9)
                            gbps = nbytes / t / 1e9
                            met.update(time_median_s=t, time_iqr_s=t * 0.02, reps=100, bytes_moved=nbytes, gbps=gbps,
                                       ceiling_gbps=ceiling, pct_of_ceiling=100.0 * gbps / ceiling,
                                       datasheet_peak_gbps=None, peak_mem_bytes=nbytes, saved_bytes=0)
                            prov.update(hardware_id=hwid, hardware=dict(prov["hardware"], gpu=gpu, gpu_memory_gb=80.0,
                                                                        driver="570.00", cuda="12.8"))
                            rec["check"] = {"status": "passed", "impl_hash": "0123456789abcdef", "detail": None}
                            rec["impl_hash"] = "0123456789abcdef"
                            rec["flags"], rec["flag_reasons"] = [], {}
                            rec["id"] = record_id("kernel", name, cfg, hwid, rec["impl_hash"])
                            out.append(rec)
    return out


def machines(n_machines: int, per_machine: int) -> list[dict]:
    """``per_machine`` committed kernel records (of every committed machine) on each of ``n_machines`` synthetic
    machines (``cpu-machine-<i>``), taken one norm at a time round-robin (so every norm is on every machine), with
    only the hardware id (and so the record id) changed; a record whose new id an earlier one took (two committed
    machines measured the same case) gets another thread count, so every copy is a distinct case."""
    by_norm: dict[str, list[dict]] = {}
    for _, rec in iter_records(REPO / "results"):
        if rec["kind"] == "kernel":
            by_norm.setdefault(rec["norm"]["name"], []).append(rec)
    queues = [list(v) for _, v in sorted(by_norm.items())]
    pool, seen = [], set()
    while any(queues):
        for q in queues:
            if q:
                rec = copy.deepcopy(q.pop(0))
                cfg = rec["config"]
                while (rid := record_id("kernel", rec["norm"]["name"], cfg, "x", rec.get("impl_hash"))) in seen:
                    cfg["threads"] = int(cfg.get("threads") or 1) + 1
                seen.add(rid)
                pool.append(rec)
    if per_machine > len(pool):
        raise SystemExit(f"--records-per-machine {per_machine}: the committed results have {len(pool)} kernel "
                         "records; ask for that many or fewer")
    out = []
    for m in range(n_machines):
        hwid = f"cpu-machine-{m}"
        for base in pool[:per_machine]:
            rec = copy.deepcopy(base)
            rec["provenance"]["hardware_id"] = hwid
            rec["id"] = record_id("kernel", rec["norm"]["name"], rec["config"], hwid, rec.get("impl_hash"))
            out.append(rec)
    return out


def change_device(results: Path, hwid: str) -> int:
    """Rewrite every record of device ``hwid`` with another peak memory (as a re-measurement would); how many."""
    from normbench.records.store import atomic_write_bytes, dump_compact, read_record_file

    n = 0
    for path in sorted((results / "kernel" / hwid).glob("*.json.gz")):
        recs, _ = read_record_file(path)
        for rec in recs:
            rec["metrics"]["peak_mem_bytes"] = int(rec["metrics"]["peak_mem_bytes"] or 0) + 4096
            n += 1
        atomic_write_bytes(path, dump_compact(recs))
    return n


def _sizes(site: Path) -> dict:
    html = sorted((p.stat().st_size, p) for p in site.rglob("*.html"))
    data = sorted((p.stat().st_size, p) for p in site.rglob("*.js") if "data" in p.parts)
    files = sorted((p.stat().st_size, p) for p in site.rglob("*") if p.is_file())
    return {"largest_page": (html[-1][1].relative_to(site).as_posix(), html[-1][0]),
            "largest_data": (data[-1][1].relative_to(site).as_posix(), data[-1][0]) if data else None,
            "largest_file": (files[-1][1].relative_to(site).as_posix(), files[-1][0]),
            "records_bytes": sum(size for size, p in files if "records" in p.relative_to(site).parts),
            "total_bytes": sum(size for size, _ in files), "files": len(files),
            "by_dir": {d: sum(size for size, p in files if p.relative_to(site).parts[0] == d)
                       for d in sorted({p.relative_to(site).parts[0] for _, p in files})}}


def _build(results: Path, site: Path, jobs: int | None, profile: Path | None):
    """``build_site`` once (under cProfile into ``profile`` when given: the parent process only, so profile with
    ``--jobs 1`` to see the pages' work); (report, wall seconds)."""
    from normbench.site import build_site

    prof = None
    if profile is not None:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    report = build_site(results, site, docs=REPO / "docs", jobs=jobs)
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        profile.parent.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(profile)
        import pstats

        print(f"--- profile {profile} (top 30 by cumulative time)", flush=True)
        pstats.Stats(str(profile)).sort_stats("cumulative").print_stats(30)
    return report, wall


BROWSER_PAGES = ("index.html", "kernels.html")


def browser_load(site: Path, pages=BROWSER_PAGES, runs: int = 3) -> dict:
    """Median seconds from navigation to the page's script having loaded every table (``<html class="js">``), in
    Debian's Chromium driven by Playwright over ``file://`` (as tests/test_site_browser.py drives it): page -> s."""
    import statistics

    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            for name in pages:
                times = []
                for _ in range(runs):
                    page = browser.new_page()
                    t0 = time.perf_counter()
                    page.goto((site / name).resolve().as_uri())
                    page.wait_for_function("document.documentElement.classList.contains('js')", timeout=120_000)
                    times.append(time.perf_counter() - t0)
                    page.close()
                out[name] = statistics.median(times)
        finally:
            browser.close()
    return out


def measure(n: int, keep: bool = False, work: Path | None = None, only: str = "all", jobs: int | None = None,
            profile: str | None = None, browser: bool = False, per_machine: int | None = None) -> dict:
    """Build ``n`` synthetic records cold (cache emptied first), then change one device's records and rebuild.
    ``work``: a directory kept between invocations (records written once into ``work/<n>/results``; the site and
    its cache in ``work/<n>``), so ``only="rebuild"`` can time (and profile) a rebuild alone. ``per_machine``: the
    machines layout (``n`` machines of ``per_machine`` records each, ``machines``), in ``work/<n>x<per_machine>``."""
    name = f"{n}x{per_machine}" if per_machine else str(n)
    changed = "cpu-machine-0" if per_machine else "gpu-synthetic-0"
    tmp = Path(work) / name if work is not None else Path(tempfile.mkdtemp(prefix=f"nb-scale-{name}-"))
    tmp.mkdir(parents=True, exist_ok=True)
    results, site = tmp / "results", tmp / "site"
    cache = site.parent / f".{site.name}.cache"
    res: dict = {"write_s": None, "build_s": None, "incr_s": None}
    try:
        if not results.is_dir():
            recs = machines(n, per_machine) if per_machine else synthetic(n)
            recs += [r for _, r in iter_records(REPO / "results") if r["kind"] == "accuracy"]
            t0 = time.perf_counter()
            write_records(recs, results)
            res["write_s"] = time.perf_counter() - t0
        report = None
        if only in ("all", "cold"):
            shutil.rmtree(cache, ignore_errors=True)   # cold: nothing to reuse
            report, res["build_s"] = _build(results, site, jobs,
                                            Path(f"{profile}-{name}-cold.pstats") if profile else None)
        if only in ("all", "rebuild"):
            # One device re-measured: every record of the first synthetic device gets another peak memory.
            res["incr_changed"] = change_device(results, changed)
            report, res["incr_s"] = _build(results, site, jobs,
                                           Path(f"{profile}-{name}-rebuild.pstats") if profile else None)
            res["incr_rendered"] = len(report.rendered or ())
        res.update(records=report.records, pages=report.pages, **_sizes(site))
        import resource

        # ru_maxrss is in kB on Linux; the build's page workers are children
        res["peak_rss"] = 1024 * max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                                     resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        if browser:
            res["browser_s"] = browser_load(site)
        return res
    finally:
        if keep or work is not None:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=None,
                    help="records of the 10-device layout (default 10000 100000 unless --machines)")
    ap.add_argument("--machines", type=int, action="append", default=None, metavar="N",
                    help="the machines layout: N synthetic machines (repeatable: --machines 100 --machines 200)")
    ap.add_argument("--records-per-machine", type=int, default=1000, metavar="M",
                    help="with --machines: committed kernel records per machine (default 1000)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (to look at the sites)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="work in DIR/<size> and keep it: the records are written once, so later invocations time "
                         "(and profile) the builds alone")
    ap.add_argument("--only", choices=("all", "cold", "rebuild"), default="all",
                    help="cold: a build with an empty cache; rebuild: change one device's records and rebuild "
                         "(needs an earlier build in --dir); all: both (default)")
    ap.add_argument("--jobs", type=int, default=None, help="processes to render pages in (default: the CPUs)")
    ap.add_argument("--profile", default=None, metavar="PREFIX",
                    help="cProfile each build into PREFIX-<size>-<cold|rebuild>.pstats (the parent process only: "
                         "use --jobs 1 to profile the pages too)")
    ap.add_argument("--browser", action="store_true",
                    help="also time the index and kernel leaderboard pages loading in Chromium (median of 3)")
    args = ap.parse_args()
    if args.sizes and args.machines:
        ap.error("give either sizes (the 10-device layout) or --machines (the machines layout), not both")
    if args.records_per_machine < 1 or any(m < 1 for m in args.machines or ()):
        ap.error("--machines and --records-per-machine must be at least 1")
    runs = ([(m, args.records_per_machine) for m in args.machines] if args.machines
            else [(n, None) for n in (args.sizes or [10_000, 100_000])])
    for n, per in runs:
        r = measure(n, args.keep, args.dir, args.only, args.jobs, args.profile, args.browser, per)
        lp, ld = r["largest_page"], r["largest_data"]
        what = (f"{n} machines x {per} committed kernel records" if per
                else f"{n} synthetic kernel records")
        parts = [f"{what} (+ committed accuracy): {r['records']} records, {r['pages']} pages, {r['files']} files"]
        if r["write_s"] is not None:
            parts.append(f"writing the records {r['write_s']:.1f} s")
        if r["build_s"] is not None:
            parts.append(f"cold build {r['build_s']:.1f} s")
        if r["incr_s"] is not None:
            parts.append(f"rebuild after one device's {r['incr_changed']} records changed {r['incr_s']:.1f} s "
                         f"({r['incr_rendered']} pages rendered)")
        parts.append(f"largest page {lp[0]} {lp[1] / 1e6:.2f} MB"
                     + (f"; largest data file {ld[0]} {ld[1] / 1e6:.2f} MB" if ld else "")
                     + f"; largest file {r['largest_file'][0]} {r['largest_file'][1] / 1e6:.2f} MB"
                     + f"; site {r['total_bytes'] / 1e6:.0f} MB (record pages and JSON "
                     + f"{r['records_bytes'] / 1e6:.0f} MB)")
        parts.append("by top folder: " + ", ".join(f"{d} {b / 1e6:.1f} MB" for d, b in r["by_dir"].items()
                                                   if b >= 1e5))
        parts.append(f"peak memory (this process and its children, max RSS) {r['peak_rss'] / 1e6:.0f} MB")
        if r.get("browser_s"):
            loads = ", ".join(f"{k} {v:.2f} s" for k, v in r["browser_s"].items())
            parts.append(f"browser load (median of 3): {loads}")
        print("; ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
