"""Measure the site build at scale: synthetic v2 kernel records (copies of committed ones, varied) in a temp dir.

    python scripts/site_scale.py 10000 100000        # builds each, prints build time and the largest files

Each synthetic record copies a committed kernel record of the same norm and varies device, backend, dtype, pass and
hidden size; time, GB/s and percent of ceiling are recomputed so every record is valid (a measurement of the build,
not of any kernel). The committed accuracy records are copied too. Nothing is written outside the temp dir.
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


def measure(n: int, keep: bool = False) -> dict:
    from normbench.site import build_site

    tmp = Path(tempfile.mkdtemp(prefix=f"nb-scale-{n}-"))
    try:
        recs = synthetic(n)
        recs += [r for _, r in iter_records(REPO / "results") if r["kind"] == "accuracy"]
        t0 = time.perf_counter()
        write_records(recs, tmp / "results")
        t_write = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = build_site(tmp / "results", tmp / "site", docs=REPO / "docs")
        t_build = time.perf_counter() - t0
        # One device re-measured: every record of the first synthetic device gets another peak memory.
        n_changed = change_device(tmp / "results", "gpu-synthetic-0")
        t0 = time.perf_counter()
        again = build_site(tmp / "results", tmp / "site", docs=REPO / "docs")
        t_incr = time.perf_counter() - t0
        html = sorted((p.stat().st_size, p) for p in (tmp / "site").rglob("*.html"))
        data = sorted((p.stat().st_size, p) for p in (tmp / "site").rglob("*.js") if "data" in p.parts)
        files = sorted((p.stat().st_size, p) for p in (tmp / "site").rglob("*") if p.is_file())
        total = sum(size for size, _ in files)
        res = {"records": report.records, "pages": report.pages, "build_s": t_build, "write_s": t_write,
               "incr_s": t_incr, "incr_rendered": len(again.rendered or ()), "incr_changed": n_changed,
               "largest_page": (html[-1][1].relative_to(tmp / "site").as_posix(), html[-1][0]),
               "largest_data": (data[-1][1].relative_to(tmp / "site").as_posix(), data[-1][0]) if data else None,
               "largest_file": (files[-1][1].relative_to(tmp / "site").as_posix(), files[-1][0]),
               "records_bytes": sum(size for size, p in files if "records" in p.relative_to(tmp / "site").parts),
               "total_bytes": total}
        return res
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (to look at the sites)")
    args = ap.parse_args()
    for n in args.sizes:
        r = measure(n, args.keep)
        lp, ld = r["largest_page"], r["largest_data"]
        print(f"{n} synthetic kernel records (+ committed accuracy): {r['records']} records, {r['pages']} pages, "
              f"build {r['build_s']:.1f} s (writing the records {r['write_s']:.1f} s); rebuild after one device's "
              f"{r['incr_changed']} records changed {r['incr_s']:.1f} s ({r['incr_rendered']} pages rendered); "
              f"largest page {lp[0]} "
              f"{lp[1] / 1e6:.2f} MB" + (f"; largest data file {ld[0]} {ld[1] / 1e6:.2f} MB" if ld else "")
              + f"; largest file {r['largest_file'][0]} {r['largest_file'][1] / 1e6:.2f} MB"
              + f"; site {r['total_bytes'] / 1e6:.0f} MB (record pages and JSON {r['records_bytes'] / 1e6:.0f} MB)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
