"""Host time per call of a policy-applied norm site against the module it replaced and the implementation it runs
called bare (issue #49's table): a benchmark, never a test (tests/test_policy_serving.py counts call events).

Decode calls (1 x 1 x 4096, no_grad unless marked ``grad``) of the final norm of Llama, Qwen3 and Gemma 3, and of
Gemma 3's q_norm ((1, heads, 1, 128): the sequence axis is 2), in float32 and bfloat16, on the CPU, 1 thread. "fast"
is a backend module calling ``F.rms_norm`` on the same Parameter (Gemma: on ``1 + weight``, cached: its bare cases
compute it once, and call ``F.rms_norm`` from a plain function, as the issue's table did, and the backend module).
Each case is timed with ``timeit`` in ``--rounds`` interleaved rounds of ``--number`` calls
(the order rotated each round); the median per call is reported. "pinned" is ``apply_policy(..., pin="decode-1")``
(chosen once, no per-call dispatch). "before" is ``normbench.policy`` as of main at
6a1db4f (read from git), "after" this checkout's. The check gate is stubbed (as in the issue) and the policies are
synthetic: made through ``best``'s real schema from records in which the named backend wins (this script measures the
dispatch, not which backend is faster).

``--null``: the faster backend (and its bare call) returns its input, computing nothing, and so does the original
module once the policies are applied (the probe saw it compute its norm): what is left of each case is the host time
of the call path alone (module call, dispatch), where a 4096-wide norm's own time and its noise would hide a fraction
of a microsecond.

    python scripts/policy_host.py [--rounds 9] [--number 2000] [--null] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import timeit
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import normbench.policy as after
import normbench.policy.dispatch as dispatch
from normbench import best, catalog
from normbench._compat import import_transformers
from normbench.discovery import REGISTRY
from normbench.registry import Backend, adopt_state

BEFORE = "6a1db4f"
NULL = False   # --null: the faster backend computes nothing
ROOT = Path(__file__).resolve().parents[1]


class Fast(nn.Module):
    """The faster backend: ``F.rms_norm`` on the eager module's Parameter (its slot)."""

    def __init__(self, eager, spec=None, eps=None):
        super().__init__()
        adopt_state(self, eager)
        self.__dict__["shape"] = (eager.weight.shape[0],)
        self.__dict__["eps"] = float(eager.eps if eps is None else eps)

    def forward(self, x):
        if NULL:
            return x
        return F.rms_norm(x, self.shape, self._parameters["weight"], self.eps)


def _null_bare(x):
    return x


def _before_module():
    src = subprocess.run(["git", "show", f"{BEFORE}:normbench/policy/__init__.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("normbench_policy_before")
    mod.__file__ = f"<normbench/policy/__init__.py at {BEFORE}>"
    sys.modules[mod.__name__] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def _records(targets, winner: str, dtypes, passes, hw, eager_decode=False):
    recs, seen = [], set()
    for t in targets:
        win = "eager" if eager_decode and t["regime"].startswith("decode") else winner
        other = "eager" if win != "eager" else winner
        for d in dtypes:
            for p in passes:
                key = (t["norm"], t["layout"], tuple(t["dims"]), d, p)
                if key in seen:
                    continue
                seen.add(key)
                ids = {b: f"{'-'.join(map(str, key))}-{b}" for b in (win, other)}
                for b, o, tm, ratio in ((other, win, 2.0, 2.0), (win, other, 1.0, 0.5)):
                    pair = {"partner": ids[o], "ratio": ratio, "ci": [ratio * 0.95, ratio * 1.05], "n": 21,
                            "verdict": "faster" if ratio < 1 else "slower"}
                    recs.append({"id": ids[b], "kind": "kernel", "norm": {"name": t["norm"]}, "flags": [],
                                 "config": {"layout": t["layout"], "shape": list(t["dims"]), "dtype": d, "pass": p,
                                            "backend": b},
                                 "metrics": {"time_median_s": tm, "paired": [pair]},
                                 "provenance": {"hardware_id": hw}})
    return recs


def _policy(config, winner, hw, eager_decode=False) -> dict:
    family, arch, sites = catalog.sites_from_config(config.to_dict())
    model = catalog.Model("bench", "bench", family, arch, "", {}, tuple(sites))
    targets = best.model_targets(model)
    rows = best.answer(_records(targets, winner, ("float32", "bfloat16"), ("fwd", "fwd+bwd"), hw, eager_decode),
                       targets)
    return best.to_policy(rows, {"model": "bench", "shape": None})


class Box(nn.Module):
    """A model holding one site (its module named as the site), run by the probe on ``input_ids``."""

    def __init__(self, name, module, shape_of):
        super().__init__()
        self.add_module(name, module)
        self.__dict__["site_name"], self.__dict__["shape_of"] = name, shape_of

    def forward(self, input_ids):
        return getattr(self, self.site_name)(torch.zeros(self.shape_of(*input_ids.shape)))


FAMILIES = {
    "llama": ("LlamaConfig", "LlamaRMSNorm", "modeling_llama"),
    "qwen3": ("Qwen3Config", "Qwen3RMSNorm", "modeling_qwen3"),
    "gemma3": ("Gemma3TextConfig", "Gemma3RMSNorm", "modeling_gemma3"),
}


def cases(tr, before):
    """(label, callable, input) per case of the issue's table, both dtypes."""
    hw = after._hardware_id(torch.device("cpu"))
    out, nulled, resolved = [], [], []
    for fam, (conf_name, cls_name, modname) in FAMILIES.items():
        config = getattr(tr, conf_name)(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                        num_hidden_layers=1, vocab_size=64, intermediate_size=64)
        cls = getattr(importlib.import_module(f"transformers.models.{fam}.{modname}"), cls_name)
        if NULL:   # computes as the original until the sites are resolved, then returns its input (below)
            cls = type(cls_name, (cls,), {})
            nulled.append(cls)
        heads = config.num_attention_heads
        where = [("norm", 4096, lambda b, s: (b, s, 4096), (1, 1, 4096))]
        if fam == "gemma3":
            where.append(("q_norm", 128, lambda b, s: (b, heads, s, 128), (1, heads, 1, 128)))
        for site, width, shape_of, decode in where:
            for dtype in (torch.float32, torch.bfloat16):
                dt = str(dtype).removeprefix("torch.")

                def make():
                    m = cls(width, eps=1e-6)
                    with torch.no_grad():
                        m.weight.normal_(0, 0.3)
                    return m.to(dtype)

                x = torch.randn(decode, dtype=dtype)
                orig = make()
                out.append((f"{fam} {site} {dt}", "original", orig, x))
                fast = Fast(orig, eps=1e-6)  # the same Parameter
                if fam == "gemma3":
                    scale = (1.0 + orig.weight.float()).detach()
                    bare = (lambda s, e, w: (lambda x: F.rms_norm(x, (w,), s, e)))(scale, 1e-6, width)
                    if NULL:
                        bare = _null_bare
                    out.append((f"{fam} {site} {dt}", "fast bare (cached 1 + w)", bare, x))
                    module = Fast(orig, eps=1e-6)   # the backend module on the cached scale, called as a module
                    module._parameters["weight"] = scale
                    out.append((f"{fam} {site} {dt}", "fast bare module (cached 1 + w)", module, x))
                else:
                    out.append((f"{fam} {site} {dt}", "fast bare", fast, x))
                for label, mod in (("before", before), ("after", after)):
                    for winner, eager_decode, what in (("fast", False, "-> fast"), ("fast", True, "-> eager")):
                        if label == "before" and eager_decode:
                            winner = "eager"   # (before: a policy naming eager everywhere still replaced the module)
                        box = Box(site, make(), shape_of)
                        kw = {"example": {"input_ids": torch.zeros(1, 7, dtype=torch.long)}} if label == "after" else {}
                        mod.apply_policy(box, _policy(config, winner, hw, eager_decode), **kw)
                        m = getattr(box, site)
                        with torch.no_grad():
                            m(x)   # (before: its first call decides and memoises)
                        out.append((f"{fam} {site} {dt}", f"{label}: PolicyNorm {what}", m, x))
                        resolved.append(m)
                        if dtype == torch.float32 and fam == "llama":
                            out.append((f"{fam} {site} {dt} grad", f"{label}: PolicyNorm {what}", m, x))
                    if label == "after":   # chosen once (apply_policy(..., pin=...)): no per-call dispatch
                        box = Box(site, make(), shape_of)
                        mod.apply_policy(box, _policy(config, "fast", hw), pin="decode-1",
                                         example={"input_ids": torch.zeros(1, 7, dtype=torch.long)})
                        m = getattr(box, site)
                        out.append((f"{fam} {site} {dt}", "after: pinned decode-1 -> fast", m, x))
                        if dtype == torch.float32 and fam == "llama":
                            out.append((f"{fam} {site} {dt} grad", "after: pinned decode-1 -> fast", m, x))
                if dtype == torch.float32 and fam == "llama":
                    out.append((f"{fam} {site} {dt} grad", "original", orig, x))
                    out.append((f"{fam} {site} {dt} grad", "fast bare", fast, x))
    for c in nulled:   # --null: the original returns its input too (after the probe confirmed what it computed)
        c.forward = _null_forward
    for m in resolved if nulled else ():
        if hasattr(m, "_resolve"):
            m._resolve()   # (after: its lean call holds the original's forward as it was when resolved)
    return out


def _null_forward(self, hidden_states):
    return hidden_states


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--null", action="store_true", help="the faster backend returns its input (host time alone)")
    args = ap.parse_args(argv)
    global NULL
    NULL = args.null
    torch.set_num_threads(1)
    tr = import_transformers()
    spec = REGISTRY.get("rmsnorm")
    REGISTRY.specs["rmsnorm"] = dataclasses.replace(spec, extra_backends=spec.extra_backends + (
        Backend("fast", build=Fast),))
    before = _before_module()
    for mod in (before, dispatch):
        mod._gate = lambda *a, **k: None   # the check gate stubbed, as in the issue
    import warnings

    warnings.simplefilter("ignore")
    all_cases = cases(tr, before)
    times = {(g, c): [] for g, c, _m, _x in all_cases}
    for r in range(args.rounds):
        order = all_cases[r % len(all_cases):] + all_cases[:r % len(all_cases)]
        for group, case, fn, x in order:
            grad = group.endswith("grad")
            with torch.set_grad_enabled(grad):
                t = timeit.timeit(lambda: fn(x), number=args.number)
            times[(group, case)].append(t / args.number)
    rows = []
    for (group, case), ts in times.items():
        rows.append({"case": group, "what": case, "us_per_call": statistics.median(ts) * 1e6,
                     "rounds_us": [t * 1e6 for t in ts]})
    groups = list(dict.fromkeys(r["case"] for r in rows))
    rows.sort(key=lambda r: groups.index(r["case"]))
    last = None
    for row in rows:
        if row["case"] != last:
            print(f"\n{row['case']} (decode, {'autograd recording' if row['case'].endswith('grad') else 'no_grad'})")
            last = row["case"]
        print(f"  {row['what']:<36} {row['us_per_call']:7.2f} µs")
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rounds": args.rounds, "number": args.number, "threads": 1, "null": args.null,
                                   "load1": os.getloadavg()[0], "rows": rows},
                                  indent=1))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
