"""The pre-registered paper claims and their fixed decision rules: data and thresholds only, so an audit diffs one file.

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

The code that applies these rules to the records is :mod:`normbench.claims.evaluation`; the ``normbench claims``
command and its text and Markdown output are :mod:`normbench.claims.command`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
