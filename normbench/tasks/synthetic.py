"""Offline tasks generated deterministically from a seed: no download, same bytes on every machine.

``synth-shapes`` (image): 10 classes of shapes on textured backgrounds, 16x16 RGB, with per-image contrast
varying 16-fold and a random colour cast. Classification needs the shape, not the brightness, so a norm that
normalises per sample is invariant to the nuisance while batch statistics mix bright and dim images; at batch
size 2 those statistics are noisy and differ between training and evaluation.

``synth-lm`` (language): 64-token documents over a 64-symbol vocabulary. Tokens follow a sparse random
first-order Markov chain, except that spans of 4 to 10 tokens are repeated verbatim from earlier in the same
document. The Markov part is learnt in a few dozen steps; predicting the repeats needs attention to find the
earlier occurrence (an induction circuit), which is where optimisation quality, depth and norm placement show.
"""

from __future__ import annotations

import math

import torch

from normbench.tasks.base import Task, TaskData, split_summary

SHAPES_SIZE = 16
SHAPES_CLASSES = ("square", "frame", "disc", "ring", "hbar", "vbar", "diagonal", "plus", "cross", "dots")
SHAPES_TRAIN, SHAPES_EVAL = 12_000, 2_000
LM_VOCAB, LM_DOC = 64, 65  # 64 input tokens + 1 target per document
LM_TRAIN_DOCS, LM_EVAL_DOCS = 12_000, 512
DATA_SEED = 1234  # the data is fixed; training seeds change only the model init and batch order


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _u(g, n, lo, hi):
    return lo + (hi - lo) * torch.rand(n, generator=g)


def shape_masks(labels: torch.Tensor, g: torch.Generator, size: int = SHAPES_SIZE,
                radius: tuple[float, float] = (2.5, 4.5)) -> torch.Tensor:
    """Soft (anti-aliased) masks ``[N, size, size]`` in [0, 1] of each label's shape at a random place and scale."""
    n = len(labels)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    cy = _u(g, n, 5.0, size - 5.0).view(n, 1, 1)
    cx = _u(g, n, 5.0, size - 5.0).view(n, 1, 1)
    r = _u(g, n, *radius).view(n, 1, 1)
    w = _u(g, n, 0.8, 1.4).view(n, 1, 1)  # stroke half-width
    dy, dx = yy - cy, xx - cx
    cheb = torch.maximum(dy.abs(), dx.abs())
    dist = torch.sqrt(dy * dy + dx * dx)

    def soft(d):  # 1 inside (d < 0), 0 outside, one-pixel ramp
        return torch.sigmoid(-d / 0.35)

    masks = torch.stack([
        soft(cheb - r),                                                      # square
        soft((cheb - r).abs() - w),                                          # frame
        soft(dist - r),                                                      # disc
        soft((dist - r).abs() - w),                                          # ring
        soft(dy.abs() - w) * soft(dx.abs() - r - 1),                         # hbar
        soft(dx.abs() - w) * soft(dy.abs() - r - 1),                         # vbar
        soft((dy - dx).abs() / math.sqrt(2) - w) * soft(cheb - r),           # diagonal
        torch.maximum(soft(dy.abs() - w), soft(dx.abs() - w)) * soft(cheb - r),           # plus
        torch.maximum(soft((dy - dx).abs() / math.sqrt(2) - w),
                      soft((dy + dx).abs() / math.sqrt(2) - w)) * soft(cheb - r),        # cross
        torch.maximum(soft(torch.sqrt((dy - r / 2) ** 2 + (dx - r / 2) ** 2) - w - 0.4),
                      soft(torch.sqrt((dy + r / 2) ** 2 + (dx + r / 2) ** 2) - w - 0.4)),  # dots
    ], dim=1)  # [N, classes, H, W]
    return masks[torch.arange(n), labels]


def make_shapes(n: int, seed: int, size: int = SHAPES_SIZE, texture: float = 0.3, noise: float = 0.06,
                contrast: tuple[float, float] = (0.25, 4.0), radius: tuple[float, float] = (3.0, 5.0),
                polarity: bool = True) -> dict[str, torch.Tensor]:
    """``n`` labelled shape images ``uint8 [n, 3, size, size]`` from ``seed`` (same on every machine)."""
    g = _gen(seed)
    y = torch.randint(0, len(SHAPES_CLASSES), (n,), generator=g)
    mask = shape_masks(y, g, size, radius).unsqueeze(1)  # [n, 1, H, W]
    # Background: a random colour plus a smooth random texture (upsampled 4x4 noise).
    bg = torch.rand(n, 3, 1, 1, generator=g)
    tex = torch.nn.functional.interpolate(torch.rand(n, 3, 4, 4, generator=g), size=(size, size), mode="bilinear",
                                          align_corners=False)
    fg = torch.rand(n, 3, 1, 1, generator=g)
    # Keep the shape visible: push the foreground away from the background colour.
    fg = torch.where((fg - bg).abs() < 0.35, (bg + 0.5) % 1.0, fg)
    if polarity:  # foreground brighter than the background in every channel
        lo, hi = torch.minimum(fg, bg), torch.maximum(fg, bg)
        fg, bg = hi, lo
    img = (1 - mask) * ((1 - texture) * bg + texture * tex) + mask * fg
    img = img + noise * torch.randn(n, 3, size, size, generator=g)
    # Nuisance: per-image contrast over a 16x range around a random mid-grey, and a colour cast.
    contrast = torch.exp(_u(g, n, math.log(contrast[0]), math.log(contrast[1]))).view(n, 1, 1, 1)
    mid = _u(g, n, 0.3, 0.7).view(n, 1, 1, 1)
    cast = _u(g, 3 * n, -0.1, 0.1).view(n, 3, 1, 1)
    img = mid + contrast * (img - 0.5) * 0.5 + cast
    x = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return {"x": x, "y": y}


def markov_chain(vocab: int, g: torch.Generator, successors: int = 4) -> torch.Tensor:
    """A random sparse transition matrix ``[vocab, vocab]``: each token has ``successors`` likely next tokens."""
    probs = torch.zeros(vocab, vocab)
    for a in range(vocab):
        nxt = torch.randperm(vocab, generator=g)[:successors]
        w = -torch.log(torch.rand(successors, generator=g))  # Dirichlet(1) weights
        probs[a, nxt] = w / w.sum()
    return probs


def make_lm(n_docs: int, seed: int, chain: torch.Tensor, doc_len: int = LM_DOC, p_copy: float = 0.12,
            min_span: int = 4, max_span: int = 10) -> torch.Tensor:
    """``n_docs`` documents ``uint8 [n_docs, doc_len]``: Markov tokens with verbatim repeats of earlier spans."""
    g = _gen(seed)
    vocab = chain.shape[0]
    docs = torch.zeros(n_docs, doc_len, dtype=torch.long)
    docs[:, 0] = torch.randint(0, vocab, (n_docs,), generator=g)
    remaining = torch.zeros(n_docs, dtype=torch.long)  # tokens left in the current repeat
    src = torch.zeros(n_docs, dtype=torch.long)  # position being copied from
    rows = torch.arange(n_docs)
    cum = chain.cumsum(1)
    for t in range(1, doc_len):
        start = (remaining == 0) & (torch.rand(n_docs, generator=g) < p_copy) & (t >= max_span + 2)
        span = torch.randint(min_span, max_span + 1, (n_docs,), generator=g)
        # Copy from a start s with s + span <= t so the whole span was already written.
        hi = (t - span).clamp_min(1)
        s = (torch.rand(n_docs, generator=g) * hi).long()
        remaining = torch.where(start, span, remaining)
        src = torch.where(start, s, src)
        u = torch.rand(n_docs, 1, generator=g)
        markov = torch.searchsorted(cum[docs[:, t - 1]], u).squeeze(1).clamp_max(vocab - 1)
        copying = remaining > 0
        docs[:, t] = torch.where(copying, docs[rows, src], markov)
        src = torch.where(copying, src + 1, src)
        remaining = (remaining - 1).clamp_min(0)
    return docs.to(torch.uint8)


def _load_shapes(task, data_dir=None, quick=False):
    train = make_shapes(SHAPES_TRAIN, DATA_SEED)
    ev = make_shapes(SHAPES_EVAL, DATA_SEED + 1)
    # Validation is drawn from the same generator with its own seed: held out like a carved split, while the
    # training and test sets stay those of the records made before validation existed.
    val = make_shapes(SHAPES_EVAL, DATA_SEED + 2)
    # Standardise with statistics of the generated training set, as one would for a real dataset.
    xf = train["x"].float() / 255
    mean = tuple(xf.mean((0, 2, 3)).tolist())
    std = tuple(xf.std((0, 2, 3)).tolist())
    data = {"source": "generated", "val": f"generated, seed {DATA_SEED + 2}",
            "test": f"generated, seed {DATA_SEED + 1}", "subset": "all",
            **split_summary({"train": train, "val": val, "test": ev}, "images")}
    return TaskData(task=task, train=train, val=val, eval=ev, mean=mean, std=std, stored_size=SHAPES_SIZE,
                    info={"source": "generated", "data_seed": DATA_SEED, "data": data})


def _load_lm(task, data_dir=None, quick=False):
    chain = markov_chain(LM_VOCAB, _gen(DATA_SEED))
    train = make_lm(LM_TRAIN_DOCS, DATA_SEED + 1, chain).reshape(-1)
    ev = make_lm(LM_EVAL_DOCS, DATA_SEED + 2, chain).reshape(-1)
    val = make_lm(LM_EVAL_DOCS, DATA_SEED + 3, chain).reshape(-1)  # same chain, its own documents
    splits = {"train": {"tokens": train}, "val": {"tokens": val}, "test": {"tokens": ev}}
    data = {"source": "generated", "val": f"generated, seed {DATA_SEED + 3}",
            "test": f"generated, seed {DATA_SEED + 2}", "subset": "all", **split_summary(splits, "tokens")}
    return TaskData(task=task, train=splits["train"], val=splits["val"], eval=splits["test"],
                    info={"source": "generated", "data_seed": DATA_SEED, "doc_len": LM_DOC, "data": data})


def _tasks():
    return [
        Task(
            name="synth-shapes", title="Synthetic shapes (offline)", modality="image", offline=True, metric="top1",
            higher_is_better=True,
            description=f"10 shape classes at {SHAPES_SIZE}x{SHAPES_SIZE} on textured backgrounds with 16x per-image "
                        f"contrast variation and colour casts; {SHAPES_TRAIN} train / {SHAPES_EVAL} val / "
                        f"{SHAPES_EVAL} test images generated from seed {DATA_SEED}.",
            source="generated", loader=_load_shapes, default_model="resnet",
            models=("resnet", "vit", "fixup_resnet", "skipinit_resnet", "nf_resnet"),
            num_classes=len(SHAPES_CLASSES), image_size=SHAPES_SIZE,
            why_norms_differ="per-image contrast is a nuisance that per-sample norms remove and batch statistics "
                             "mix; at batch size 2 batch statistics are noisy and differ between train and eval",
        ),
        Task(
            name="synth-lm", title="Synthetic Markov + repeats language (offline)", modality="text", offline=True,
            metric="perplexity", higher_is_better=False,
            description=f"{LM_DOC - 1}-token documents over {LM_VOCAB} symbols: a sparse random Markov chain with "
                        f"verbatim repeats of earlier 4-10 token spans; {LM_TRAIN_DOCS} train / {LM_EVAL_DOCS} val / "
                        f"{LM_EVAL_DOCS} test documents generated from seed {DATA_SEED}.",
            source="generated", loader=_load_lm, default_model="gpt", models=("gpt",),
            vocab_size=LM_VOCAB, tokenizer="symbols",
            why_norms_differ="the repeats are only predictable through attention to the earlier occurrence; how fast "
                             "that circuit forms depends on optimisation stability, depth and norm placement",
        ),
    ]


TASKS = _tasks()
