"""Synthetic result records for the site tests (written to tmp dirs only, never into results/); holds no tests."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from normbench.results import make_record, write_records

CPU_HW = {"cpu": "Test CPU 9000", "cores": 8, "threads": 8, "gpu": None, "gpu_memory_gb": None, "driver": None,
          "cuda": None}
GPU_HW = {"cpu": "Test Host CPU", "cores": 16, "threads": 16, "gpu": "NVIDIA H200", "gpu_memory_gb": 139.8,
          "driver": "565.57", "cuda": "12.8"}


def norm_meta(name: str, **over) -> dict:
    meta = {
        "name": name,
        "title": name.replace("_", " ").title(),
        "paper": {"title": f"The {name} paper", "authors": "A. Author, B. Author", "year": 2020,
                  "url": f"https://arxiv.org/abs/2001.{abs(hash(name)) % 99999:05d}"},
        "family": "features",
        "kind": "activation",
        "layouts": ["tokens"],
        "formula": "y = γ·(x−μ)/√(σ²+ε)+β",
        "batch_dependent": False,
        "running_state": False,
        "backends": ["eager", "compile"],
        "package": "normbench",
        "package_version": "0.1.0",
        "notes": "",
    }
    meta.update(over)
    return meta


def prov(hw: dict, hardware_id: str, ts: str = "2025-11-21T10:00:00Z", **over) -> dict:
    p = {
        "timestamp": ts, "normbench_version": "0.1.0", "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "python": "3.11.2", "torch": "2.13.0", "triton": None, "platform": "Linux-test-x86_64",
        "hardware": dict(hw), "hardware_id": hardware_id, "plugins": {}, "command": "normbench bench --quick",
    }
    p.update(over)
    return p


def kernel(norm: str | dict, backend: str, shape: list[int], time_s: float, *, dtype="float32", pss="fwd",
           ceiling=20.0, hw=CPU_HW, hwid="cpu-test-cpu-9000-8c", suspect=False, ts="2025-11-21T10:00:00Z",
           shape_class="llm", device="cpu", timing="cold", peak_mem=None, legacy=False) -> dict:
    meta = norm if isinstance(norm, dict) else norm_meta(norm)
    elem = 4 if dtype == "float32" else 2
    n = math.prod(shape)
    nbytes = 2 * n * elem + 2 * shape[-1] * elem
    gbps = nbytes / time_s / 1e9
    cfg = {"backend": backend, "layout": "tokens", "shape": list(shape), "num_features": shape[-1], "dtype": dtype,
           "pass": pss, "device": device, "timing": timing, "threads": hw["threads"], "shape_class": shape_class}
    met = {"time_median_s": time_s, "time_iqr_s": time_s * 0.03, "reps": 50, "bytes_moved": nbytes, "gbps": gbps,
           "ceiling_gbps": ceiling, "pct_of_ceiling": 100.0 * gbps / ceiling if ceiling else None,
           "datasheet_peak_gbps": 4800.0 if hw.get("gpu") else None, "suspect": suspect,
           "suspect_reason": "above the measured ceiling (cache-resident)" if suspect else None,
           "peak_mem_bytes": peak_mem if peak_mem is not None else n * elem, "saved_bytes": 0,
           "err": {"y": {"max_abs": 2e-7, "max_rel": 1e-6}, "dx": None, "dw": None}}
    flags = {"suspect": met["suspect_reason"]} if suspect else {}
    # Passed `normbench check` unless ``legacy`` (a migrated v1 record: check null, never ranked).
    check = None if legacy else {"status": "passed", "impl_hash": "0123456789abcdef", "detail": None}
    p = prov(hw, hwid, ts)
    return make_record("kernel", meta, cfg, met, p, flags=flags, flag_reasons=flags, check=check,
                       impl_hash="" if legacy else current_impl_hash(meta["name"], backend, p))


def current_impl_hash(norm: str, backend: str, p: dict) -> str:
    """The hash today's code of a registered norm has at ``p``'s torch/Triton versions (so the site does not mark the
    record stale); a fixed one for a norm or backend this installation lacks (the site cannot judge it)."""
    import normbench

    try:
        return normbench.get_norm(norm).impl_hash(backend, libraries={"torch": p["torch"], "triton": p["triton"]})
    except KeyError:
        return "0123456789abcdef"


def accuracy(norm: str | dict, seed: int, final: float | None, *, task="cifar10", model="resnet18", offline=False,
             diverged=False, wall=100.0, ttt=None, metric="top1", higher=True, placement=None, quick=False,
             hw=CPU_HW, hwid="cpu-test-cpu-9000-8c", ts="2025-11-21T12:00:00Z", target=0.9) -> dict:
    meta = norm if isinstance(norm, dict) else norm_meta(norm)
    cfg = {"task": task, "task_offline": offline, "model": model, "placement": placement, "seed": seed,
           "recipe": {"optimizer": "sgd", "lr": 0.1, "epochs": 30}, "quick": quick, "device": "cpu",
           "batch_size": 128}
    curve = [[s, 2.3 * math.exp(-s / 400) + 0.1 * seed, None if s % 200 else (final or 0.1) * (1 - math.exp(-s / 300))]
             for s in range(0, 1001, 100)]
    met = {"metric": metric, "higher_is_better": higher, "final": final, "best": final, "steps": 1000,
           "wall_time_s": wall, "target": target, "time_to_target_s": ttt, "steps_to_target": None if ttt is None
           else int(ttt * 5), "diverged": diverged, "diverged_step": 420 if diverged else None,
           "curve": [[s, None if diverged and s > 400 else loss, ev] for s, loss, ev in curve]}
    return make_record("accuracy", meta, cfg, met, prov(hw, hwid, ts))


def demo_records() -> list[dict]:
    """A small but complete leaderboard: two machines, several norms, backends, shapes, dtypes and seeds."""
    recs = []
    specs = {
        "layernorm": norm_meta("layernorm", title="Layer Normalization"),
        "rmsnorm": norm_meta("rmsnorm", title="RMSNorm", formula="y = γ·x/√(mean(x²)+ε)"),
        "dyt": norm_meta("dyt", title="Dynamic Tanh", family="pointwise", formula="y = γ·tanh(α·x)+β"),
        "groupnorm": norm_meta("groupnorm", title="Group Normalization", family="groups", layouts=["images"]),
    }
    speed = {"layernorm": 1.0, "rmsnorm": 0.8, "dyt": 0.7, "groupnorm": 1.3}
    for name, meta in specs.items():
        for c in (256, 1024, 4096):
            for dtype in ("float32", "bfloat16"):
                for pss in ("fwd", "fwd+bwd"):
                    base = speed[name] * c * 512 * 1e-9 * (1 if dtype == "float32" else 0.6) * (1 if pss == "fwd"
                                                                                                 else 2.5)
                    recs.append(kernel(meta, "eager", [512, c], base + 2e-5, dtype=dtype, pss=pss))
                    recs.append(kernel(meta, "compile", [512, c], base * 0.7 + 1e-5, dtype=dtype, pss=pss))
        for c in (1024, 4096, 8192):
            ceiling = 4000.0
            base = speed[name] * c * 8192 * 4 * 2 / 3.2e12
            recs.append(kernel(meta, "eager", [8192, c], base * 1.6, hw=GPU_HW, hwid="gpu-nvidia-h200",
                               ceiling=ceiling, device="cuda", dtype="bfloat16"))
            recs.append(kernel(meta, "triton", [8192, c], base, hw=GPU_HW, hwid="gpu-nvidia-h200", ceiling=ceiling,
                               device="cuda", dtype="bfloat16"))
    recs.append(kernel(specs["rmsnorm"], "compile", [64, 256], 4.4e-6, ceiling=20.0, suspect=True,
                       shape_class="quick"))
    # The fastest-looking record of all, but a migrated v1 one never checked: shown, never ranked.
    recs.append(kernel(specs["dyt"], "compile", [512, 4096], 0.9e-3, legacy=True))
    finals = {"layernorm": (0.912, 0.915, 0.909), "rmsnorm": (0.918, 0.914, 0.916), "dyt": (0.905, None, 0.907),
              "groupnorm": (0.897, 0.901, 0.899)}
    walls = {"layernorm": 120.0, "rmsnorm": 110.0, "dyt": 100.0, "groupnorm": 140.0}
    for name, fs in finals.items():
        for seed, f in enumerate(fs):
            recs.append(accuracy(specs[name], seed, f, diverged=f is None, wall=walls[name] + seed,
                                 ttt=None if f is None or f < 0.91 else 80.0 + seed))
            recs.append(accuracy(specs[name], seed, 0.5 + 0.01 * seed, task="synthetic_images", model="tiny_cnn",
                                 offline=True, quick=True, wall=5.0, target=None))
    return recs


def write_demo(root) -> list:
    return write_records(demo_records(), root)


# --- hostile input: third-party text that tries to run script ---------------------------------------------------------

XSS = '<script>window.__pwned = "script"</script>'
ATTR = '"><img src=x onerror="window.__pwned=\'img\'">'
SVG = "<svg onload=\"window.__pwned='svg'\"></svg>"
CLOSE = '</script><script>window.__pwned="close"</script>'
JS_URL = "javascript:window.__pwned='href'"


def hostile_records() -> list[dict]:
    """Records that pass validation yet carry script in every free-text field, plus a javascript: paper link."""
    meta = norm_meta(
        "evilnorm",
        title=XSS + " Evil Norm",
        paper={"title": ATTR, "authors": SVG, "year": 2024, "url": JS_URL},
        family=ATTR, kind=SVG, layouts=["tokens", XSS], formula=CLOSE + " y = x", backends=["eager", XSS],
        package=XSS, package_version=ATTR, notes=CLOSE + " <a href=\"javascript:alert(1)\">click</a> " + SVG,
    )
    hw = dict(CPU_HW, cpu=XSS + " EvilCPU", gpu=None)
    k = kernel(meta, "eager", [64, 512], 2e-5, hw=hw, shape_class=ATTR)
    k["provenance"]["platform"] = SVG
    k["provenance"]["command"] = CLOSE
    k["provenance"]["plugins"] = {XSS: ATTR}
    k["config"]["bytes_model"] = {"formula": XSS, "note": CLOSE}
    s = kernel(meta, "compile", [64, 512], 8.9e-6, hw=hw, ceiling=25.0, suspect=True)
    s["metrics"]["suspect_reason"] = ATTR
    s["flag_reasons"]["suspect"] = ATTR
    s["check"]["detail"] = XSS
    s["config"]["shape_label"] = CLOSE  # reaches the reproduce command
    out = [k, s]
    for seed in range(2):
        a = accuracy(meta, seed, 0.5 + seed / 10, task=XSS, model=ATTR, placement=SVG, hw=hw, metric=CLOSE)
        a["config"]["recipe"] = {XSS: CLOSE, "lr": ATTR}
        out.append(a)
    return out


def invalid_records() -> list:
    """Records the site must reject: a hostile name and id, a missing section, a non-object, absurd nesting."""
    bad_name = kernel(norm_meta("layernorm"), "eager", [64, 512], 2e-5)
    bad_name["norm"]["name"] = XSS
    bad_name["id"] = ATTR
    no_metrics = accuracy("rmsnorm", 0, 0.9)
    del no_metrics["metrics"]
    deep = accuracy("rmsnorm", 1, 0.9)
    nest = XSS
    for _ in range(40):
        nest = [nest]
    deep["config"]["recipe"] = {"nest": nest}  # valid by the schema, but deeper than any real record
    return [bad_name, no_metrics, CLOSE, deep]


def published(site) -> list[tuple]:
    """(page JSON file, record) for every record the built ``site`` publishes (records/*.json.gz)."""
    return [(p, r) for p in sorted((Path(site) / "records").glob("*.json.gz"))
            for r in json.loads(gzip.decompress(p.read_bytes()))]


def page_of(json_gz) -> Path:
    """The record page beside a published JSON file."""
    return Path(str(json_gz)[:-len(".json.gz")] + ".html")


def machines_site(root, n: int = 3, cache: bool = False, charts: bool = False) -> tuple:
    """A site of ``n`` machines (the demo's kernel records of its GPU machine copied onto ``n`` hardware ids, no
    accuracy records), built without figures and with ``pages.MANY_MACHINES`` at 1, so its norms take the many-machine
    layout a public leaderboard has (no page per norm and machine; a machine's records loaded on demand): (site,
    report, records). ``charts``: with figures (a many-machine norm's are drawn in the browser: no SVG is made)."""
    from normbench.site import build_site, pages

    base = [r for r in demo_records() if r["kind"] == "kernel" and r["provenance"]["hardware_id"] == "gpu-nvidia-h200"]
    recs = on_machines(base, [f"gpu-machine-{m}" for m in range(n)])
    root = Path(root)
    write_records(recs, root / "results")
    old = pages.MANY_MACHINES
    pages.MANY_MACHINES = 1
    try:
        report = build_site(root / "results", root / "site", charts=charts, cache=cache)
    finally:
        pages.MANY_MACHINES = old
    return root / "site", report, recs


def flat2(obj: dict) -> list[tuple[str, object]]:
    """(dotted key, value) of a record part as the record pages show it: a non-empty dict value one level down."""
    out = []
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            out += [(f"{k}.{k2}", v2) for k2, v2 in v.items()]
        else:
            out.append((k, v))
    return out


def record_details(page) -> dict:
    """A record page's records as its data file (``data/machines/<page>.js``) details them, read back here
    independently of the site's script: record id (the page's ``details.record`` ids, in order) -> {"command", "flags"
    [(label, flag, reason)], "config" {key: text}, "metrics", "provenance", "status" (0 ranked, 1 flagged, 2
    invalid)}."""
    import html as html_mod
    import re

    page = Path(page)
    html = page.read_text(encoding="utf-8")
    src = re.search(r'data-records-src="([^"]+)"', html).group(1)
    from normbench.site.tables import read_data_script

    call, args, data = read_data_script((page.parent / src).read_text(encoding="utf-8"))
    assert call == "nbRecords" and args == []
    S, K = data["s"], data["k"]

    def pairs(keys, values):
        return {S[k]: S[v] for k, v in zip(K[keys], values)}

    out = {}
    order = re.findall(r'<details class="record" id="([^"]+)"><summary><code>([^<]+)</code>', html)
    for (key, rid), rec in zip(order, data["r"], strict=True):
        prov = data["p"][rec[4]]
        out[key] = {"rid": html_mod.unescape(rid), "config": pairs(rec[0], rec[1]), "metrics": pairs(rec[2], rec[3]),
                    "provenance": pairs(prov[0], prov[1]), "file": S[rec[5]], "index": rec[6],
                    "flags": [(S[a], S[b], S[c]) for a, b, c in rec[9]], "command": S[rec[10]], "status": rec[11]}
    return out


def write_hostile(root) -> None:
    """Hostile but valid records, invalid ones, a file that is not JSON, and a hostile file name."""
    import json
    from pathlib import Path

    root = Path(root)
    write_records(hostile_records(), root)
    bad = root / "kernel" / "cpu-test-cpu-9000-8c"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "invalid.json").write_text(json.dumps(invalid_records()), encoding="utf-8")
    (bad / "broken.json").write_text('{"schema": "normbench.record", ' + CLOSE, encoding="utf-8")
    (bad / (ATTR.replace("/", "") + ".json")).write_text(json.dumps([{"kind": XSS}]), encoding="utf-8")


# --- a planted model record set: Llama 3.1 8B's shapes on one CPU (the "By model" pages) ------------------------------

MODEL = "llama-3.1-8b"
MODEL_HW = "cpu-test-cpu-9000-8c"


def _paired(a: dict, b: dict, ratio: float, lo: float, hi: float) -> None:
    """``a`` timed head to head with ``b``: a's paired entry for b (ratio a/b, its interval) and b's mirror."""
    from normbench.stats import verdict_of

    a["metrics"].setdefault("paired", []).append({"partner": b["id"], "backend": b["config"]["backend"],
                                                  "ratio": ratio, "ci": [lo, hi], "n": 50,
                                                  "verdict": verdict_of(lo, hi)})
    b["metrics"].setdefault("paired", []).append({"partner": a["id"], "backend": a["config"]["backend"],
                                                  "ratio": 1 / ratio, "ci": [1 / hi, 1 / lo], "n": 50,
                                                  "verdict": verdict_of(1 / hi, 1 / lo)})


def on_machines(records: list[dict], hws) -> list[dict]:
    """Kernel ``records`` copied onto each of the machines ``hws``, machine by machine (each copy with its own hardware
    id and record id)."""
    import copy

    from normbench.records.schema import record_id

    recs = []
    for hw in hws:
        for r in records:
            r = copy.deepcopy(r)
            r["provenance"]["hardware_id"] = hw
            r["id"] = record_id("kernel", r["norm"]["name"], r["config"], hw, r["impl_hash"])
            recs.append(r)
    return recs


def model_records_on(hws) -> list[dict]:
    """``model_records()`` on each of the machines ``hws``."""
    return on_machines(model_records(), hws)


def model_records(compile_8: float = 10e-6) -> list[dict]:
    """Llama 3.1 8B (hidden 4096) on one CPU, float32 fwd, rmsnorm and add_rmsnorm at decode shapes (B, 1, 4096):
    decode-8 a paired winner (compile 2x over eager; add_rmsnorm missing), decode-1 a tie (and add_rmsnorm eager
    alone), decode-32 only flagged records, decode-128 eager eligible and compile flagged, decode-256 undecided; no
    prefill record (missing); and one bfloat16 record (a second dtype section)."""
    from normbench.records.schema import add_flag

    rms, add = norm_meta("rmsnorm", title="RMSNorm"), norm_meta("add_rmsnorm", title="Add + RMSNorm")

    def k(meta, backend, b, t, dtype="float32"):
        return kernel(meta, backend, [b, 1, 4096], t, dtype=dtype, shape_class="custom", timing="hot",
                      ceiling=1000.0)

    recs = []
    e8, c8 = k(rms, "eager", 8, 20e-6), k(rms, "compile", 8, compile_8)
    _paired(c8, e8, 0.5, 0.45, 0.55)
    e1, c1 = k(rms, "eager", 1, 5.0e-6), k(rms, "compile", 1, 5.1e-6)
    _paired(e1, c1, 0.98, 0.95, 1.03)
    a1 = k(add, "eager", 1, 7e-6)
    e32, c32 = k(rms, "eager", 32, 30e-6), k(rms, "compile", 32, 25e-6)
    e128, c128 = k(rms, "eager", 128, 40e-6), k(rms, "compile", 128, 30e-6)
    for r in (e32, c32, c128):
        add_flag(r, "noisy", "load 3.1 on 2 cores while it ran")
    e256, c256 = k(rms, "eager", 256, 100e-6), k(rms, "compile", 256, 95e-6)
    _paired(c256, e256, 0.95, 0.85, 1.2)
    bf = k(rms, "eager", 8, 15e-6, dtype="bfloat16")
    recs += [e8, c8, e1, c1, a1, e32, c32, e128, c128, e256, c256, bf]
    return recs
