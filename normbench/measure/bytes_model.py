"""Minimum-bytes-moved models per kind of norm and pass; GB/s = bytes / median time.

Every record stores ``config.bytes_model = {"formula": name, "params": {...}, "memory_bound": bool}`` so its
``bytes_moved`` (and from it GB/s and percent of ceiling) can be recomputed with :func:`bytes_moved` alone.
The formulas are spelled out in ``docs/measurement.md``; in short, with

* ``N`` = ``n_elements`` (elements of one input tensor), ``k`` = ``inputs`` (input tensors of that size),
* ``e`` = ``elem_bytes`` (bytes per element of the dtype), ``P`` = ``param_bytes`` (bytes of all parameters),
* ``S`` = ``stat_rows · stats_per_row`` statistics saved for backward, as float32 (4 bytes each),
* ``R`` = ``running_values`` float32 running-state values (read and written once per forward),

the forward reads the inputs and parameters and writes the outputs and statistics; the backward reads the
inputs (or the saved sum, for residual norms), the output gradients, parameters and statistics and writes the
input and parameter gradients::

    fwd      = 2·k·e·N + P + 4·S + 8·R
    bwd      = 3·k·e·N + 2·P + 4·S           (residual_rowwise: 4·e·N + 2·P + 4·S)
    fwd+bwd  = fwd + bwd
    identity = 0 for every pass (the no-norm baseline moves nothing)
    softmax:   fwd = 2·e·N (read x, write y)   bwd = 3·e·N (read y and dy, write dx)

Softmax's bytes are the same minimum for every algorithm, so an algorithm that reads the row fewer times shows a
higher GB/s; the reads it actually makes are reported beside it (``metrics.row_passes``, docs/softmax.md).

In eval mode (optional param ``eval_mode`` = 1, norms with running statistics) the running state is read, not
written: ``4·R`` instead of ``8·R`` in the forward, and the backward reads it too (``+ 4·R``); batch norms
(``channelwise``) then save no batch statistics (``S`` = 0).
"""

from __future__ import annotations

from typing import Any

PASSES = ("fwd", "bwd", "fwd+bwd")
FP32 = 4

#: formula name -> (what its statistics are over, memory-bound?)
FORMULAS = {
    "rowwise": ("statistics per row (token or pixel) over the C features", True),
    "groupwise": ("statistics per (sample, group) over (C/G, H, W)", True),
    "channelwise": ("statistics per channel over the batch (N, H, W); running state read and written", True),
    "pointwise": ("no statistics: an element-wise function with scalar/per-channel parameters", True),
    "residual_rowwise": ("residual add then row statistics: reads x and r, writes y and s = x + r", True),
    "softmax": ("softmax/log-softmax over the last axis: no parameters and no saved statistics (backward reads the "
                "output y); the same minimum for every algorithm", True),
    "identity": ("the no-norm baseline: returns its input, so no bytes move (% of ceiling not meaningful)", False),
    "weight_reparam": ("a reparameterised Linear/Conv2d: compute-bound, bytes reported but % of ceiling is not "
                       "meaningful", False),
}

#: Norms that centre (subtract a mean) save two float32 statistics per row (mean and rstd); the others one (rstd).
#: The built-ins that predate ``NormSpec.centring``; a norm added since declares it in its spec (``centres``).
CENTRING = frozenset({"layernorm", "layernorm_scaling", "add_layernorm", "groupnorm", "instancenorm", "batchnorm",
                      "ghost_batchnorm", "online_norm", "batch_channel_norm"})
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
PARAM_KEYS = ("n_elements", "inputs", "elem_bytes", "param_bytes", "stat_rows", "stats_per_row", "running_values")


def formula_for(family: str, kind: str, name: str = "") -> str:
    """The bytes formula for a norm from its spec's kind and family (plugins get the same defaults)."""
    if kind == "weight" or family == "weight":
        return "weight_reparam"
    if kind == "residual":
        return "residual_rowwise"
    if kind == "softmax":
        return "softmax"
    if family == "baseline":
        return "identity"
    if family == "pointwise":
        return "pointwise"
    if family == "groups":
        return "groupwise"
    if family == "batch":
        return "channelwise"
    return "rowwise"  # features, attention and any unknown family: statistics over the features


def centres(name: str, centring: bool | None = None) -> bool:
    """Whether a norm subtracts a mean: ``centring`` where given, else its registered spec's ``centring`` where
    declared, else whether it is one of the built-ins named in ``CENTRING``."""
    if centring is None:
        from normbench.discovery import REGISTRY

        spec = REGISTRY.specs.get(name)
        centring = getattr(spec, "centring", None)
    return centring if centring is not None else name in CENTRING


def stats_per_row(formula: str, name: str, centring: bool | None = None) -> int:
    """float32 statistics a norm keeps per row for its backward: none for the formulas without any, else two for a
    norm that centres (``centres``) and one for the others."""
    if formula in ("pointwise", "identity", "weight_reparam", "softmax"):
        return 0
    return 2 if centres(name, centring) else 1


def _check(formula: str, pass_: str, p: dict) -> None:
    if formula not in FORMULAS:
        raise KeyError(f"unknown bytes formula {formula!r}; known: {', '.join(FORMULAS)}")
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    missing = [k for k in PARAM_KEYS if k not in p]
    if missing:
        raise KeyError(f"bytes formula {formula!r} needs params {', '.join(missing)}")
    for k in PARAM_KEYS:
        if not isinstance(p[k], int) or p[k] < 0:
            raise ValueError(f"bytes-model param {k} must be a non-negative integer, got {p[k]!r}")


def bytes_moved(formula: str, pass_: str, params: dict[str, Any]) -> int:
    """Minimum bytes a ``pass_`` of a norm with ``formula`` and ``params`` must move (see the module docstring)."""
    _check(formula, pass_, params)
    if formula == "identity":
        return 0
    n, k, e = params["n_elements"], params["inputs"], params["elem_bytes"]
    pb = params["param_bytes"]
    stats = FP32 * params["stat_rows"] * params["stats_per_row"]
    eval_mode = bool(params.get("eval_mode", 0))
    running = (1 if eval_mode else 2) * FP32 * params["running_values"]
    fwd = 2 * k * e * n + pb + stats + running
    if formula == "residual_rowwise":
        bwd = 4 * e * n + 2 * pb + stats
    else:
        bwd = 3 * k * e * n + 2 * pb + stats
    if eval_mode:
        bwd += FP32 * params["running_values"]
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[pass_]


def make_model(formula: str, **params) -> dict:
    """The ``config.bytes_model`` entry of a record."""
    _check(formula, "fwd", params)
    out = {k: int(params[k]) for k in PARAM_KEYS}
    if params.get("eval_mode"):
        out["eval_mode"] = 1
    return {"formula": formula, "params": out, "memory_bound": FORMULAS[formula][1]}


def from_record_config(config: dict, pass_: str | None = None) -> int:
    """Recompute ``bytes_moved`` from a kernel record's config (its ``bytes_model`` and ``pass``)."""
    bm = config["bytes_model"]
    return bytes_moved(bm["formula"], pass_ or config["pass"], bm["params"])


def gbps(nbytes: int, seconds: float) -> float:
    """Bandwidth in GB/s (10⁹ bytes per second)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return nbytes / seconds / 1e9
