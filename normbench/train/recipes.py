"""Fixed training recipes per (task, model[, variant]): the norm and placement are the only things that change.

A recipe fixes the optimizer, learning-rate schedule, budget, batch size, augmentation, evaluation cadence,
the quality target for time-to-target, and the model's size. ``docs/accuracy.md`` explains each one and cites the
source of every choice. Variants are extra cells of the same task (``bs2``: micro-batches; ``deep``: a deep GPT
for placements with warm-up and clipping; ``deep_stress``: the same without either, at a high learning rate).

Where a norm's or a placement's paper prescribes part of the recipe (DyT's and Derf's embedding scalar and alpha0
per position; nGPT's zero weight decay and no warm-up), ``norm_overrides``/``placement_overrides`` hold it, and
``Recipe.adapted(norm, placement)`` applies it; the record stores the adapted recipe. Where a norm's official code
derives one of the norm's own constructor options from the recipe (PowerNorm's warm-up is the learning-rate warm-up),
``NORM_KWARGS_FROM_RECIPE`` says how and ``cell_recipe`` puts the result in ``Recipe.norm_kwargs``. The learning
rate is tuned per norm (``lr_grid``: multipliers of ``lr`` tried on the validation split; see ``normbench sweep
--tune``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class Recipe:
    task: str
    model: str
    variant: str = "default"
    optimizer: str = "adamw"  # "adamw" | "sgd" (Nesterov momentum)
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 0
    schedule: str = "cosine"  # linear warm-up, then cosine decay to min_lr_ratio * lr
    min_lr_ratio: float = 0.0
    steps: int = 1000
    batch_size: int = 32
    eval_every: int = 100
    #: Periodic evaluations use at most this many examples (images or sequences); the final one uses all.
    eval_limit: int | None = None
    augmentation: str = "none"  # "none" | "crop+flip" | "crop"
    crop_padding: int = 0
    label_smoothing: float = 0.0
    grad_clip: float | None = 1.0  # global-norm clipping
    agc: float | None = None  # adaptive gradient clipping (NFNets) threshold
    seq_len: int | None = None
    target: float | None = None
    model_options: dict = field(default_factory=dict)
    #: Steps used by ``--quick`` (real tasks only: a smoke run; offline recipes are already small).
    quick_steps: int | None = None
    #: What else ``--quick`` shrinks on a real task so that it runs in minutes on a laptop CPU: Recipe fields (model
    #: size in ``model_options``, merged into the recipe's; ``batch_size``, ``seq_len``, ``eval_limit``, ...)
    #: applied by ``for_quick``. Never recorded itself (a full run does not use it; a quick run records the recipe
    #: it ran, with these applied and ``quick`` set), so full recipes keep their hashes.
    quick_budget: dict = field(default_factory=dict)
    #: Set by ``for_quick`` on the quick budget it made (recorded only when set, so other recipes keep their hashes).
    quick: bool = False
    #: timm ResNet: zero-initialise the last norm's gain in each block (timm's default; off in norm comparisons).
    zero_init_last: bool = False
    #: Recipe fields a norm's own paper prescribes, by norm name (applied by ``adapted``).
    norm_overrides: dict = field(default_factory=dict)
    #: Recipe fields a placement's own paper prescribes, by placement (applied by ``adapted``).
    placement_overrides: dict = field(default_factory=dict)
    #: Constructor options of the norm under test that its official code derives from the recipe (set by
    #: ``cell_recipe`` from ``NORM_KWARGS_FROM_RECIPE``; the model passes them to every instance of that norm).
    norm_kwargs: dict = field(default_factory=dict)
    #: Learning-rate search: multipliers of ``lr`` tried, each with ``tune_seeds`` seeds, on the validation split.
    lr_grid: tuple[float, ...] = (1 / 3, 1.0, 3.0)
    #: When the best rate is at an edge of the grid, the search goes up to this many grid steps further that way.
    lr_extend: int = 1
    tune_seeds: int = 2
    #: Seeds run at the chosen learning rate, scored on the test split.
    final_seeds: int = 5
    #: Fraction of a real task's training split its loader holds out as the validation split (the loaders' own
    #: ``normbench.tasks.splits.VAL_FRACTION``, recorded here; kept in the recipe because it is part of its hash).
    val_fraction: float = 0.1
    #: What the recipe was adapted for (set by ``adapted``; e.g. "norm:dyt").
    adapted_for: tuple[str, ...] = ()
    notes: str = ""

    @property
    def name(self) -> str:
        base = f"{self.task}/{self.model}"
        return base if self.variant == "default" else f"{base}/{self.variant}"

    def for_quick(self) -> "Recipe":
        """The quick budget (``--quick``): ``quick_steps`` steps, evaluations and warm-up scaled to them, and
        ``quick_budget`` applied (a smaller model, batch, context, evaluation), marked ``quick``. Recipes without
        ``quick_steps`` (the offline tasks', already seconds) are their own quick budget, unchanged."""
        if self.quick_steps is None or self.quick_steps >= self.steps:
            return self
        ev = max(1, min(self.eval_every, self.quick_steps // 4))
        r = replace(self, steps=self.quick_steps, eval_every=ev, warmup_steps=min(self.warmup_steps,
                                                                                self.quick_steps // 10), quick=True)
        change = dict(self.quick_budget)
        if "model_options" in change:
            change["model_options"] = {**r.model_options, **change["model_options"]}
        return replace(r, **change)

    def model_kwargs(self, model: str) -> dict:
        """Options for ``build_model``: the size preset plus recipe-level model switches."""
        kwargs = dict(self.model_options)
        if model == "resnet":
            kwargs.setdefault("zero_init_last", self.zero_init_last)
        return kwargs

    def adapted(self, norm: str, placement: str | None = None) -> "Recipe":
        """This recipe with what ``norm``'s and ``placement``'s papers prescribe applied (model options merged)."""
        r, tags = self, []
        for tag, table, key in (("norm", self.norm_overrides, norm), ("placement", self.placement_overrides,
                                                                         placement)):
            change = table.get(key) if key else None
            if not change:
                continue
            change = dict(change)
            if "model_options" in change:
                change["model_options"] = {**r.model_options, **change["model_options"]}
            r = replace(r, **change)
            tags.append(f"{tag}:{key}")
        return replace(r, adapted_for=tuple(tags)) if tags else r

    def lr_candidates(self) -> list[float]:
        return [float(f"{self.lr * m:.4g}") for m in self.lr_grid]

    def to_dict(self) -> dict:
        """The recipe as recorded (notes are left out: prose edits must not change record ids)."""
        d = asdict(self)
        d.pop("notes")
        d.pop("quick_budget")  # what a quick run ran is recorded, with "quick": true; full recipes never use it
        if not d["quick"]:
            d.pop("quick")
        if not d["norm_kwargs"]:  # left out when empty, so recipes without them keep their hashes (and record ids)
            d.pop("norm_kwargs")
        d["betas"] = list(self.betas)
        d["lr_grid"] = list(self.lr_grid)
        d["adapted_for"] = list(self.adapted_for)
        d["name"] = self.name
        return d


def recipe_hash(recipe: Recipe) -> str:
    """sha256 (16 hex) of ``recipe.to_dict()``: part of an accuracy record's id."""
    import hashlib
    import json

    blob = json.dumps(recipe.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dyt_alpha0(width: int) -> tuple[float, float]:
    """(attention, other) alpha0 of DyT in an LLM of this width: DyT paper, Table 11.

    The table covers widths 1024-8192 (1024: 1.0/1.0, 2048: 1.0/0.5, 4096: 0.8/0.2, 8192: 0.2/0.05); narrower
    models were not tested, so they take the 1024 value, which is also the nanoGPT patch's default (1.0/1.0/1.0).
    """
    for w, pair in ((1024, (1.0, 1.0)), (2048, (1.0, 0.5)), (4096, (0.8, 0.2))):
        if width <= w:
            return pair
    return (0.2, 0.05)


def llm_norm_overrides(width: int) -> dict:
    """DyT and Derf in a GPT: the embedding scalar (init sqrt(d)) and alpha0 per position (attn / FFN / final)."""
    attn, other = dyt_alpha0(width)
    opts = {"embed_scale": True, "alpha_attn": attn, "alpha_ffn": other, "alpha_final": other}
    return {name: {"model_options": opts} for name in ("dyt", "derf")}


def _powernorm_kwargs(recipe: dict) -> dict:
    """PowerNorm's warm-up is the learning-rate warm-up: the authors' fairseq code builds the layer as
    ``MaskPowerNorm(embed_dim, group_num=head_num, warmup_iters=warmup_updates)`` (sIncerass/powernorm,
    ``fairseq/modules/norm_select.py``); during those steps it divides by the batch's own ψ (``PowerNorm``)."""
    return {"warmup_iters": int(recipe["warmup_steps"])}


#: Constructor options a norm's official code derives from the training recipe, by norm name: a function of the
#: recipe (as ``Recipe.to_dict()`` gives it) returning the options. ``cell_recipe`` applies it after ``--quick`` and
#: command-line overrides (so a shortened warm-up is followed); options given on the command line win.
NORM_KWARGS_FROM_RECIPE = {"powernorm": _powernorm_kwargs}


def norm_kwargs_from_recipe(norm: str, recipe: dict) -> dict:
    """The constructor options ``norm``'s official code derives from ``recipe`` (a ``Recipe.to_dict()``); most
    norms have none ({})."""
    derive = NORM_KWARGS_FROM_RECIPE.get(norm)
    return derive(recipe) if derive else {}


#: nGPT's own training recipe (official launcher): no weight decay, no warm-up.
NGPT_OVERRIDES = {"ngpt": {"weight_decay": 0.0, "warmup_steps": 0}}


_SHAPES_RESNET = Recipe(
    task="synth-shapes", model="resnet", optimizer="sgd", lr=0.05, weight_decay=5e-4, warmup_steps=12, steps=80,
    batch_size=32, eval_every=20, eval_limit=500, augmentation="none", target=0.5,
    notes="SGD+Nesterov, warm-up then cosine; no flips (they would turn a diagonal into another class); 80 steps "
          "so that no norm saturates (tuned GroupNorm reaches 99.9% at 120 steps, 100% at 300)",
)
_SHAPES_VIT = Recipe(
    task="synth-shapes", model="vit", optimizer="adamw", lr=2e-3, weight_decay=0.05, warmup_steps=30, steps=300,
    batch_size=32, eval_every=50, eval_limit=500, augmentation="none", target=0.5,
)
_LM = Recipe(
    task="synth-lm", model="gpt", optimizer="adamw", lr=3e-3, weight_decay=0.1, warmup_steps=30, steps=300,
    batch_size=8, eval_every=50, eval_limit=128, seq_len=64, target=8.0,
    model_options={"n_layer": 4, "n_head": 4, "n_embd": 64},
    norm_overrides=llm_norm_overrides(64), placement_overrides=NGPT_OVERRIDES,
)

RECIPES: dict[str, Recipe] = {}


def _add(r: Recipe) -> None:
    RECIPES[r.name] = r


_add(_SHAPES_RESNET)
_add(replace(_SHAPES_RESNET, variant="bs2", batch_size=2, lr=0.02, steps=600, eval_every=100, warmup_steps=60,
             target=0.3, notes="micro-batch cell: batch size 2 (1200 images seen); 600 steps so that no norm "
                               "saturates (tuned GroupNorm reached 99.6% at 1200 steps)"))
for _m in ("fixup_resnet", "skipinit_resnet"):
    _add(replace(_SHAPES_RESNET, model=_m))
_add(replace(_SHAPES_RESNET, model="nf_resnet", grad_clip=None, agc=0.04,
             notes="NF-ResNet: adaptive gradient clipping (lambda 0.04) instead of global-norm clipping"))
_add(_SHAPES_VIT)
_add(_LM)
_add(replace(_LM, variant="deep", model_options={"n_layer": 12, "n_head": 2, "n_embd": 32}, steps=200,
             warmup_steps=20, grad_clip=1.0,
             notes="deep cell for placements: 12 narrow blocks with warm-up and clipping (the standard form)"))
_add(replace(_LM, variant="deep_stress", model_options={"n_layer": 12, "n_head": 2, "n_embd": 32}, steps=200,
             lr=1e-2, warmup_steps=0, grad_clip=None,
             notes="stress variant of the deep cell: high learning rate, no warm-up, no clipping (the condition of "
                   "the Post-LN instability claim)"))

# Real tasks. Budgets follow common short schedules; they need a GPU to finish in reasonable time.
# ``--quick`` on them is a smoke run in minutes on a laptop CPU (measured: docs/accuracy.md): besides the steps
# (``quick_steps``) it shrinks the model (images keep the task's resolution), the batch, the GPT's context and the
# periodic evaluations; the task's quick data subset (normbench.tasks) bounds the final evaluation.
QUICK_RESNET3 = {"model_options": {"layers": [1, 1, 1], "channels": [16, 32, 64]}, "batch_size": 32,
                 "eval_limit": 256}  # 32px: ResNet-8
QUICK_RESNET4 = {"model_options": {"layers": [1, 1, 1, 1], "channels": [16, 32, 64, 128]}, "batch_size": 32,
                 "eval_limit": 256}  # 64px / 128px: a narrow ResNet-10
QUICK_VIT = {"model_options": {"depth": 2, "embed_dim": 64, "num_heads": 2, "mlp_ratio": 2.0}, "batch_size": 32,
             "eval_limit": 256}
QUICK_GPT = {"model_options": {"n_layer": 2, "n_head": 4, "n_embd": 128}, "seq_len": 128, "batch_size": 8,
             "eval_limit": 32}
QUICK_GPT_DEEP = {**QUICK_GPT, "model_options": {"n_layer": 8, "n_head": 4, "n_embd": 64}}  # still deep and narrow

_CIFAR_RESNET = Recipe(
    task="cifar10", model="resnet", optimizer="sgd", lr=0.1, weight_decay=5e-4, warmup_steps=390, steps=30 * 390,
    batch_size=128, eval_every=1950, eval_limit=2000, augmentation="crop+flip", crop_padding=4, target=0.90,
    quick_steps=100, quick_budget=QUICK_RESNET3, notes="ResNet-20 (3x3 BasicBlocks), 30 epochs",
)
_CIFAR_VIT = Recipe(
    task="cifar10", model="vit", optimizer="adamw", lr=1e-3, weight_decay=0.05, warmup_steps=1950,
    steps=50 * 390, batch_size=128, eval_every=1950, eval_limit=2000, augmentation="crop+flip", crop_padding=4,
    label_smoothing=0.1, target=0.75, quick_steps=100, quick_budget=QUICK_VIT, notes="ViT 6x192, patch 4, 50 epochs",
)
for _r in (_CIFAR_RESNET, _CIFAR_VIT):
    _add(_r)
    _add(replace(_r, task="cifar100", target=0.65 if _r.model == "resnet" else 0.50))
for _m in ("fixup_resnet", "skipinit_resnet"):
    _add(replace(_CIFAR_RESNET, model=_m))
    _add(replace(_CIFAR_RESNET, model=_m, task="cifar100", target=0.65))
_add(replace(_CIFAR_RESNET, model="nf_resnet", grad_clip=None, agc=0.02))
_add(replace(_CIFAR_RESNET, model="nf_resnet", task="cifar100", grad_clip=None, agc=0.02, target=0.65))
_add(replace(_CIFAR_RESNET, variant="bs2", batch_size=2, lr=0.1 * 2 / 128, steps=60_000, eval_every=10_000,
             warmup_steps=3000, quick_steps=200,
             quick_budget={k: v for k, v in QUICK_RESNET3.items() if k != "batch_size"},  # the cell is batch size 2
             notes="micro-batch cell: batch size 2, lr scaled linearly"))

_IMAGENETTE_RESNET = Recipe(
    task="imagenette", model="resnet", optimizer="sgd", lr=0.1, weight_decay=5e-4, warmup_steps=296,
    steps=40 * 148, batch_size=64, eval_every=740, eval_limit=1000, augmentation="crop+flip", target=0.85,
    quick_steps=50, quick_budget=QUICK_RESNET4, notes="ResNet-18, random 128px crops of the 144px images, 40 epochs",
)
_add(_IMAGENETTE_RESNET)
_add(replace(_IMAGENETTE_RESNET, model="vit", optimizer="adamw", lr=5e-4, weight_decay=0.05, warmup_steps=740,
             label_smoothing=0.1, target=0.65, quick_budget=QUICK_VIT, notes="ViT 6x192, patch 16, 40 epochs"))
for _m in ("fixup_resnet", "skipinit_resnet"):
    _add(replace(_IMAGENETTE_RESNET, model=_m))
_add(replace(_IMAGENETTE_RESNET, model="nf_resnet", grad_clip=None, agc=0.02))

_TINY_RESNET = Recipe(
    task="tiny-imagenet", model="resnet", optimizer="sgd", lr=0.1, weight_decay=5e-4, warmup_steps=781,
    steps=30 * 781, batch_size=128, eval_every=3905, eval_limit=2000, augmentation="crop+flip", crop_padding=4,
    target=0.50, quick_steps=50, quick_budget=QUICK_RESNET4, notes="ResNet-18 with a 3x3 stem and max-pool, 30 epochs",
)
_add(_TINY_RESNET)
_add(replace(_TINY_RESNET, model="vit", optimizer="adamw", lr=1e-3, weight_decay=0.05, warmup_steps=3905,
             label_smoothing=0.1, target=0.35, quick_budget=QUICK_VIT, notes="ViT 6x192, patch 8, 30 epochs"))
for _m in ("fixup_resnet", "skipinit_resnet"):
    _add(replace(_TINY_RESNET, model=_m))
_add(replace(_TINY_RESNET, model="nf_resnet", grad_clip=None, agc=0.02))

_WT2 = Recipe(
    task="wikitext-2", model="gpt", optimizer="adamw", lr=1e-3, weight_decay=0.1, warmup_steps=200, steps=5000,
    batch_size=32, eval_every=500, eval_limit=256, seq_len=256, target=3.0, quick_steps=50, quick_budget=QUICK_GPT,
    model_options={"n_layer": 6, "n_head": 8, "n_embd": 256}, norm_overrides=llm_norm_overrides(256),
    placement_overrides=NGPT_OVERRIDES, notes="byte-level perplexity (vocabulary 256)",
)
_add(_WT2)
_add(replace(_WT2, variant="deep", model_options={"n_layer": 24, "n_head": 8, "n_embd": 256},
             quick_budget=QUICK_GPT_DEEP, notes="deep cell for placements: 24 blocks, warm-up and clipping"))
_add(replace(_WT2, variant="deep_stress", model_options={"n_layer": 24, "n_head": 8, "n_embd": 256},
             warmup_steps=0, grad_clip=None, quick_budget=QUICK_GPT_DEEP,
             notes="stress variant: 24 blocks, no warm-up, no clipping"))
_add(replace(_WT2, task="wikitext-103", steps=20_000, batch_size=64, seq_len=512, eval_every=2000, target=2.6,
             warmup_steps=1000, model_options={"n_layer": 8, "n_head": 8, "n_embd": 512},
             norm_overrides=llm_norm_overrides(512)))


def recipe_names() -> list[str]:
    return list(RECIPES)


def get_recipe(task: str, model: str, variant: str | None = None) -> Recipe:
    """The recipe for ``task``/``model`` (and ``variant``); a missing one raises ``KeyError`` listing what exists."""
    key = f"{task}/{model}" + (f"/{variant}" if variant and variant != "default" else "")
    if key not in RECIPES:
        have = [n for n in RECIPES if n.startswith(f"{task}/")]
        raise KeyError(f"no recipe {key!r}; recipes for {task}: {', '.join(have) or 'none'}")
    return RECIPES[key]


def cell_recipe(task: str, model: str, norm: str, placement: str | None = None, variant: str | None = None,
                quick: bool = False, overrides: dict | None = None) -> Recipe:
    """The recipe a run uses: the cell's recipe adapted for ``norm`` and the GPT ``placement`` (Pre-LN by default),
    shortened for ``quick``, with command-line ``overrides`` (a warm-up longer than the shortened run becomes a tenth
    of it), and the norm's constructor options derived from the result (``NORM_KWARGS_FROM_RECIPE``).
    ``normbench train`` and the site's reproduce commands both build it here."""
    placement = (placement or "pre_ln") if model == "gpt" else None
    r = get_recipe(task, model, variant).adapted(norm, placement)
    if quick:
        r = r.for_quick()
    if overrides:
        unknown = set(overrides) - set(Recipe.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown recipe fields {sorted(unknown)}")
        r = replace(r, **overrides)
        if r.warmup_steps > r.steps:
            r = replace(r, warmup_steps=r.steps // 10)
    derived = norm_kwargs_from_recipe(norm, r.to_dict())
    if derived:
        r = replace(r, norm_kwargs={**derived, **r.norm_kwargs})
    return r


def variants(task: str, model: str) -> list[str]:
    prefix = f"{task}/{model}"
    return [r.variant for n, r in RECIPES.items() if n == prefix or n.startswith(prefix + "/")]
