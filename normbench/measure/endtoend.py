"""End to end: a model's whole step with its own norm modules against the same model with ``best``'s policy applied.

:func:`measure` builds the model (:func:`build`: a small random-initialised ``transformers`` Llama or Qwen3 from a
config, or the project's GPT, each at the catalog model's norm widths), copies it, applies the policy to the copy
(``normbench.apply_policy``; nothing is downloaded), and for each regime (a prefill and a decode shape) and pass
(``fwd``: inference under ``torch.no_grad``; ``fwd+bwd``: the loss's backward too) times the two whole steps in
interleaved rounds on the same inputs (``timers.interleaved_time``: every round runs both in a shuffled order), so
the ratio policy / original is paired (``stats.paired_ratio``) as a head-to-head kernel comparison is. A separate
profiled pass (``torch.profiler``, each norm call wrapped in a ``record_function`` range by forward hooks, never in
the timed rounds) gives the norm share of the step. One ``endtoend`` record per (regime, pass): docs/measurement.md,
"End to end".
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
from torch import nn

#: Paired rounds of whole steps: at least this many (the sign-test interval of n = 20 is ranks 5 and 14), at most
#: ``MAX_ROUNDS``, and at least ``MIN_TIME`` seconds of each side's work.
MIN_ROUNDS = 20
MAX_ROUNDS = 200
MIN_TIME = 1.0
#: The step's profiled repetitions (the norm share is their sum's).
PROFILED_STEPS = 3
#: Per-norm-call range name in the profile.
NORM_RANGE = "normbench.norm::"
#: Model families built here, by catalog architecture.
FAMILIES = ("llama", "qwen3", "gpt2")


@dataclass
class Built:
    """A model ready for the steps: the module, what was built (recorded), and how to make its inputs."""

    model: nn.Module
    key: str
    architecture: str
    config: dict
    norm: str                       # the zoo norm of its main sites (the record's norm)
    kv_cache: bool                  # decode steps attend over a cache of ``context`` positions
    notes: list = field(default_factory=list)


def _catalog_model(key: str):
    from normbench import catalog

    return catalog.get(key)


def build(key: str, *, layers: int = 2, intermediate: int | None = None, vocab: int = 2048, seed: int = 0,
          dtype: torch.dtype = torch.float32) -> Built:
    """A small random-initialised model of catalog model ``key``'s family at its norm widths (hidden size, head
    size, eps, heads), with ``layers`` layers, ``intermediate`` MLP width (default: a quarter of the hidden size)
    and ``vocab`` tokens: the norm calls have the catalog model's per-row shapes; its other layers are smaller, so
    the norm share of its step is larger than the full model's (said in the record)."""
    m = _catalog_model(key)
    arch = m.architecture
    cfg = m.config
    torch.manual_seed(seed)
    if arch in ("llama", "mistral", "qwen3"):
        from normbench._compat import import_transformers

        transformers = import_transformers()
        hidden = int(cfg["hidden_size"])
        notes = []
        if "num_attention_heads" not in cfg:  # the catalog keeps the keys its norm sites need; Llama's have no heads
            notes.append("heads not in the catalog: head size 128, 4 query heads per KV head (Llama 3.1 8B's "
                         "config.json: 32 and 8)")
        heads = int(cfg.get("num_attention_heads") or hidden // 128)
        kv = int(cfg.get("num_key_value_heads") or max(1, heads // 4))
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        conf = dict(hidden_size=hidden, intermediate_size=int(intermediate or hidden // 4), num_hidden_layers=layers,
                    num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab,
                    rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), max_position_embeddings=8192,
                    tie_word_embeddings=False)
        cls = {"qwen3": "Qwen3"}.get(arch, "Llama")
        hf_conf = getattr(transformers, f"{cls}Config")(**conf)
        hf_conf._attn_implementation = "sdpa"
        model = getattr(transformers, f"{cls}ForCausalLM")(hf_conf).to(dtype).eval()
        return Built(model, key, f"transformers {cls}ForCausalLM", {**conf, "transformers": transformers.__version__},
                     "rmsnorm", True, notes)
    if arch == "gpt2":
        from normbench import get_norm
        from normbench.models.gpt import GPT, GPTConfig
        from normbench.models.norms import norm_factory

        hidden = int(cfg["n_embd"])
        heads = int(cfg.get("n_head", 12))  # GPT-2 small has 12 heads (the catalog keeps only norm keys)
        gcfg = GPTConfig(vocab_size=vocab, seq_len=1024, n_layer=layers, n_head=heads, n_embd=hidden,
                         mlp_ratio=max(1, int(intermediate or hidden) // hidden), placement="pre_ln")
        model = GPT(gcfg, norm_factory(get_norm("layernorm"), "tokens")).to(dtype).eval()
        return Built(model, key, "normbench GPT (pre-LN, models/gpt.py)", gcfg.to_dict(), "layernorm", False,
                     ["no KV cache: a decode step is the forward of one new position per sequence"])
    raise ValueError(f"no end-to-end model for {key} (architecture {arch}); it is built for "
                     f"{', '.join(FAMILIES)} models of the catalog")


def norm_paths(model: nn.Module) -> list[str]:
    """The module paths of a model's norm modules: normbench's own (``normbench.norms``), torch's ``LayerNorm`` /
    ``RMSNorm`` and the ``transformers`` classes named ``*RMSNorm`` / ``*LayerNorm``."""
    out = []
    for name, mod in model.named_modules():
        cls = type(mod)
        if (isinstance(mod, (nn.LayerNorm, nn.RMSNorm)) or cls.__module__.startswith("normbench.norms")
                or cls.__name__.endswith(("RMSNorm", "LayerNorm"))):
            if not any(name.startswith(p + ".") for p in out):  # a norm inside a norm is the outer one's work
                out.append(name)
    return out


@dataclass
class Step:
    """One regime's step: the inputs and the callables (original, policy) the rounds time."""

    regime: str
    batch: int
    tokens: int
    context: int


def _inputs(built: Built, step: Step, vocab: int) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (step.batch, step.tokens), generator=g)
    return {"ids": ids}


def _step_fn(model: nn.Module, built: Built, step: Step, pass_: str, vocab: int):
    """A callable running one whole step of ``model``; a decode step's cache is put back to its prefix before each
    call, so every call attends over the same ``context`` positions."""
    ins = _inputs(built, step, vocab)
    ids = ins["ids"]
    hf = built.kv_cache
    cache = None
    if hf and step.context:
        from transformers import DynamicCache

        cache = DynamicCache()
        prefix = torch.randint(0, vocab, (step.batch, step.context), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            model(input_ids=prefix, past_key_values=cache, use_cache=True)
        saved = [(layer.keys, layer.values) for layer in cache.layers]
        pos = torch.arange(step.context, step.context + step.tokens).expand(step.batch, -1)

    def rewind():
        # every call attends over the same ``context`` cached positions: ``update`` concatenates (new tensors), so
        # putting the prefix's tensors back costs nothing and leaves no autograd graph from the previous call
        for layer, (k, v) in zip(cache.layers, saved):
            layer.keys, layer.values = k, v

    def logits():
        if hf:
            if cache is None:
                return model(input_ids=ids, use_cache=False).logits
            rewind()
            return model(input_ids=ids, past_key_values=cache, use_cache=True, position_ids=pos).logits
        return _gpt_logits(model, ids)

    if pass_ == "fwd":
        def run():
            with torch.no_grad():
                logits()
        return run

    params = [p for p in model.parameters() if p.requires_grad]

    def run_bwd():
        for p in params:
            p.grad = None
        out = logits()
        out.float().square().mean().backward()
    return run_bwd


def _gpt_logits(model, ids):
    out = model(ids)
    return out[0] if isinstance(out, tuple) else out


def _profile_shares(models: dict, paths: list[str], jobs: list[tuple[str, str, object]]) -> dict:
    """Norm time and step time per job from one ``torch.profiler`` session (its start-up costs seconds, so one for
    every step): ``jobs`` are ``(label, side, fn)``; each runs :data:`PROFILED_STEPS` times in a ``normbench.step``
    range, and forward hooks on the side's norm modules (``models[side]``, at ``paths``) put each norm call in a
    ``normbench.norm`` range: only the forward calls (a norm's backward, in fwd+bwd, runs outside its range and is
    counted in the step, not the norm time). Returns ``{(label, side): {norm_share, norm_time_s, ...}}``."""
    from torch.profiler import ProfilerActivity, profile, record_function

    current = {"label": ""}
    handles, open_ranges = [], []

    def pre(mod, args):
        r = record_function(NORM_RANGE + current["label"])
        r.__enter__()
        open_ranges.append(r)

    def post(mod, args, out):
        open_ranges.pop().__exit__(None, None, None)

    for side, model in models.items():
        mods = dict(model.named_modules())
        for p in paths:
            handles.append(mods[p].register_forward_pre_hook(pre))
            handles.append(mods[p].register_forward_hook(post))
    try:
        for _label, _side, fn in jobs:  # warm: the hooks' first calls
            fn()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for label, side, fn in jobs:
                current["label"] = f"{label}::{side}"
                for _ in range(PROFILED_STEPS):
                    with record_function(f"normbench.step::{label}::{side}"):
                        fn()
    finally:
        for h in handles:
            h.remove()
    norm: dict = {}
    step: dict = {}
    calls: dict = {}
    for e in prof.key_averages():
        if e.key.startswith(NORM_RANGE):
            k = e.key[len(NORM_RANGE):]
            norm[k] = norm.get(k, 0.0) + e.cpu_time_total
            calls[k] = calls.get(k, 0) + e.count
        elif e.key.startswith("normbench.step::"):
            step[e.key[len("normbench.step::"):]] = e.cpu_time_total
    out = {}
    for label, side, _ in jobs:
        k = f"{label}::{side}"
        s_us, n_us = step.get(k, 0.0), norm.get(k, 0.0)
        out[(label, side)] = ({"norm_share": n_us / s_us, "norm_time_s": n_us / 1e6 / PROFILED_STEPS,
                               "profiled_step_s": s_us / 1e6 / PROFILED_STEPS,
                               "norm_calls": calls.get(k, 0) // PROFILED_STEPS} if s_us > 0 else
                              {"norm_share": None, "norm_time_s": None, "profiled_step_s": None, "norm_calls": 0})
    return out


def measure(built: Built, policy, regimes: list[Step], passes=("fwd", "fwd+bwd"), *, apply=None, restore=None,
            vocab: int = 2048, settings=None, seed: int = 0, log=print) -> list[dict]:
    """Per regime and pass: the whole step timed with the original modules and with ``policy`` applied, paired.

    ``apply(model, policy)`` (default ``normbench.apply_policy``) replaces the copy's norm modules in place and
    returns its report (what was replaced and left); ``restore`` (default ``normbench.restore``) is called on the
    copy at the end. Returns the measurements (``normbench.measure.endtoend.record`` makes records of them)."""
    from normbench.measure import noise
    from normbench.measure.summary import summarize
    from normbench.measure.timers import TimerSettings, interleaved_time
    from normbench.stats import paired_ratio

    if apply is None or restore is None:
        import normbench

        apply = apply or normbench.apply_policy
        restore = restore or normbench.restore
    original = built.model
    # the copy shares every parameter and buffer with the original (their tensors are not copied): the two steps
    # read the same weights at the same addresses, so the only difference timed is the norm modules (two deep copies
    # of the weights differed by 1-3 % in step time with identical modules)
    shared = {id(t): t for t in (*original.parameters(), *original.buffers())}
    applied = copy.deepcopy(original, memo=shared)
    report = apply(applied, policy)
    paths = norm_paths(original)
    settings = settings or TimerSettings(warmup=2, min_reps=MIN_ROUNDS, max_reps=MAX_ROUNDS, min_time=MIN_TIME,
                                         max_time=60.0)
    out: list[dict] = []
    jobs: list = []
    threads = torch.get_num_threads()
    try:
        for step in regimes:
            for pass_ in passes:
                t0 = time.perf_counter()
                train = pass_ != "fwd"
                for mdl in (original, applied):
                    mdl.train(train)
                fns = {"original": _step_fn(original, built, step, pass_, vocab),
                       "policy": _step_fn(applied, built, step, pass_, vocab)}
                with torch.no_grad():  # same outputs: a policy that changes the model is no speed-up
                    same = _same_outputs(original, applied, built, step, vocab)
                samples = interleaved_time(fns, settings, None, "cpu", seed, None, slow_rounds=MIN_ROUNDS)
                pr = paired_ratio(samples["policy"], samples["original"])
                load = noise.machine_load(noise.own_load("cpu", threads))
                st = {k: summarize(v) for k, v in samples.items()}
                label = f"{step.regime}::{pass_}"
                jobs += [(label, "original", fns["original"]), (label, "policy", fns["policy"])]
                out.append({"regime": step, "pass": pass_, "samples": samples, "paired": pr.to_dict(),
                            "summary": st, "load": load, "same_outputs": same, "label": label,
                            "report": _report_dict(report), "wall_s": time.perf_counter() - t0,
                            "threads": threads, "seed": seed})
                log(f"  {step.regime} {pass_}: original {st['original']['median'] * 1e3:.2f} ms, policy "
                    f"{st['policy']['median'] * 1e3:.2f} ms, policy/original {pr.ratio:.3f} [{pr.lo:.3f}, "
                    f"{pr.hi:.3f}] ({pr.verdict}, n={pr.n})")
        # the norm share: one profiled session for every step, apart from the timed rounds
        shares = _profile_shares({"original": original, "policy": applied}, paths, jobs) if jobs else {}
        for m in out:
            m["profile"] = {side: shares[(m["label"], side)] for side in ("original", "policy")}
            log(f"  {m['label'].replace('::', ' ')}: norm share {_pct(m['profile']['original']['norm_share'])} "
                f"-> {_pct(m['profile']['policy']['norm_share'])}")
    finally:
        for mdl in (original, applied):
            mdl.eval()
        restore(applied)
    return out


def _pct(x) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


def _report_dict(report) -> dict:
    """``apply_policy``'s report as plain data (it may be a dataclass, a dict or None)."""
    if report is None:
        return {}
    if isinstance(report, dict):
        return report
    if hasattr(report, "to_dict"):
        return report.to_dict()
    from dataclasses import asdict, is_dataclass

    return asdict(report) if is_dataclass(report) else {"text": str(report)}


def _same_outputs(a: nn.Module, b: nn.Module, built: Built, step: Step, vocab: int) -> dict:
    ids = _inputs(built, Step(step.regime, step.batch, min(step.tokens, 64), 0), vocab)["ids"]

    def logits(m):
        out = m(input_ids=ids, use_cache=False).logits if built.kv_cache else _gpt_logits(m, ids)
        return out.double()

    ya, yb = logits(a), logits(b)
    err = float((ya - yb).abs().max())
    scale = float(ya.abs().max()) or 1.0
    return {"max_abs": err, "max_abs_rel_to_max": err / scale}


#: Logits of the two models may differ by the backends' own rounding (each within ``best``'s tolerance per call,
#: compounded through the layers); beyond this share of the logits' largest magnitude they are not the same model.
SAME_OUTPUT_TOL = 1e-3


def record(m: dict, built: Built, policy_meta: dict, prov: dict, dtype: str = "float32") -> dict:
    """An ``endtoend`` record of one :func:`measure` result: the paired ratio (policy / original) is the verdict;
    the medians are each side's own. Flags: ``noisy`` when the machine was loaded or a side's rounds spread wide
    (its absolute times; the paired ratio is judged by its interval as a kernel's is), ``suspect`` when the
    policy changed the model's outputs beyond :data:`SAME_OUTPUT_TOL` of their scale."""
    from normbench.discovery import REGISTRY
    from normbench.measure import noise
    from normbench.records.schema import make_record

    step = m["regime"]
    st = m["summary"]
    rel = max(s["iqr"] / s["median"] for s in st.values() if s["median"] > 0)
    flags = {}
    why = noise.reasons({**m["load"], "rel_iqr": rel})
    if why:
        flags["noisy"] = "; ".join(why)
    same = m["same_outputs"]
    if not (same["max_abs_rel_to_max"] <= SAME_OUTPUT_TOL):
        flags["suspect"] = (f"the policy changed the logits by {same['max_abs_rel_to_max']:.3g} of their largest "
                               f"magnitude (above {SAME_OUTPUT_TOL:g}): not the same model")
    pr = m["paired"]
    config = {"model": built.key, "built": {"architecture": built.architecture, **built.config,
                                            "notes": built.notes},
              "regime": step.regime, "batch": step.batch, "tokens": step.tokens, "context": step.context,
              "pass": m["pass"], "dtype": dtype, "device": "cpu", "threads": m["threads"], "policy": policy_meta}
    po, pp = m["profile"]["original"], m["profile"]["policy"]
    metrics = {
        "time_original_s": st["original"]["median"], "time_policy_s": st["policy"]["median"],
        "time_iqr_original_s": st["original"]["iqr"], "time_iqr_policy_s": st["policy"]["iqr"],
        "paired": {"ratio": pr["ratio"], "ci": list(pr["ci"]), "n": pr["n"], "verdict": pr["verdict"],
                   "of": "policy / original, per round"},
        "speedup": 1.0 / pr["ratio"],
        "norm_share_original": po["norm_share"], "norm_share_policy": pp["norm_share"],
        "norm_time_original_s": po["norm_time_s"], "norm_time_policy_s": pp["norm_time_s"],
        "norm_calls": po["norm_calls"],
        "norm_share_method": (f"torch.profiler over {PROFILED_STEPS} steps apart from the timed rounds; each norm "
                              "module's forward call in a record_function range (its backward, in fwd+bwd, is "
                              "counted in the step only)"),
        "rounds": pr["n"], "seed": m["seed"], "wall_s": m["wall_s"], "same_outputs": same,
        "noise": {**m["load"], "rel_iqr": rel},
        "replaced": m["report"],
    }
    return make_record("endtoend", REGISTRY.get(built.norm).to_dict(), config, metrics, prov,
                       flags=sorted(flags), flag_reasons=flags)
