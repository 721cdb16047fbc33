"""Softmax as a normalization kernel: its algorithm backends, passes per row, and the two-pass claim.

The ``softmax`` and ``log_softmax`` norms (``normbench.norms.softmax``) have one backend per algorithm, so one chart
compares them: ``eager`` (torch), ``compile`` (torch.compile of torch.softmax), ``compile_three_pass`` and
``compile_two_pass`` (torch.compile of explicit formulations, the CPU check of the paper's claim), and the Triton
kernels ``triton_three_pass``, ``triton_online`` and ``triton_two_pass`` (``normbench.kernels._softmax``).
docs/softmax.md has the algorithms, their passes and the bytes formulas. The compiled formulations are in
``normbench.kernels.softmax_compiled`` (apart from this module, so its implementation hash does not cover the claim).
"""

from __future__ import annotations

from torch import nn

#: Backends whose forward algorithm, passes over the row and implementation normbench defines.
ALGORITHM_BACKENDS = {
    "compile_three_pass": "three-pass (max; exp and Σ, storing exp; rescale) compiled by Inductor",
    "compile_two_pass": "two-pass (Σ exp(x − first entry), no max pass; normalize) compiled by Inductor",
    "triton_three_pass": "Triton three-pass (max; Σ exp; normalize) for rows that do not fit on chip",
    "triton_online": "Triton online two-pass (running max and rescaled sum; normalize)",
    "triton_two_pass": "Triton two-pass of Dukhan & Ablavatski (extended-range sum, no max pass; normalize)",
}
#: Backend pairs compared by the two-pass claim (two-pass first).
CLAIM_PAIRS = (("compile_two_pass", "compile_three_pass"), ("triton_two_pass", "triton_three_pass"))
#: Rows at least this wide (bytes of one input row) do not stay close to the core: on a CPU beyond a core's private
#: cache (this CPU: 2 MiB L2 per core), on a GPU beyond the Triton kernels' on-chip row (16384 float32 = 64 KiB), so
#: each pass over them reads memory (or the shared last-level cache).
OUT_OF_CACHE_ROW_BYTES = {"cpu": 4 * 2**20, "cuda": 64 * 2**10}
#: ... and an input this large (with its output, twice that) exceeds the last-level cache (this CPU: 260 MiB L3;
#: H100/H200: 50-60 MiB L2).
OUT_OF_CACHE_TENSOR_BYTES = 256 * 2**20


def row_passes(module: nn.Module, pass_: str) -> int | None:
    """Reads of each input row a softmax backend makes in ``pass_``; ``None`` where normbench does not define the
    implementation (eager, compile of torch.softmax, external libraries)."""
    fn = getattr(module, "row_passes", None)
    return fn(pass_) if callable(fn) else None


# --- the paper's claim, from kernel records -------------------------------------------------------------------------

def _elem_bytes(dtype: str) -> int:
    return {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}.get(dtype, 4)


def two_pass_claim_evidence(df, *, min_row_bytes: int | None = None,
                            min_tensor_bytes: int = OUT_OF_CACHE_TENSOR_BYTES, pass_: str = "fwd"):
    """Two-pass vs three-pass softmax on out-of-cache rows (Dukhan & Ablavatski: up to 28% faster with AVX512).

    ``df`` is ``normbench.results.load(..., kind="kernel")`` (one row per record, with ``norm``, ``backend``,
    ``dtype``, ``pass``, ``shape``, ``num_features``, ``time_median_s`` or ``metrics`` columns as the loader gives;
    see ``_frame``). Records are paired when they share the norm, hardware, run (``git_commit`` and ``timing``),
    dtype, shape and pass, and one is the two-pass backend and the other the three-pass backend of the same family
    (``compile_two_pass``/``compile_three_pass``, ``triton_two_pass``/``triton_three_pass``). Only rows of at least
    ``min_row_bytes`` in inputs of at least ``min_tensor_bytes`` count (the paper's "out-of-cache";
    ``min_row_bytes`` defaults to ``OUT_OF_CACHE_ROW_BYTES`` of the record's device). Flagged records (any
    ``flags``, or ``suspect``) are left out.

    Returns a DataFrame with one row per pair: norm, hardware_id, device, pair, dtype, shape, row_bytes,
    tensor_bytes, time_two_pass_s, time_three_pass_s, iqr_two_pass_s, iqr_three_pass_s, speedup (= time_three_pass
    / time_two_pass, > 1 when the two-pass is faster), and ``separated`` (the two IQR ranges do not overlap). Empty
    when nothing qualifies.
    """
    import pandas as pd

    f = _frame(df)
    cols = ["norm", "hardware_id", "device", "pair", "dtype", "shape", "row_bytes", "tensor_bytes", "time_two_pass_s",
            "time_three_pass_s", "iqr_two_pass_s", "iqr_three_pass_s", "speedup", "separated"]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = f[(f["pass"] == pass_) & f["norm"].isin(["softmax", "log_softmax"]) & ~f["flagged"]]
    row_min = [min_row_bytes if min_row_bytes is not None
               else OUT_OF_CACHE_ROW_BYTES["cuda" if str(d).startswith("cuda") else "cpu"] for d in f["device"]]
    big = [int(rb) >= m and int(tb) >= min_tensor_bytes
           for rb, tb, m in zip(f["row_bytes"], f["tensor_bytes"], row_min, strict=True)]
    f = f[pd.Series(big, index=f.index, dtype=bool)]
    key = ["norm", "hardware_id", "run", "timing", "dtype", "shape"]
    rows = []
    for two, three in CLAIM_PAIRS:
        a = f[f["backend"] == two]
        b = f[f["backend"] == three]
        if a.empty or b.empty:
            continue
        m = a.merge(b, on=key, suffixes=("_2", "_3"))
        for _, r in m.iterrows():
            lo2, hi2 = r["q25_2"], r["q75_2"]
            lo3, hi3 = r["q25_3"], r["q75_3"]
            rows.append({
                "norm": r["norm"], "hardware_id": r["hardware_id"], "device": r["device_2"],
                "pair": f"{two} vs {three}", "dtype": r["dtype"], "shape": r["shape"],
                "row_bytes": int(r["row_bytes_2"]), "tensor_bytes": int(r["tensor_bytes_2"]),
                "time_two_pass_s": r["time_2"], "time_three_pass_s": r["time_3"], "iqr_two_pass_s": r["iqr_2"],
                "iqr_three_pass_s": r["iqr_3"], "speedup": r["time_3"] / r["time_2"],
                "separated": bool(hi2 < lo3 or hi3 < lo2),
            })
    return pd.DataFrame(rows, columns=cols)


def _frame(df):
    """A flat frame (norm, backend, pass, dtype, shape, times, flags, sizes) from loader output or raw records."""
    import pandas as pd

    if isinstance(df, list):
        recs = df
    else:
        recs = df.to_dict("records") if len(df) else []
    out = []
    for r in recs:
        cfg = r.get("config") if isinstance(r.get("config"), dict) else r
        met = r.get("metrics") if isinstance(r.get("metrics"), dict) else r
        prov = r.get("provenance") if isinstance(r.get("provenance"), dict) else r
        norm = r.get("norm")
        norm = norm.get("name") if isinstance(norm, dict) else norm
        shape = cfg.get("shape")
        if shape is None:
            continue
        shape = tuple(int(d) for d in shape)
        n = 1
        for d in shape:
            n *= d
        e = _elem_bytes(cfg.get("dtype", "float32"))
        flags = r.get("flags")
        flagged = bool(len(flags)) if isinstance(flags, (list, tuple)) else False
        flagged = flagged or bool(met.get("suspect", False))
        out.append({
            "norm": norm, "backend": cfg.get("backend"), "pass": cfg.get("pass"), "dtype": cfg.get("dtype"),
            "device": cfg.get("device"), "timing": cfg.get("timing"), "shape": "x".join(map(str, shape)),
            "row_bytes": shape[-1] * e, "tensor_bytes": n * e,
            "hardware_id": prov.get("hardware_id"), "run": prov.get("git_commit"),
            "time": met.get("time_median_s"), "iqr": met.get("time_iqr_s"),
            "q25": met.get("time_q25_s", met.get("time_median_s")),
            "q75": met.get("time_q75_s", met.get("time_median_s")), "flagged": flagged,
        })
    return pd.DataFrame(out)


# --- the generated block of docs/softmax.md -------------------------------------------------------------------------

def _ms(v) -> str:
    return "–" if v is None or v != v else f"{v * 1e3:.4g}"


def softmax_markdown(records: list[dict]) -> str:
    """The measured softmax records (per hardware) and the two-pass vs three-pass pairs, as Markdown tables."""
    soft = [r for r in records if r.get("kind") == "kernel" and (r.get("norm") or {}).get("kind") == "softmax"]
    if not soft:
        return "No softmax kernel records yet."
    out = []
    by_hw: dict[str, list[dict]] = {}
    for r in soft:
        by_hw.setdefault(str(r["provenance"].get("hardware_id")), []).append(r)
    for hw in sorted(by_hw):
        recs = sorted(by_hw[hw], key=lambda r: (r["norm"]["name"], r["config"]["shape_label"] if "shape_label" in
                                                r["config"] else str(r["config"]["shape"]), r["config"]["dtype"],
                                                r["config"]["pass"], r["metrics"]["time_median_s"]))
        hwd = recs[0]["provenance"].get("hardware") or {}
        what = hwd.get("gpu") or hwd.get("cpu") or hw
        out.append(f"#### `{hw}` ({what}; {recs[0]['config'].get('threads')} threads)\n")
        out.append("| norm | shape | dtype | pass | backend | median ms | IQR ms | GB/s | % of copy ceiling | "
                   "row passes | flags |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in recs:
            c, m = r["config"], r["metrics"]
            pct = m.get("pct_of_ceiling")
            flags = ", ".join(r.get("flags") or ()) or ""
            passes = m.get("row_passes")
            out.append(f"| {r['norm']['name']} | {c.get('shape_label', c['shape'])} | {c['dtype']} | {c['pass']} | "
                       f"{c['backend']} | {_ms(m['time_median_s'])} | {_ms(m.get('time_iqr_s'))} | "
                       f"{m['gbps']:.3g} | {'–' if pct is None else f'{pct:.0f}'} | "
                       f"{'–' if passes is None else passes} | {flags} |")
        out.append("")
    ev = two_pass_claim_evidence(soft)
    out.append("Two-pass against three-pass on out-of-cache rows (`two_pass_claim_evidence`, forward; speed-up = "
               "three-pass time / two-pass time; separated = the interquartile ranges do not overlap):\n")
    if ev.empty:
        out.append("No matched out-of-cache pairs yet.")
    else:
        out.append("| hardware | norm | pair | shape | dtype | two-pass ms | three-pass ms | speed-up | separated |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for _, e in ev.iterrows():
            out.append(f"| {e['hardware_id']} | {e['norm']} | {e['pair']} | {e['shape']} | {e['dtype']} | "
                       f"{_ms(e['time_two_pass_s'])} | {_ms(e['time_three_pass_s'])} | {e['speedup']:.3f} | "
                       f"{'yes' if e['separated'] else 'no'} |")
    return "\n".join(out).rstrip()
