"""Benchmark shapes from real models (LLM hidden sizes and token counts, ResNet and ViT stages) and a quick subset."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """One input shape: ``dims`` is ``(batch, sequence, C)`` for the tokens layout and ``(N, C, H, W)`` for images.

    Tokens carry a batch dimension so batch-dependent norms see sequences as samples, as in a model.
    """

    label: str
    layout: str
    dims: tuple[int, ...]
    shape_class: str  # "llm", "vision", "quick" or "softmax"
    source: str = ""

    @property
    def num_features(self) -> int:
        return self.dims[-1] if self.layout == "tokens" else self.dims[1]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


#: Hidden sizes of real LLMs: GPT-2 small/medium/large/XL, Llama 1B-405B, GPT-3 175B.
LLM_HIDDEN = (512, 768, 1024, 2048, 4096, 5120, 8192, 12288, 16384)
LLM_TOKENS = (4096, 8192, 16384, 32768)
LLM_SEQ = 2048


def llm_shapes() -> list[Shape]:
    """Tokens x hidden size: every hidden size at 4k tokens, every token count at hidden 4096 and 8192, and 32k x 16384.

    Tokens are sequences of 2048 (``dims = (tokens / 2048, 2048, C)``); the label names tokens x hidden size.
    """
    pairs = [(4096, c) for c in LLM_HIDDEN]
    pairs += [(t, c) for c in (4096, 8192) for t in LLM_TOKENS if t != 4096]
    pairs.append((32768, 16384))
    return [Shape(f"llm-{t}x{c}", "tokens", (t // LLM_SEQ, LLM_SEQ, c), "llm",
                  f"{t} tokens ({t // LLM_SEQ} sequences of {LLM_SEQ}) at hidden size {c}") for t, c in pairs]


def vision_shapes() -> list[Shape]:
    """ResNet-50 stage inputs at batch 32 (224²), and ViT-B/L/H token blocks at batch 64 (197 tokens)."""
    resnet = [
        ("resnet50-stem", (32, 64, 112, 112)),
        ("resnet50-s1", (32, 256, 56, 56)),
        ("resnet50-s2", (32, 512, 28, 28)),
        ("resnet50-s3", (32, 1024, 14, 14)),
        ("resnet50-s4", (32, 2048, 7, 7)),
    ]
    vit = [("vit-b16", (64, 197, 768)), ("vit-l16", (64, 197, 1024)), ("vit-h14", (64, 257, 1280))]
    out = [Shape(label, "images", dims, "vision", "ResNet-50 stage, batch 32 at 224x224") for label, dims in resnet]
    out += [Shape(label, "tokens", dims, "vision", "ViT block input, batch 64") for label, dims in vit]
    return out


def quick_shapes() -> list[Shape]:
    """One small tokens shape (a 512-wide model over 8 sequences of 128) and one small images shape (CIFAR-sized).

    Small enough that the quick sweep of the whole zoo, torch.compile included, takes minutes on a 2-core CPU.
    """
    return [
        Shape("quick-8x128x512", "tokens", (8, 128, 512), "quick", "8 sequences of 128 tokens at hidden size 512"),
        Shape("quick-8x32x32x32", "images", (8, 32, 32, 32), "quick", "batch 8, 32 channels at 32x32"),
    ]


#: Attention-score widths (sequence lengths) and LLM vocabulary sizes: GPT-2 50257, Llama 2 32000, Llama 3 128256,
#: Qwen2 151936, Gemma 256000.
ATTN_SEQ = (1024, 2048, 4096, 8192)
VOCAB = (32000, 50257, 128256, 151936, 256000)
VOCAB_TOKENS = (512, 4096)
#: Rows of the paper-sized shapes (rows, entries): 4, 8 and 16 Mi entries per row (16 to 64 MiB in float32), beyond
#: any core's private cache; every input is 512 MiB in float32 (256 MiB in bfloat16), beyond any last-level cache.
PAPER_ROW = 1 << 22
PAPER_SHAPES = ((32, PAPER_ROW), (16, 2 * PAPER_ROW), (8, 4 * PAPER_ROW))


def softmax_shapes() -> list[Shape]:
    """Softmax/log-softmax inputs: attention scores, vocabulary logits, and rows longer than any private cache.

    * ``attn-{S}``: scores of 16 heads over a sequence of S (dims ``(16, S, S)``, rows of width S).
    * ``vocab-{T}x{V}``: logits of T tokens over a vocabulary of V (dims ``(1, T, V)``): T = 4096 (a training
      micro-batch) and T = 512 (an evaluation or decode batch; small enough for a CPU).
    * ``paper-32x4M``, ``paper-16x8M``, ``paper-8x16M``: 32 rows of 4 Mi, 16 of 8 Mi and 8 of 16 Mi entries (512 MiB
      in float32), the out-of-cache vectors of Dukhan & Ablavatski's CPU measurements.
    """
    out = [Shape(f"attn-{s}", "tokens", (16, s, s), "softmax", f"attention scores: 16 heads x {s} queries x {s} keys")
           for s in ATTN_SEQ]
    out += [Shape(f"vocab-{t}x{v}", "tokens", (1, t, v), "softmax", f"logits of {t} tokens over a vocabulary of {v}")
            for t in VOCAB_TOKENS for v in VOCAB]
    out += [Shape(f"paper-{r}x{n >> 20}M", "tokens", (1, r, n), "softmax",
                  f"{r} rows of {n >> 20} Mi entries: out-of-cache rows as in the two-pass softmax paper")
            for r, n in PAPER_SHAPES]
    return out


def shapes_for(shape_class: str | None = None, quick: bool = False) -> list[Shape]:
    """The shape grid: ``quick``, one class (``llm``, ``vision``, ``softmax``), or (default) both real-model classes.

    The ``softmax`` class is only for the softmax norms (``kind == "softmax"``); it is never part of the default.
    """
    if quick or shape_class == "quick":
        return quick_shapes()
    if shape_class == "softmax":
        return softmax_shapes()
    if shape_class in (None, "all"):
        return llm_shapes() + vision_shapes()
    if shape_class == "llm":
        return llm_shapes()
    if shape_class == "vision":
        return vision_shapes()
    raise ValueError(f"unknown shape class {shape_class!r}; use quick, llm, vision, softmax or all")


def by_label(label: str) -> Shape:
    """The shape called ``label`` in any class."""
    for s in quick_shapes() + llm_shapes() + vision_shapes() + softmax_shapes():
        if s.label == label:
            return s
    raise KeyError(f"unknown shape {label!r}")


def head_dim_for(hidden: int) -> int:
    """Head size used for attention-kind norms (QK-norm): 64 up to hidden 1024 (GPT-2), else 128 (Llama)."""
    return 64 if hidden <= 1024 else 128


def input_shape(shape: Shape, kind: str) -> tuple[int, ...]:
    """The tensor shape a norm of ``kind`` sees: attention norms get ``(batch, heads, sequence, head_dim)``."""
    if kind == "attention" and shape.layout == "tokens":
        *lead, c = shape.dims
        hd = head_dim_for(c)
        b, s = (lead[0], lead[1]) if len(lead) == 2 else (1, lead[0])
        return (b, c // hd, s, hd)
    return shape.dims


# --- free-form shapes -----------------------------------------------------------------------------------------------

LAYOUTS = ("tokens", "images")


class ShapeError(ValueError):
    """A ``--shape`` that is neither a grid label nor a well-formed free-form shape; the message names the problem."""


def _grid_shapes() -> list[Shape]:
    return quick_shapes() + llm_shapes() + vision_shapes() + softmax_shapes()


def custom_label(layout: str, dims: tuple[int, ...]) -> str:
    """The one label of a free-form shape: ``tokens-1x140x4096``, ``images-32x256x56x56``."""
    return f"{layout}-{'x'.join(str(d) for d in dims)}"


def shape_from_dims(layout: str, dims, source: str = "") -> Shape:
    """The shape with these dims: a grid shape's (label and class) when one has exactly them, else a ``custom`` one.

    Tokens dims are ``(tokens, C)`` or ``(batch, sequence, C)``; two dims mean one sequence, ``(1, tokens, C)``, so
    ``140x4096`` and ``1x140x4096`` are the same case (the same record id). Images dims are ``(N, C, H, W)``.
    """
    from normbench.catalog import canonical_dims

    try:
        dims = canonical_dims(layout, dims)
    except ValueError as exc:
        raise ShapeError(str(exc)) from None
    for s in _grid_shapes():
        if s.layout == layout and s.dims == dims:
            return s
    return Shape(custom_label(layout, dims), layout, dims, "custom", source or "free-form shape")


def parse_shape(text: str) -> Shape:
    """A shape from the command line or a suite's environment: a grid label (``llm-4096x4096``), a free-form shape
    (``140x4096``, ``1x140x4096``, ``tokens:8x1x4096``, ``images:32x256x56x56``) or a custom shape's own label
    (``tokens-1x140x4096``); the grammar is ``normbench.catalog.parse_dims``. Raises :class:`ShapeError` naming the
    problem."""
    from normbench.catalog import parse_dims

    raw = str(text).strip()
    for s in _grid_shapes():
        if s.label == raw:
            return s
    try:
        layout, dims = parse_dims(raw)
    except ValueError as exc:
        raise ShapeError(str(exc)) from None
    return shape_from_dims(layout, dims)
