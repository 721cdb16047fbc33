"""The model catalog: real models' norm sites (width, zoo norm, eps, affine, how often each runs) and the shapes they
see in prefill and decode, read from the data file ``models.json`` beside this module.

A *site* is one norm placement of a model (Llama's ``input_layernorm``, Qwen3's ``q_norm``, ...); a *regime* is how
many rows reach it (prefill: whole sequences; decode: one position of each of a batch of sequences; vision: a batch
of images). :func:`site_shapes` turns a model into ``(site, regime, norm, layout, dims)`` rows, the shapes
``normbench bench --model`` measures and ``normbench best --model`` answers for. A record holds the shape only (the
model, site and regime stay out of its id), so models sharing a shape share its records.

:func:`sites_from_config` derives the sites from a Hugging Face ``config.json`` (standard library only; the catalog's
entries are that function applied to each model's published config, which ``tests/test_catalog.py`` re-checks
against stored copies). Stdlib only: this module sits at the bottom of the layers (``.importlinter``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

#: Regimes by model family: (name, batch, sequence positions per row block). Prefill reads whole sequences (1 of
#: 2048 tokens, 8 of 4096); decode reads one new position of each of B sequences. ``quick`` marks the ones
#: ``bench --model --quick`` keeps (the 8x4096 prefill is 134 M elements at hidden 4096: minutes on a 2-core CPU).
REGIMES = {
    "llm": [("prefill-1x2048", 1, 2048, True), ("prefill-8x4096", 8, 4096, False),
            ("decode-1", 1, 1, True), ("decode-8", 8, 1, True), ("decode-32", 32, 1, True),
            ("decode-128", 128, 1, True), ("decode-256", 256, 1, True)],
    "vision": [("batch-1", 1, None, True), ("batch-32", 32, None, False)],
    "diffusion": [("1024px-1", 1, None, True), ("1024px-4", 4, None, False)],
}


class ConfigError(ValueError):
    """A config.json that lacks a key the derivation needs (the message names it), or an unknown architecture."""


@dataclass(frozen=True)
class Site:
    """One norm placement of a model."""

    name: str
    norm: str                 # the zoo norm that computes it (rmsnorm, add_rmsnorm, layernorm, ...)
    width: int                # the normalised width (C)
    count: int                # how often it runs per token (per image for vision) in one forward
    eps: float | None
    affine: bool
    layout: str = "tokens"
    rows_per_token: int = 1   # QK-norm: heads (each head's vector is a row)
    tokens: int | None = None  # a fixed token count per sample (ViT's 197, FLUX's streams); None: the regime's
    spatial: tuple[int, int] | None = None  # images layout: (H, W)
    source: dict = field(default_factory=dict)  # field -> the config.json key (or the code) it comes from
    note: str = ""

    def to_dict(self) -> dict:
        d = {"site": self.name, "norm": self.norm, "width": self.width, "count": self.count, "eps": self.eps,
             "affine": self.affine, "layout": self.layout}
        if self.rows_per_token != 1:
            d["rows_per_token"] = self.rows_per_token
        if self.tokens is not None:
            d["tokens"] = self.tokens
        if self.spatial is not None:
            d["spatial"] = list(self.spatial)
        d["source"] = dict(self.source)
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Site":
        return cls(d["site"], d["norm"], int(d["width"]), int(d["count"]), d.get("eps"), bool(d["affine"]),
                   d.get("layout", "tokens"), int(d.get("rows_per_token", 1)), d.get("tokens"),
                   tuple(d["spatial"]) if d.get("spatial") else None, dict(d.get("source") or {}), d.get("note", ""))


@dataclass(frozen=True)
class Model:
    key: str
    name: str
    family: str               # llm, vision or diffusion
    architecture: str         # the config's model_type
    config_url: str
    config: dict              # the config.json values the sites cite
    sites: tuple[Site, ...]
    note: str = ""

    def to_dict(self) -> dict:
        d = {"model": self.key, "name": self.name, "family": self.family, "architecture": self.architecture,
             "config_url": self.config_url, "config": dict(self.config),
             "sites": [s.to_dict() for s in self.sites]}
        if self.note:
            d["note"] = self.note
        return d


@dataclass(frozen=True)
class SiteShape:
    """One site in one regime: the shape its norm sees."""

    model: str
    site: Site
    regime: str
    layout: str
    dims: tuple[int, ...]

    @property
    def norm(self) -> str:
        return self.site.norm


def _data() -> dict:
    return json.loads(resources.files(__package__).joinpath("models.json").read_text(encoding="utf-8"))


def _model(key: str, d: dict) -> Model:
    return Model(key, d["name"], d["family"], d["architecture"], d["config_url"], dict(d["config"]),
                 tuple(Site.from_dict(s) for s in d["sites"]), d.get("note", ""))


def models() -> list[Model]:
    """Every catalog model, in the file's order."""
    return [_model(k, d) for k, d in _data()["models"].items()]


def get(key: str) -> Model:
    """The catalog model called ``key`` (case-insensitive); ``KeyError`` names the ones there are."""
    data = _data()["models"]
    k = key.strip().lower()
    if k not in data:
        raise KeyError(f"unknown model {key!r}; the catalog has {', '.join(data)} (`normbench models`), or pass "
                       "--model-config path/to/config.json")
    return _model(k, data[k])


def regimes(family: str, quick: bool = False) -> list[tuple[str, int, int | None]]:
    return [(n, b, s) for n, b, s, q in REGIMES[family] if q or not quick]


def regime_for(family: str, batch: int, seq: int) -> str | None:
    """The regime of ``family`` that stands for a call over ``batch`` sequences of ``seq`` positions each, or None.

    As :data:`REGIMES` defines them: one position per sequence (``seq == 1``) is decode, more is prefill; within
    its kind a call goes to the smallest regime with at least as many positions (``batch x seq``): the measured
    shape nearest above it. None past the largest (no record speaks for it) and for families without sequences
    (vision, diffusion: their regimes are fixed image batches). ``normbench.apply_policy`` dispatches by this."""
    if family not in REGIMES or batch < 1 or seq < 1:
        return None
    decode = seq == 1
    fits = sorted((b * s, name) for name, b, s, _q in REGIMES[family]
                  if s is not None and (s == 1) == decode and b * s >= batch * seq)
    return fits[0][1] if fits else None


def site_shapes(model: Model, quick: bool = False, regime_names=None) -> list[SiteShape]:
    """Every (site, regime) of ``model`` with the dims its norm sees (tokens: ``(batch, rows, width)``, rows =
    tokens x rows_per_token; images: ``(batch, width, H, W)``)."""
    out = []
    for name, batch, seq in regimes(model.family, quick):
        if regime_names and name not in regime_names:
            continue
        for s in model.sites:
            if s.layout == "images":
                dims = (batch, s.width, *s.spatial)
            else:
                tokens = s.tokens if s.tokens is not None else seq
                dims = (batch, tokens * s.rows_per_token, s.width)
            out.append(SiteShape(model.key, s, name, s.layout, dims))
    return out


# --- deriving the sites from a Hugging Face config.json ---------------------------------------------------------------

def _need(cfg: dict, key: str, where: str):
    if key not in cfg:
        raise ConfigError(f"{where} lacks {key!r}, which the norm sites of a {cfg.get('model_type', '?')} model "
                          "need")
    return cfg[key]


def _llama_like(cfg: dict, where: str, *, qk: str | None = None, gemma: bool = False, mla: bool = False,
                reordered: bool = False) -> list[Site]:
    h = int(_need(cfg, "hidden_size", where))
    n = int(_need(cfg, "num_hidden_layers", where))
    eps_key = "rms_norm_eps"
    eps = cfg.get(eps_key)
    eps_src = eps_key if eps is not None else "not in config.json"
    src = {"width": "hidden_size", "count": "num_hidden_layers", "eps": eps_src}
    sites = []
    if not reordered:
        sites.append(Site("input_layernorm", "rmsnorm", h, n, eps, True, source=src))
        sites.append(Site("post_attention_layernorm", "rmsnorm", h, n, eps, True, source=src))
        sites.append(Site("residual_add+norm", "add_rmsnorm", h, 2 * n, eps, True, source=src,
                          note="the residual add fused with the next norm, as serving stacks run them"))
    else:  # OLMo-2: norms on the sublayers' outputs, before the residual add (no add+norm to fuse)
        sites.append(Site("post_attention_layernorm", "rmsnorm", h, n, eps, True, source=src))
        sites.append(Site("post_feedforward_layernorm", "rmsnorm", h, n, eps, True, source=src))
    if gemma:
        sites.append(Site("pre_feedforward_layernorm", "rmsnorm", h, n, eps, True, source=src))
        sites.append(Site("post_feedforward_layernorm", "rmsnorm", h, n, eps, True, source=src))
    if qk == "head":
        hd = int(_need(cfg, "head_dim", where))
        nh = int(_need(cfg, "num_attention_heads", where))
        nkv = int(_need(cfg, "num_key_value_heads", where))
        s = {"width": "head_dim", "count": "num_hidden_layers", "eps": eps_src}
        sites.append(Site("q_norm", "rmsnorm", hd, n, eps, True, rows_per_token=nh,
                          source={**s, "rows_per_token": "num_attention_heads"}))
        sites.append(Site("k_norm", "rmsnorm", hd, n, eps, True, rows_per_token=nkv,
                          source={**s, "rows_per_token": "num_key_value_heads"}))
    elif qk == "projection":  # OLMo-2: over the whole q and k projections
        nh = int(_need(cfg, "num_attention_heads", where))
        nkv = int(cfg.get("num_key_value_heads") or nh)
        hd = h // nh
        s = {"count": "num_hidden_layers", "eps": eps_src}
        sites.append(Site("q_norm", "rmsnorm", nh * hd, n, eps, True,
                          source={**s, "width": "hidden_size (num_attention_heads x head size)"}))
        sites.append(Site("k_norm", "rmsnorm", nkv * hd, n, eps, True,
                          source={**s, "width": "num_key_value_heads x hidden_size / num_attention_heads"}))
    if mla:
        qr = _need(cfg, "q_lora_rank", where)
        kvr = int(_need(cfg, "kv_lora_rank", where))
        if qr:
            sites.append(Site("q_a_layernorm", "rmsnorm", int(qr), n, eps, True,
                              source={"width": "q_lora_rank", "count": "num_hidden_layers", "eps": eps_src}))
        sites.append(Site("kv_a_layernorm", "rmsnorm", kvr, n, eps, True,
                          source={"width": "kv_lora_rank", "count": "num_hidden_layers", "eps": eps_src}))
    sites.append(Site("norm (final)", "rmsnorm", h, 1, eps, True,
                      source={"width": "hidden_size", "eps": eps_src}))
    if gemma:
        sites = [Site(s.name, s.norm, s.width, s.count, s.eps, s.affine, s.layout, s.rows_per_token, s.tokens,
                      s.spatial, s.source, (s.note + "; " if s.note else "")
                      + "Gemma scales by (1 + weight): the zoo's rmsnorm does the same work") for s in sites]
    return sites


def _gpt2(cfg, where):
    h = int(_need(cfg, "n_embd", where))
    n = int(_need(cfg, "n_layer", where))
    eps = _need(cfg, "layer_norm_epsilon", where)
    src = {"width": "n_embd", "count": "n_layer", "eps": "layer_norm_epsilon"}
    return [Site("ln_1", "layernorm", h, n, eps, True, source=src),
            Site("ln_2", "layernorm", h, n, eps, True, source=src),
            Site("residual_add+ln", "add_layernorm", h, 2 * n, eps, True, source=src,
                 note="the residual add fused with the next LayerNorm (ln_2, the next block's ln_1 or ln_f)"),
            Site("ln_f", "layernorm", h, 1, eps, True, source={"width": "n_embd", "eps": "layer_norm_epsilon"})]


def _vit(cfg, where):
    h = int(_need(cfg, "hidden_size", where))
    n = int(_need(cfg, "num_hidden_layers", where))
    eps = _need(cfg, "layer_norm_eps", where)
    img = int(_need(cfg, "image_size", where))
    patch = int(_need(cfg, "patch_size", where))
    tokens = (img // patch) ** 2 + 1
    src = {"width": "hidden_size", "count": "num_hidden_layers", "eps": "layer_norm_eps",
           "tokens": "(image_size / patch_size)^2 + 1 (the class token)"}
    return [Site("layernorm_before", "layernorm", h, n, eps, True, tokens=tokens, source=src),
            Site("layernorm_after", "layernorm", h, n, eps, True, tokens=tokens, source=src),
            Site("residual_add+ln", "add_layernorm", h, 2 * n, eps, True, tokens=tokens, source=src,
                 note="the residual add fused with the next LayerNorm"),
            Site("layernorm (final)", "layernorm", h, 1, eps, True, tokens=tokens,
                 source={k: v for k, v in src.items() if k != "count"})]


def _resnet(cfg, where):
    """Bottleneck ResNets (transformers' ResNetModel, stride in the 3x3 conv): every BatchNorm by (width, H x W)."""
    if _need(cfg, "layer_type", where) != "bottleneck":
        raise ConfigError(f"{where}: only bottleneck ResNets are derived (layer_type {cfg['layer_type']!r})")
    stem = int(_need(cfg, "embedding_size", where))
    widths = [int(w) for w in _need(cfg, "hidden_sizes", where)]
    depths = [int(d) for d in _need(cfg, "depths", where)]
    counts: dict[tuple[int, int], int] = {}

    def add(c, hw):
        counts[(c, hw)] = counts.get((c, hw), 0) + 1

    add(stem, 112)
    hw, cin = 56, stem
    for i, (out, depth) in enumerate(zip(widths, depths)):
        inner = out // 4
        stride = 1 if i == 0 else 2
        for b in range(depth):
            add(inner, hw)                          # 1x1 reduce
            hw_out = hw // stride if b == 0 else hw
            add(inner, hw_out)                      # 3x3 (the stride is here)
            add(out, hw_out)                        # 1x1 expand
            if b == 0 and (cin != out or stride != 1):
                add(out, hw_out)                    # the shortcut's projection
            hw, cin = hw_out, out
    src = {"width": "embedding_size, hidden_sizes (/4 inside a bottleneck)", "count": "depths",
           "eps": "torch.nn.BatchNorm2d's default (not in config.json)"}
    return [Site(f"bn {c}@{s}x{s}", "batchnorm", c, k, 1e-05, True, layout="images", spatial=(s, s), source=src)
            for (c, s), k in counts.items()]


def _flux(cfg, where):
    """diffusers' FluxTransformer2DModel at 1024x1024 (4096 image tokens) with 512 text tokens."""
    heads = int(_need(cfg, "num_attention_heads", where))
    hd = int(_need(cfg, "attention_head_dim", where))
    n2 = int(_need(cfg, "num_layers", where))
    n1 = int(_need(cfg, "num_single_layers", where))
    h = heads * hd
    img, txt = 4096, 512
    code = "diffusers' FluxTransformerBlock / FluxSingleTransformerBlock (code, eps=1e-6; not in config.json)"
    w = {"width": "num_attention_heads x attention_head_dim", "eps": code}
    q = {"width": "attention_head_dim", "rows_per_token": "num_attention_heads", "eps": code}
    note = "LayerNorm without affine (the adaLN modulation follows); the zoo's layernorm carries a weight and bias"
    return [
        Site("double norm1/norm2 (image)", "layernorm", h, 2 * n2, 1e-6, False, tokens=img,
             source={**w, "count": "2 x num_layers"}, note=note),
        Site("double norm1/norm2 (text)", "layernorm", h, 2 * n2, 1e-6, False, tokens=txt,
             source={**w, "count": "2 x num_layers"}, note=note),
        Site("double qk-norm (image)", "rmsnorm", hd, 2 * n2, 1e-6, True, rows_per_token=heads, tokens=img,
             source={**q, "count": "2 x num_layers (q and k)"}),
        Site("double qk-norm (text)", "rmsnorm", hd, 2 * n2, 1e-6, True, rows_per_token=heads, tokens=txt,
             source={**q, "count": "2 x num_layers (q and k)"}),
        Site("single norm", "layernorm", h, n1, 1e-6, False, tokens=img + txt,
             source={**w, "count": "num_single_layers"}, note=note),
        Site("single qk-norm", "rmsnorm", hd, 2 * n1, 1e-6, True, rows_per_token=heads, tokens=img + txt,
             source={**q, "count": "2 x num_single_layers (q and k)"}),
        Site("norm_out", "layernorm", h, 1, 1e-6, False, tokens=img, source=w, note=note),
    ]


#: model_type -> (family, derivation)
ARCHITECTURES = {
    "llama": ("llm", lambda c, w: _llama_like(c, w)),
    "mistral": ("llm", lambda c, w: _llama_like(c, w)),
    "qwen2": ("llm", lambda c, w: _llama_like(c, w)),
    "qwen3": ("llm", lambda c, w: _llama_like(c, w, qk="head")),
    "qwen3_moe": ("llm", lambda c, w: _llama_like(c, w, qk="head")),
    "gemma3_text": ("llm", lambda c, w: _llama_like(c, w, qk="head", gemma=True)),
    "olmo2": ("llm", lambda c, w: _llama_like(c, w, qk="projection", reordered=True)),
    "deepseek_v3": ("llm", lambda c, w: _llama_like(c, w, mla=True)),
    "gpt2": ("llm", _gpt2),
    "vit": ("vision", _vit),
    "resnet": ("vision", _resnet),
    "flux": ("diffusion", _flux),
}


def text_config(cfg: dict) -> dict:
    """A multimodal config's language model part (Gemma 3's ``text_config``), else the config itself."""
    if cfg.get("model_type") == "gemma3" and isinstance(cfg.get("text_config"), dict):
        return {"model_type": "gemma3_text", **cfg["text_config"]}
    return cfg


def architecture_of(cfg: dict, where: str = "config.json") -> str:
    cfg = text_config(cfg)
    mt = cfg.get("model_type")
    if mt is None and cfg.get("_class_name") == "FluxTransformer2DModel":
        mt = "flux"
    if mt is None:
        raise ConfigError(f"{where} lacks 'model_type' (or diffusers' '_class_name'), so its architecture is unknown")
    if mt not in ARCHITECTURES:
        raise ConfigError(f"{where}: model_type {mt!r} is not one normbench derives norm sites for; known: "
                          f"{', '.join(sorted(ARCHITECTURES))}")
    return mt


def sites_from_config(cfg: dict, where: str = "config.json") -> tuple[str, str, list[Site]]:
    """(family, architecture, sites) of the model a Hugging Face (or diffusers) ``config.json`` describes."""
    arch = architecture_of(cfg, where)
    family, derive = ARCHITECTURES[arch]
    return family, arch, derive(text_config(cfg), where)


def cited_values(cfg: dict, sites) -> dict:
    """The config values the sites cite (the keys named in their sources that the config has)."""
    cfg = text_config(cfg)
    keys = set()
    for s in sites:
        for v in s.source.values():
            for token in str(v).replace(",", " ").replace("(", " ").replace(")", " ").split():
                if token in cfg:
                    keys.add(token)
    return {k: cfg[k] for k in sorted(keys)}


def from_config_file(path: str | Path) -> Model:
    """A :class:`Model` from a local ``config.json`` (not in the catalog): its sites derived as the catalog's are."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no config file at {p}") from None
    except ValueError as exc:
        raise ConfigError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p} does not hold a JSON object")
    family, arch, sites = sites_from_config(cfg, str(p))
    key = (cfg.get("_name_or_path") or p.parent.name or p.stem).strip("/").split("/")[-1].lower() or "custom"
    return Model(key, key, family, arch, str(p), cited_values(cfg, sites), tuple(sites))


# --- free-form shapes (the grammar of `--shape`) ----------------------------------------------------------------------

SHAPE_LAYOUTS = ("tokens", "images")


def parse_dims(text: str) -> tuple[str, tuple[int, ...]]:
    """``(layout, dims)`` of a free-form shape: ``140x4096`` or ``1x140x4096`` (tokens: leading dims x C; two dims
    are one sequence, ``(1, tokens, C)``), ``tokens:8x1x4096``, ``images:32x256x56x56``, or a custom shape's label
    (``tokens-1x140x4096``). Raises ``ValueError`` naming the problem (a non-numeric, zero or negative dim, an
    unknown layout, a wrong number of dims)."""
    raw = str(text).strip()
    if not raw:
        raise ValueError("empty shape")
    layout, body = "tokens", raw
    for sep in (":", "-"):
        head, found, tail = raw.partition(sep)
        if found and head.strip().lower() in SHAPE_LAYOUTS:
            layout, body = head.strip().lower(), tail
            break
        if found and sep == ":":
            raise ValueError(f"unsupported layout {head.strip()!r} in {raw!r}; use tokens: or images:")
    parts = [p.strip() for p in body.lower().split("x")]
    if len(parts) < 2:
        raise ValueError(f"unknown shape {raw!r}: not a grid label (see `normbench bench --list`) nor dims like "
                         "140x4096, 1x140x4096 or images:32x256x56x56")
    dims = []
    for p in parts:
        try:
            dims.append(int(p))
        except ValueError:
            raise ValueError(f"dimension {p!r} of {raw!r} is not a number") from None
    return layout, canonical_dims(layout, dims)


def canonical_dims(layout: str, dims) -> tuple[int, ...]:
    """``dims`` checked (positive integers, 2 or 3 for tokens, 4 for images) with tokens made 3-dimensional."""
    if layout not in SHAPE_LAYOUTS:
        raise ValueError(f"unsupported layout {layout!r}; use tokens or images")
    dims = tuple(dims)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ValueError(f"dimension {d!r} is not an integer")
        if d <= 0:
            raise ValueError(f"dimension {d} must be positive (zero or negative dims have no data to normalise)")
    if layout == "tokens":
        if len(dims) == 2:
            dims = (1, *dims)
        if len(dims) != 3:
            raise ValueError(f"a tokens shape has 2 dims (tokens x C) or 3 (batch x sequence x C), got {len(dims)}"
                             + (" (an images shape is written images:NxCxHxW)" if len(dims) == 4 else ""))
    elif len(dims) != 4:
        raise ValueError(f"an images shape has 4 dims (N x C x H x W), got {len(dims)}")
    return dims
