"""Paper claims and their pre-registered rules, evaluated from the committed records (``normbench claims``).

Each claim from "Claims worth checking" (``NORMS.md``) is fixed here with the cells it is decided in, the arms compared,
the kind of test and its margin, written before the runs that decide it. Nothing here looks at a result to choose a
rule. The rules (also rendered on the site and in ``docs/accuracy.md``):

- **Accuracy comparisons** (arm A against arm B in one cell, same hardware; a tuned cell before an untuned one): at
  least :data:`MIN_SEEDS` counted runs per arm (runs flagged ``tuning`` or with any flag other than ``diverged``
  never count). Failures first: a diverged run (and, for steps-to-target, a run that never reached the target) is a
  failure. When the failure counts differ (Fisher's exact test, one-sided, p < α in either direction) that
  difference decides. Otherwise Welch's t-test on the finished runs decides (log perplexity, log steps or accuracy),
  with Mann–Whitney U reported beside it; no claim is reproduced while A fails more often than B.
- **Kinds.** ``superior``: A better than B (H0: advantage ≤ threshold); it is *not reproduced* when the advantage is
  shown to be below the pre-registered margin (H0: advantage ≥ margin rejected). ``noninferior`` ("match or exceed"):
  H0 advantage ≤ −margin; not reproduced when the advantage is shown to be below −margin. ``equivalent`` ("match"):
  TOST, both one-sided tests against ±margin; not reproduced when the difference is shown to lie outside ±margin.
- **Margins**, stated in advance: perplexity 2 % (a ratio of geometric means within 1/1.02 … 1.02), top-1 accuracy
  2 points, steps to target 10 %, kernel time as the claim states.
- **Speed comparisons** come from kernel records on one device in one run (same hardware, host, commit and command),
  matched on backend, dtype, shape, pass, timing, threads and harness; flagged records are excluded. The unit is the
  matched configuration: the log time ratio, tested by a one-sample t-test (Wilcoxon signed-rank beside), at least
  :data:`MIN_PAIRS` configurations. Each device with records is its own comparison (its latest such run).
- **Multiplicity.** Holm's correction runs over every pre-registered comparison (undecided ones enter with p = 1),
  separately for the tests that would reproduce a claim and those that would refute one, at α = :data:`ALPHA`.
- **Verdict of a claim**: ``reproduced`` when every comparison is; ``not reproduced`` when any comparison is;
  otherwise ``inconclusive`` (naming what is missing when records cannot decide it yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from normbench import stats as S
from normbench.softmax import CLAIM_PAIRS as SOFTMAX_PAIRS
from normbench.softmax import OUT_OF_CACHE_ROW_BYTES, OUT_OF_CACHE_TENSOR_BYTES

ALPHA = 0.05
MIN_SEEDS = 5
MIN_FINISHED = 2
MIN_PAIRS = 3
#: Seeds per arm where a claim may be decided by failures alone (the deep stress cell): with about 30 comparisons
#: under Holm's correction, 5 diverged against 0 of 5 (Fisher p = 1/252) cannot decide; 8 against 0 of 8 can.
DIVERGENCE_SEEDS = 8

#: Margins (smallest differences of interest), on the analysis scale.
PPL_MARGIN = math.log(1.02)
ACC_MARGIN = 0.02
STEPS_MARGIN = math.log(1.10)

#: The cells claims are decided in: the offline tasks every machine can run (real tasks would need a GPU per cell).
LM_TASK = "synth-lm"
IMAGE_TASK = "synth-shapes"
#: The deep GPT cell with warm-up and clipping, and its stress form without them (the Post-LN instability condition).
DEEP = "deep"
DEEP_STRESS = "deep_stress"
#: The softmax claim's algorithm pairs (SOFTMAX_PAIRS: two-pass backend, three-pass backend of one implementation)
#: and "out-of-cache rows" (OUT_OF_CACHE_ROW_BYTES per device, OUT_OF_CACHE_TENSOR_BYTES) are the softmax family's
#: own definitions (imported above), so its evidence table and this verdict agree.

VERDICTS = ("reproduced", "not reproduced", "inconclusive")


@dataclass(frozen=True)
class Cell:
    """Where an arm is trained: task, model, recipe variant and GPT placement (None for image models)."""

    task: str
    model: str
    variant: str = "default"
    placement: str | None = None

    @property
    def label(self) -> str:
        s = f"{self.task}/{self.model}" + ("" if self.variant == "default" else f"/{self.variant}")
        return s + (f" · {self.placement}" if self.placement else "")


@dataclass(frozen=True)
class Arm:
    norm: str
    cell: Cell

    @property
    def label(self) -> str:
        return self.norm + (f" ({self.cell.placement})" if self.cell.placement else "")

    def command(self, seeds: int | None = None) -> str:
        """The run that fills this arm: the tuned sweep (learning-rate search, then the test seeds), which skips
        what ``results/`` already holds. The stress cell, where claims may be decided by divergence counts alone,
        gets :data:`DIVERGENCE_SEEDS` seeds."""
        c = self.cell
        if seeds is None:
            seeds = DIVERGENCE_SEEDS if c.variant == DEEP_STRESS else MIN_SEEDS
        cmd = f"normbench sweep --tune --tasks {c.task} --models {c.model} --norms {self.norm}"
        if c.placement:
            cmd += f" --placements {c.placement}"
        if c.variant != "default":
            cmd += f" --variants {c.variant}"
        return cmd + f" --seeds {seeds}"


@dataclass(frozen=True)
class Accuracy:
    """A pre-registered accuracy comparison: arm ``a`` against arm ``b`` (the reference)."""

    a: Arm
    b: Arm
    kind: str                       # superior | noninferior | equivalent
    metric: str = "final"           # final | steps_to_target
    threshold: float = 0.0          # superior: the advantage the claim asserts at least

    @property
    def label(self) -> str:
        verb = {"superior": "better than", "noninferior": "at least as good as", "equivalent": "matches"}[self.kind]
        what = "steps to target" if self.metric == "steps_to_target" else "final metric"
        return f"{self.a.label} {verb} {self.b.label} ({what})"


@dataclass(frozen=True)
class Speed:
    """A pre-registered kernel-speed comparison: ``fast`` takes less time than ``slow``.

    ``threshold`` is the speed-up (slow time / fast time) the claim asserts at least; ``margin`` the smallest one of
    interest (a claim is refuted when the speed-up is shown to be below it). ``backend_pairs``: compare two backends
    of one norm, (fast backend, slow backend) each (the softmax algorithms), instead of two norms backend by
    backend; ``min_row_bytes``/``min_input_bytes`` keep only large rows and inputs; ``passes`` the passes that count.
    """

    fast: str
    slow: str
    threshold: float = 1.0
    margin: float = 1.0
    backend_pairs: tuple[tuple[str, str], ...] = ()
    min_row_bytes: int | dict = 0          # per device ("cpu", "cuda") when a dict
    min_input_bytes: int = 0
    passes: tuple[str, ...] = ("fwd", "bwd", "fwd+bwd")

    @property
    def label(self) -> str:
        if self.backend_pairs:
            return (f"{self.fast}: two-pass faster than three-pass ("
                    + ", ".join(f"{a} vs {b}" for a, b in self.backend_pairs) + ")")
        what = f"{self.fast} faster than {self.slow}"
        if self.threshold > 1:
            what += f" by ≥ {(self.threshold - 1) * 100:.0f}% speed-up"
        return what


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    url: str
    claim: str
    comparisons: tuple
    caveat: str
    note: str = ""


def _lm(norm: str, placement: str = "pre_ln", variant: str = "default") -> Arm:
    return Arm(norm, Cell(LM_TASK, "gpt", variant, placement))


def _img(norm: str, model: str = "resnet", variant: str = "default") -> Arm:
    return Arm(norm, Cell(IMAGE_TASK, model, variant))


_SMALL_LM = ("a 4-block, 64-wide GPT on the offline synthetic language (64 symbols), 300 steps on a CPU; the paper "
             "trained models with hundreds of millions to billions of parameters on natural text")
_SMALL_IMG = ("a 3-stage ResNet (16/32/64 channels) on 16x16 synthetic shapes, 80 steps of batch 32 (600 of batch 2 "
              "in the bs2 cell) on a CPU; the paper trained "
              "ResNet-50-class models on ImageNet")

CLAIMS: tuple[Claim, ...] = (
    Claim("preln-eq-prermsnorm", "Jiang et al. 2023, Pre-RMSNorm and Pre-CRMSNorm Transformers",
          "https://arxiv.org/abs/2305.14858",
          "Pre-LN, Pre-RMSNorm and Pre-CRMSNorm Transformers are equivalent: they give the same loss.",
          (Accuracy(_lm("rmsnorm"), _lm("layernorm"), "equivalent"),
           Accuracy(_lm("crmsnorm"), _lm("layernorm"), "equivalent")),
          _SMALL_LM, "The speed half of this paper's claim is the claim pre-crmsnorm-speed."),
    Claim("dyt-derf", "Zhu et al. 2025, Transformers without Normalization; Chen et al. 2025, Stronger "
          "Normalization-Free Transformers", "https://arxiv.org/abs/2503.10622",
          "DyT matches or exceeds LayerNorm, and Derf beats DyT, in a ViT and in a GPT.",
          (Accuracy(_lm("dyt"), _lm("layernorm"), "noninferior"),
           Accuracy(_img("dyt", "vit"), _img("layernorm", "vit"), "noninferior"),
           Accuracy(_lm("derf"), _lm("dyt"), "superior"),
           Accuracy(_img("derf", "vit"), _img("dyt", "vit"), "superior")),
          _SMALL_LM + "; the ViT is 4 blocks of width 64 on 16x16 synthetic shapes, not ViT-B on ImageNet",
          "Derf: https://arxiv.org/abs/2512.10938"),
    Claim("microbatch-bn", "Qiao et al. 2019, Micro-Batch Training with Batch-Channel Normalization and Weight "
          "Standardization; Chiley et al. 2019, Online Normalization", "https://arxiv.org/abs/1903.10520",
          "BatchNorm degrades at batch size 1–2 while GroupNorm, BCN+WS, Online Normalization and DyT do not.",
          tuple(Accuracy(_img(n, variant="bs2"), _img("batchnorm", variant="bs2"), "superior")
                for n in ("groupnorm", "batch_channel_norm", "online_norm", "dyt")),
          _SMALL_IMG + "; batch size 2 throughout training",
          "Decided as: each batch-independent norm beats BatchNorm in the batch-size-2 cell. BCN is run as the norm "
          "layer; weight standardization is not added to the convolutions."),
    Claim("deep-postln-unstable", "Kim et al. 2025 (Peri-LN); Li et al. 2024 (Mix-LN); Wang et al. 2022 (DeepNet)",
          "https://arxiv.org/abs/2502.02732",
          "Deep Post-LN is unstable where Pre-LN, Peri-LN, Mix-LN and DeepNorm train.",
          tuple(Accuracy(_lm("layernorm", p, DEEP_STRESS), _lm("layernorm", "post_ln", DEEP_STRESS), "superior")
                for p in ("pre_ln", "peri_ln", "mix_ln", "deepnorm")),
          "a 12-block, 32-wide GPT with a high learning rate, no warm-up and no clipping (the stress form of the "
          "deep cell), 200 steps on a CPU; the papers' instabilities appear at 100+ layers or billions of parameters",
          "Mix-LN: https://arxiv.org/abs/2412.13795; DeepNet: https://arxiv.org/abs/2203.00555"),
    Claim("lns-deep", "Sun et al. 2025, The Curse of Depth in Large Language Models", "https://arxiv.org/abs/2502.05795",
          "LayerNorm Scaling (1/√depth) improves deep Pre-LN stacks.",
          (Accuracy(_lm("layernorm", "layernorm_scaling", DEEP), _lm("layernorm", "pre_ln", DEEP), "superior"),),
          "the deep GPT cell with warm-up and clipping (12 narrow blocks), CPU scale; the paper's models have "
          "130M–7B parameters"),
    Claim("powernorm-lm", "Shen et al. 2020, PowerNorm: Rethinking Batch Normalization in Transformers",
          "https://arxiv.org/abs/2003.07845",
          "PowerNorm beats BatchNorm and LayerNorm in transformer language models.",
          (Accuracy(_lm("powernorm"), _lm("layernorm"), "superior"),
           Accuracy(_lm("powernorm"), _lm("batchnorm"), "superior")),
          _SMALL_LM + " (the paper: PTB and WikiText-103 perplexity, IWSLT/WMT translation)"),
    Claim("online-eq-bn", "Chiley et al. 2019, Online Normalization for Training Neural Networks",
          "https://arxiv.org/abs/1905.05894",
          "Online Normalization is as accurate as BatchNorm without using batches.",
          (Accuracy(_img("online_norm"), _img("batchnorm"), "equivalent"),),
          _SMALL_IMG),
    Claim("evonorm", "Liu et al. 2020, Evolving Normalization-Activation Layers", "https://arxiv.org/abs/2004.02967",
          "EvoNorm-B0 and EvoNorm-S0 match or beat BN-ReLU and GN-ReLU on ResNets; S0 also at small batch sizes.",
          (Accuracy(_img("evonorm_b0"), _img("batchnorm"), "noninferior"),
           Accuracy(_img("evonorm_s0"), _img("groupnorm"), "noninferior"),
           Accuracy(_img("evonorm_s0", variant="bs2"), _img("groupnorm", variant="bs2"), "noninferior")),
          _SMALL_IMG, "B0 is compared with BatchNorm, S0 (batch-independent) with GroupNorm. Not run yet: the ResNet "
          "keeps its ReLU after the norm, while an EvoNorm replaces the BN-ReLU pair (docs/accuracy.md)."),
    Claim("ln-fewer-steps", "Ba, Kiros, Hinton 2016, Layer Normalization", "https://arxiv.org/abs/1607.06450",
          "LayerNorm reaches a given loss in fewer steps than no normalization.",
          (Accuracy(_lm("layernorm"), _lm("none"), "superior", metric="steps_to_target"),),
          _SMALL_LM + "; the paper's evidence is mostly recurrent networks",
          "Steps to the recipe's target perplexity; a run that never reaches it counts as a failure. Steps are "
          "read at the cell's evaluations (every 50 steps in synth-lm/gpt), so they are quantised: when every seed "
          "of both arms gives the same value the zero-variance rule makes Welch's p exactly 0; Mann–Whitney's p "
          "beside it is the more cautious figure."),
    Claim("rmsnorm-speed", "Zhang, Sennrich 2019, Root Mean Square Layer Normalization",
          "https://arxiv.org/abs/1910.07467",
          "RMSNorm is faster than LayerNorm (7%–64% less running time across models).",
          (Speed("rmsnorm", "layernorm", 1.0, 1 / 0.93),),
          "the norm kernels alone, at the benchmark's shapes on each device; the paper timed whole models"),
    Claim("pre-crmsnorm-speed", "Jiang et al. 2023, Pre-RMSNorm and Pre-CRMSNorm Transformers",
          "https://arxiv.org/abs/2305.14858",
          "Pre-RMSNorm and Pre-CRMSNorm cut Pre-LN training and inference time by 1%–10%.",
          (Speed("rmsnorm", "layernorm", 1.0, 1 / 0.99), Speed("crmsnorm", "layernorm", 1.0, 1 / 0.99)),
          "the norm kernels alone (forward for inference, forward+backward for training); a whole training step is "
          "not timed by kernel records"),
    Claim("srmsnorm-speed", "Qin et al. 2023, Scaling TransNormer to 175 Billion Parameters",
          "https://arxiv.org/abs/2307.14995",
          "SRMSNorm accelerates the normalization by over 20% against RMSNorm and LayerNorm.",
          (Speed("srmsnorm", "rmsnorm", 1.2, 1.2), Speed("srmsnorm", "layernorm", 1.2, 1.2)),
          "normbench's SRMSNorm kernels (eager, compile, Triton), not the paper's fused Triton kernel at 175B scale"),
    Claim("two-pass-softmax", "Dukhan, Ablavatski 2020, The Two-Pass Softmax Algorithm",
          "https://arxiv.org/abs/2001.04438",
          "Two-pass softmax beats three-pass softmax on out-of-cache rows (up to 28% with AVX512, 18% with AVX2).",
          (Speed("softmax", "softmax", 1.0, 1.05, backend_pairs=SOFTMAX_PAIRS, min_row_bytes=OUT_OF_CACHE_ROW_BYTES,
                 min_input_bytes=OUT_OF_CACHE_TENSOR_BYTES, passes=("fwd",)),),
          "the paper measured hand-vectorised AVX2/AVX512 code; here Inductor-compiled (CPU) and Triton (GPU) "
          "formulations, forward pass, rows wider than a core's private cache (CPU 4 MiB, GPU 64 KiB) in inputs "
          "larger than any last-level cache (256 MiB)",
          "Pairs: compile_two_pass vs compile_three_pass, triton_two_pass vs triton_three_pass; the online kernel "
          "is not the paper's algorithm and is not paired. Margin: a 5% speed-up."),
)


def get_claim(cid: str) -> Claim:
    for c in CLAIMS:
        if c.id == cid:
            return c
    raise KeyError(f"no claim {cid!r}; claims: {', '.join(c.id for c in CLAIMS)}")


# --- picking records ----------------------------------------------------------------------------------------------

def _dedupe(records: Iterable[dict]) -> list[dict]:
    """One record per id, by the rule every ranking reader shares (``normbench.results.one_per_id``)."""
    from normbench.results.counted import one_per_id

    return one_per_id(records)


def _plain(cfg: dict) -> bool:
    """A run of the plain recipe: not a smoke budget, no extra model options, no overrides beyond the recipe."""
    return (cfg.get("quick") is not True and not cfg.get("qk_norm") and not cfg.get("base_norm")
            and cfg.get("backend", "eager") in (None, "eager"))


def _in_cell(rec: dict, arm: Arm) -> bool:
    cfg = rec["config"]
    c = arm.cell
    return (rec["norm"]["name"] == arm.norm and cfg.get("task") == c.task and cfg.get("model") == c.model
            and (cfg.get("variant") or "default") == c.variant
            and (cfg.get("placement") if c.model == "gpt" else None) == c.placement and _plain(cfg))


def _arm_groups(acc: list[dict], arm: Arm) -> dict[str, dict[str, list[dict]]]:
    """{hardware: {cell key: records}} of the runs of ``arm`` (tuning runs excluded)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in acc:
        if _in_cell(r, arm) and S.record_status(r) != "tuning":
            hw = r["provenance"].get("hardware_id", "?")
            out.setdefault(hw, {}).setdefault(S.cell_key(r), []).append(r)
    return out


def _counted(recs: list[dict]) -> int:
    return sum(S.record_status(r) in ("ok", "diverged") for r in recs)


def _pick(groups: dict[str, list[dict]]) -> list[dict]:
    """The cell a comparison uses: a tuned one (learning rate chosen on the validation split, ``config.lr_search``)
    before an untuned one, then the most counted runs, then the newest."""
    def key(recs):
        tuned = any(isinstance(r["config"].get("lr_search"), dict) for r in recs)
        return (tuned, _counted(recs), max(str(r["provenance"].get("timestamp", "")) for r in recs))
    return max(groups.values(), key=key)


# --- evaluating ---------------------------------------------------------------------------------------------------

def _advantage_values(recs: list[dict], metric: str, higher: bool, log: bool) -> tuple[list[float], int, int]:
    """(values on the analysis scale, signed so larger is better; failures; counted runs)."""
    vals, fails, n = [], 0, 0
    for r in recs:
        s = S.record_status(r)
        if s not in ("ok", "diverged"):
            continue
        n += 1
        v = r["metrics"].get(metric) if s == "ok" else None
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) or (log and v <= 0):
            fails += 1
            continue
        x = math.log(v) if log else float(v)
        vals.append(x if higher else -x)
    return vals, fails, n


def _margin_text(log: bool, margin: float, metric: str) -> str:
    if metric == "steps_to_target" or log:
        return f"{(math.exp(margin) - 1) * 100:.0f}% ({'steps' if metric == 'steps_to_target' else 'perplexity'} ratio)"
    return f"{margin:g} (absolute {metric})"


def _p_for_against(ya, yb, kind, margin, threshold) -> tuple[float, float]:
    if kind == "superior":
        return (S.welch_p(ya, yb, delta=threshold, alternative="greater"),
                S.welch_p(ya, yb, delta=max(margin, threshold), alternative="less"))
    if kind == "noninferior":
        return (S.welch_p(ya, yb, delta=-margin, alternative="greater"),
                S.welch_p(ya, yb, delta=-margin, alternative="less"))
    if kind == "equivalent":
        p_for = max(S.welch_p(ya, yb, delta=-margin, alternative="greater"),
                    S.welch_p(ya, yb, delta=margin, alternative="less"))
        p_against = min(1.0, 2 * min(S.welch_p(ya, yb, delta=-margin, alternative="less"),
                                     S.welch_p(ya, yb, delta=margin, alternative="greater")))
        return p_for, p_against
    raise ValueError(f"unknown comparison kind {kind!r}")


def _undecided(base: dict, reason: str, missing: list[str]) -> dict:
    base.update(decidable=False, reason=reason, missing=missing, p_for=1.0, p_against=1.0)
    return base


def evaluate_accuracy(comp: Accuracy, acc: list[dict]) -> dict:
    """One accuracy comparison from the accuracy records (before the multiplicity correction)."""
    out = {"type": "accuracy", "label": comp.label, "kind": comp.kind, "a": comp.a.label, "b": comp.b.label,
           "cells": sorted({comp.a.cell.label, comp.b.cell.label}), "metric": comp.metric, "test": None,
           "hardware": None, "n_a": 0, "n_b": 0, "failed_a": 0, "failed_b": 0, "effect": None, "p_welch": None,
           "p_mann_whitney": None, "p_fisher": None}
    ga, gb = _arm_groups(acc, comp.a), _arm_groups(acc, comp.b)
    # The machine with the most counted runs of both arms decides; a tie goes to the first hardware id (a set's
    # order changes between processes, and the claims must not).
    both = sorted(set(ga) & set(gb), key=lambda hw: (-(_counted(_pick(ga[hw])) + _counted(_pick(gb[hw]))), hw))
    if not both:
        missing = [arm.command() for arm, g in ((comp.a, ga), (comp.b, gb)) if not g]
        if not missing:  # each arm ran, but on different machines
            missing = [comp.b.command() + f"   # on {sorted(ga)[0]}"]
        return _undecided(out, "no records of " + " and ".join(
            arm.label + f" in {arm.cell.label}" for arm, g in ((comp.a, ga), (comp.b, gb)) if not g)
            if any(not g for g in (ga, gb)) else "the two arms ran on different machines", missing)
    hw = both[0]
    ra, rb = _pick(ga[hw]), _pick(gb[hw])
    met = (ra[0]["metrics"])
    higher = met.get("higher_is_better") is not False
    log = comp.metric == "steps_to_target" or S.is_log_metric(met.get("metric"))
    if comp.metric == "steps_to_target":
        higher = False
    metric_name = "steps_to_target" if comp.metric == "steps_to_target" else str(met.get("metric"))
    margin = STEPS_MARGIN if comp.metric == "steps_to_target" else (PPL_MARGIN if log else ACC_MARGIN)
    ya, fa, na = _advantage_values(ra, comp.metric, higher, log)
    yb, fb, nb = _advantage_values(rb, comp.metric, higher, log)
    out["records"] = sorted(r["id"] for r in ra + rb if S.record_status(r) in ("ok", "diverged"))
    out.update(hardware=hw, n_a=na, n_b=nb, failed_a=fa, failed_b=fb, metric=metric_name, scale="log" if log else
               "linear", margin=margin, margin_text=_margin_text(log, margin, comp.metric),
               summary_a=S.summarize(_natural(ya, higher, log), log=log).to_dict(),
               summary_b=S.summarize(_natural(yb, higher, log), log=log).to_dict())
    short = [(arm, n) for arm, n in ((comp.a, na), (comp.b, nb)) if n < MIN_SEEDS]
    if short:
        return _undecided(out, "too few seeds: " + ", ".join(f"{arm.label} has {n} of {MIN_SEEDS}" for arm, n in short),
                          [arm.command() for arm, _ in short])
    p_fail_a = S.fisher_worse(fa, na, fb, nb) if fa + fb else 1.0
    p_fail_b = S.fisher_worse(fb, nb, fa, na) if fa + fb else 1.0
    out["p_fisher"] = min(p_fail_a, p_fail_b)
    if min(p_fail_a, p_fail_b) < ALPHA:
        out["test"] = "fisher"
        if comp.kind in ("superior", "noninferior"):
            p_for, p_against = p_fail_b, p_fail_a
        else:  # a difference in failures refutes a match and can never show one
            p_for, p_against = 1.0, min(p_fail_a, p_fail_b)
    else:
        if len(ya) < MIN_FINISHED or len(yb) < MIN_FINISHED:
            return _undecided(out, f"fewer than {MIN_FINISHED} finished runs in an arm and no significant difference "
                                   "in failures", [])
        out["test"] = "welch"
        p_for, p_against = _p_for_against(ya, yb, comp.kind, margin, comp.threshold)
        if fa > fb:
            p_for = 1.0  # finished runs alone cannot show A better, or matching, while A fails more often than B
    if len(ya) >= 2 and len(yb) >= 2:
        d = S.difference(ya, yb)
        out.update(effect=d.effect, ci_low=d.low, ci_high=d.high, p_welch=d.p, p_mann_whitney=d.mwu_p,
                   effect_meaning="advantage of A over B on the analysis scale (positive: A better; log of B/A "
                                  "for perplexity and steps)" if log else "advantage of A over B (positive: A better)",
                   mann_whitney_u=d.mwu_u, welch_t=d.t, welch_df=d.df)
        out["effect_text"] = _effect_text(d.effect, d.low, d.high, log, comp.metric, metric_name)
    out.update(decidable=True, p_for=p_for, p_against=p_against, missing=[], reason="")
    return out


def _natural(y: list[float], higher: bool, log: bool) -> list[float]:
    """Undo the sign and log of :func:`_advantage_values` (for summaries on the metric's own scale)."""
    vals = [v if higher else -v for v in y]
    return [math.exp(v) for v in vals] if log else vals


def _effect_text(eff: float, lo: float, hi: float, log: bool, metric: str, name: str) -> str:
    """The advantage of A over B in words a reader can check against the tables."""
    if log:
        # eff is log(B/A) for a lower-is-better metric: A's value is exp(-eff) times B's.
        r, rl, rh = math.exp(-eff), math.exp(-hi), math.exp(-lo)
        what = "steps" if metric == "steps_to_target" else name
        return f"A/B {what} ratio {r:.3f} [{rl:.3f}, {rh:.3f}]"
    return f"A − B {name} {eff:+.4f} [{lo:+.4f}, {hi:+.4f}]"


# --- speed ----------------------------------------------------------------------------------------------------------

def _krow_key(r: dict) -> tuple:
    cfg = r["config"]
    return (cfg.get("layout"), tuple(cfg.get("shape") or ()), cfg.get("dtype"), cfg.get("pass"), cfg.get("device"),
            cfg.get("timing"), cfg.get("threads"), cfg.get("harness", "cli"))


def _run_key(r: dict) -> tuple:
    p = r["provenance"]
    # One run: one machine (hardware id and host), one commit, one command line.
    return (p.get("hardware_id"), p.get("git_commit"), p.get("command"), p.get("node"))


def _min_row(comp: Speed, r: dict) -> int:
    m = comp.min_row_bytes
    return m.get(r["config"].get("device"), max(m.values())) if isinstance(m, dict) else m


def _sizes(r: dict) -> tuple[int, int]:
    """(bytes of one row, bytes of the whole input) of a kernel record."""
    cfg = r["config"]
    size = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}.get(cfg.get("dtype"), 4)
    shape = [int(d) for d in (cfg.get("shape") or [0])]
    return shape[-1] * size, int(np.prod(shape)) * size


def evaluate_speed(comp: Speed, kern: list[dict]) -> list[dict]:
    """One speed comparison per device with records (its latest run that measured both sides)."""
    ok = [r for r in kern if S.record_status(r) == "ok" and r["config"].get("pass") in comp.passes
          and _sizes(r)[0] > _min_row(comp, r) and _sizes(r)[1] > comp.min_input_bytes]
    names = {comp.fast, comp.slow}
    by_run: dict[tuple, list[dict]] = {}
    for r in ok:
        if r["norm"]["name"] in names:
            by_run.setdefault(_run_key(r), []).append(r)
    devices: dict[str, list[tuple[str, list]]] = {}
    for key, recs in by_run.items():
        pairs = _speed_pairs(comp, recs)
        latest = max(str(r["provenance"].get("timestamp", "")) for r in recs)
        devices.setdefault(key[0], []).append((latest, pairs, key))
    base = {"type": "speed", "label": comp.label, "kind": "superior", "a": comp.fast, "b": comp.slow,
            "cells": ["kernel records"], "metric": "time_median_s", "test": None, "effect": None, "p_welch": None,
            "p_mann_whitney": None, "p_fisher": None, "n_a": 0, "n_b": 0, "failed_a": 0, "failed_b": 0,
            "scale": "log", "margin": math.log(comp.margin),
            "margin_text": f"{(comp.margin - 1) * 100:.0f}% speed-up"}
    cmd = f"normbench bench --norm {' '.join(sorted(names))}"
    if comp.backend_pairs:
        cmd += " --backend " + " ".join(b for pair in comp.backend_pairs for b in pair) + " --pass fwd"
    if not devices:
        what = ("two-pass and three-pass backends of " + comp.fast if comp.backend_pairs
                else f"{comp.fast} and {comp.slow}")
        return [_undecided(dict(base, hardware=None), f"no unflagged kernel records of {what}"
                           + (" with out-of-cache rows" if comp.min_input_bytes else ""), [cmd])]
    out = []
    for hw in sorted(devices):
        runs = sorted(devices[hw], key=lambda t: (len(t[1]) >= MIN_PAIRS, t[0]))
        latest, pairs, key = runs[-1]
        row = dict(base, hardware=hw, run=f"{key[2]} @ {str(key[1])[:10]}", n_a=len(pairs), n_b=len(pairs),
                   cells=[f"kernel records on {hw}: {key[2]} @ {str(key[1])[:10]}"])
        if len(pairs) < MIN_PAIRS:
            out.append(_undecided(row, f"{len(pairs)} matched configurations in one run on {hw}; "
                                       f"{MIN_PAIRS} needed", [cmd]))
            continue
        row["records"] = sorted({i for p in pairs for i in p[2:]})
        y = [math.log(slow / fast) for fast, slow, _, _ in pairs]   # log speed-up of ``fast``
        thr, mar = math.log(comp.threshold), math.log(max(comp.margin, comp.threshold))
        p_for = S.one_sample_p(y, popmean=thr, alternative="greater")
        p_against = S.one_sample_p(y, popmean=mar, alternative="less")
        sm = S.summarize([math.exp(v) for v in y], log=True)
        row.update(test="one-sample t on log time ratios", effect=float(np.mean(y)),
                   effect_meaning="mean log speed-up of A (log of B's time / A's time; positive: A faster)",
                   ci_low=math.log(sm.low),
                   ci_high=math.log(sm.high), p_welch=S.one_sample_p(y), p_mann_whitney=S.wilcoxon_p(y),
                   effect_text=f"speed-up {sm.mean:.3f}x [{sm.low:.3f}, {sm.high:.3f}] over {len(y)} configurations",
                   decidable=True, p_for=p_for, p_against=p_against, missing=[], reason="")
        out.append(row)
    return out


def _speed_pairs(comp: Speed, recs: list[dict]) -> list[tuple[float, float, str, str]]:
    """(fast time, slow time, fast record id, slow record id) for each configuration both sides measured."""
    idx: dict[tuple, tuple[float, str]] = {}
    for r in recs:
        t = r["metrics"].get("time_median_s")
        if isinstance(t, (int, float)) and t > 0:
            idx[(r["norm"]["name"], r["config"].get("backend")) + _krow_key(r)] = (float(t), r["id"])
    pairs = []
    for (norm, backend, *rest), (t, rid) in sorted(idx.items(), key=lambda kv: str(kv[0])):
        other = None
        if comp.backend_pairs:
            if norm == comp.fast:
                for fb, sb in comp.backend_pairs:
                    if backend == fb:
                        other = idx.get((norm, sb, *rest))
        elif norm == comp.fast:
            other = idx.get((comp.slow, backend, *rest))
        if other is not None:
            pairs.append((t, other[0], rid, other[1]))
    return pairs


# --- all claims -----------------------------------------------------------------------------------------------------

def _verdict(row: dict) -> str:
    if not row["decidable"]:
        return "inconclusive"
    if row["p_for_holm"] < ALPHA:
        return "reproduced"
    if row["p_against_holm"] < ALPHA:
        return "not reproduced"
    return "inconclusive"


def evaluate(records: Iterable[dict]) -> list[dict]:
    """Every claim's verdict from ``records`` (kernel and accuracy, any mix), with per-comparison statistics."""
    recs = _dedupe(r for r in records if isinstance(r, dict))
    acc = [r for r in recs if r.get("kind") == "accuracy"]
    kern = [r for r in recs if r.get("kind") == "kernel"]
    per_claim: list[tuple[Claim, list[dict]]] = []
    for claim in CLAIMS:
        rows = []
        for comp in claim.comparisons:
            rows.extend([evaluate_accuracy(comp, acc)] if isinstance(comp, Accuracy) else evaluate_speed(comp, kern))
        per_claim.append((claim, rows))
    flat = [row for _, rows in per_claim for row in rows]
    for key in ("p_for", "p_against"):
        for row, adj in zip(flat, S.holm([row[key] for row in flat]), strict=True):
            row[key + "_holm"] = adj
    out = []
    for claim, rows in per_claim:
        for row in rows:
            row["verdict"] = _verdict(row)
        vs = [r["verdict"] for r in rows]
        verdict = ("reproduced" if all(v == "reproduced" for v in vs) else
                   "not reproduced" if "not reproduced" in vs else "inconclusive")
        missing = [m for r in rows for m in r.get("missing", [])]
        out.append({
            "id": claim.id, "paper": claim.paper, "url": claim.url, "claim": claim.claim, "verdict": verdict,
            "decided": all(r["decidable"] for r in rows),
            "why": _why(verdict, rows),
            "missing": list(dict.fromkeys(missing)),
            "cells": sorted({c for r in rows for c in r["cells"]}),
            # Distinct records the comparisons used (runs for accuracy, kernel records for speed).
            "n": len({i for r in rows for i in r.get("records", [])}),
            "scale_caveat": claim.caveat, "note": claim.note,
            **_deciding(verdict, rows),
            "comparisons": rows,
        })
    return out


def _deciding(verdict: str, rows: list[dict]) -> dict:
    """The comparison that carries the verdict (the weakest reproduced one, the strongest refutation, or what is
    missing), summarised at the claim's level: its effect with interval and its Holm-corrected p-value."""
    if verdict == "reproduced":
        row, p = max(rows, key=lambda r: r["p_for_holm"]), "p_for_holm"
    elif verdict == "not reproduced":
        row, p = min((r for r in rows if r["verdict"] == "not reproduced"), key=lambda r: r["p_against_holm"]), \
            "p_against_holm"
    else:
        undecided = [r for r in rows if not r["decidable"]]
        row, p = (undecided[0] if undecided else min(rows, key=lambda r: r["p_for_holm"])), "p_for_holm"
    return {"deciding_comparison": row["label"], "effect": row.get("effect_text"), "effect_ci":
            [row.get("ci_low"), row.get("ci_high")], "p_holm": row[p] if row["decidable"] else None,
            "p_kind": "claim" if p == "p_for_holm" else "refute"}


def _why(verdict: str, rows: list[dict]) -> str:
    undecided = [r for r in rows if not r["decidable"]]
    if undecided:
        return "cannot decide yet: " + "; ".join(r["reason"] for r in undecided)
    if verdict == "reproduced":
        return "every comparison reproduces the claim after Holm's correction"
    if verdict == "not reproduced":
        bad = [r["label"] for r in rows if r["verdict"] == "not reproduced"]
        return "refuted by: " + "; ".join(bad)
    return "the evidence decides neither way at α = 0.05 after Holm's correction"


def load_records(root: str | Path = "results") -> list[dict]:
    """The records that count under ``root`` (``normbench.results.records_that_count``: one per id, those made by
    code that has since changed flagged ``stale`` and those never checked flagged ``legacy``, so they count
    nowhere); invalid ones are the business of ``normbench validate``."""
    from normbench.results import records_that_count

    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no results at {root}: pass --results DIR")
    return records_that_count(root).records


# --- output ---------------------------------------------------------------------------------------------------------

def _p(v) -> str:
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def comparison_line(r: dict) -> str:
    if not r["decidable"]:
        return f"{r['label']}: cannot decide yet ({r['reason']})"
    parts = [f"{r['label']} [{r['hardware']}]: n {r['n_a']}/{r['n_b']}"]
    if r["type"] == "accuracy" and (r["failed_a"] or r["failed_b"]):
        parts.append(f"failed {r['failed_a']}/{r['failed_b']}")
    if r.get("effect_text"):
        parts.append(r["effect_text"])
    parts.append(f"test {r['test']}, p(claim) {_p(r['p_for_holm'])}, p(refute) {_p(r['p_against_holm'])} (Holm)")
    if r.get("p_welch") is not None:
        parts.append(("Welch" if r["type"] == "accuracy" else "t") + f" p {_p(r['p_welch'])}, "
                     + ("Mann–Whitney" if r["type"] == "accuracy" else "Wilcoxon") + f" p {_p(r['p_mann_whitney'])}")
    return "; ".join(parts) + f" -> {r['verdict']}"


def to_text(results: list[dict]) -> str:
    lines = []
    for c in results:
        lines.append(f"[{c['verdict'].upper()}] {c['id']}: {c['claim']}")
        lines.append(f"    {c['paper']} ({c['url']})")
        for r in c["comparisons"]:
            lines.append("    - " + comparison_line(r))
        for m in c["missing"]:
            lines.append(f"    missing run: {m}")
        lines.append(f"    scale: {c['scale_caveat']}")
    counts = {v: sum(c["verdict"] == v for c in results) for v in VERDICTS}
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(results)} claims")
    return "\n".join(lines)


def to_markdown(results: list[dict]) -> str:
    """A Markdown table of every claim and its comparisons (the block generated into ``docs/accuracy.md``)."""
    out = ["| claim | paper | verdict | comparison | n (A/B) | effect [95% CI] "
           "| p two-sided: Welch (t) / MWU (Wilcoxon) | p Holm (claim / refute) |",
           "|---|---|---|---|---|---|---|---|"]
    for c in results:
        first = True
        for r in c["comparisons"]:
            head = (f"`{c['id']}`: {_md(c['claim'])}", f"[{_md(c['paper'])}]({c['url']})", f"**{c['verdict']}**") \
                if first else ("", "", "")
            first = False
            if r["decidable"]:
                cells = (f"{r['n_a']}/{r['n_b']}" + (f" (failed {r['failed_a']}/{r['failed_b']})"
                                                     if r["failed_a"] or r["failed_b"] else ""),
                         _md(r.get("effect_text") or "–"),
                         f"{_p(r.get('p_welch'))} / {_p(r.get('p_mann_whitney'))}",
                         f"{_p(r['p_for_holm'])} / {_p(r['p_against_holm'])}")
            else:
                cells = ("–", "cannot decide yet: " + _md(r["reason"]), "–", "–")
            out.append("| " + " | ".join(head + (_md(r["label"]) + f" → {r['verdict']}",) + cells) + " |")
    return "\n".join(out)


def _md(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


# --- command ----------------------------------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("claims", help="each paper claim: reproduced / not reproduced / inconclusive, from the records")
    p.add_argument("--results", default="results", help="results directory (default: results)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--markdown", action="store_true", help="a Markdown table (as generated into docs/accuracy.md)")
    p.set_defaults(func=_cmd_claims)


def _cmd_claims(args) -> int:
    import json

    from normbench._stdout import document_stream

    results = evaluate(load_records(args.results))
    if args.json:
        print(json.dumps(_clean({"alpha": ALPHA, "min_seeds": MIN_SEEDS, "claims": results}), indent=1,
                         allow_nan=False), file=document_stream())
    elif args.markdown:
        print(to_markdown(results))
    else:
        print(to_text(results))
    return 0


def _clean(o):
    """JSON-safe: numpy scalars to Python, an infinite statistic (exact difference, zero variance) to "inf"."""
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.floating, np.integer)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return o
