"""The ``triton`` backend of the row-wise, point-wise and group norms: autograd functions and module builders.

``build_<norm>(eager_module, spec)`` returns a module that shares the eager module's parameters (same objects,
same names, so ``state_dict`` keys and values are identical) and whose forward runs the fused Triton kernels in
``_rownorm``, ``_pointwise`` and ``_groupnorm``. Importing this module never imports Triton: the kernels load on
first use, and ``unavailable()`` says why they cannot run here. Design and tuning notes: docs/kernels.md.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

# the probe and the input check are shared with the softmax kernels (``softmax_backend``); launches go through
# ``_env.Launcher``, which also launches on the tensors' device
from normbench.kernels._env import NO_GPU, NO_TRITON, _check, _once, unavailable  # noqa: F401
from normbench.norms._base import check_input
from normbench.registry import adopt_state

_KERNELS: dict = {}


def _mod(name: str):
    """A kernel module, imported on first use (this module never imports Triton itself) and kept."""
    mod = _KERNELS.get(name)
    if mod is None:
        mod = _KERNELS[name] = importlib.import_module(f"normbench.kernels.{name}")
    return mod


def _c(p):
    """Kernels index parameters as dense vectors; a strided view is copied (and its gradient flows back)."""
    return p.contiguous() if p is not None else None


def _f(t: torch.Tensor | None, like):
    """A float32 gradient cast back to its parameter's dtype (``like``: the parameter or its dtype)."""
    if t is None or like is None:
        return None
    return t.to(like if isinstance(like, torch.dtype) else like.dtype)


def _dtype(p: torch.Tensor | None):
    return None if p is None else p.dtype


# ---------------------------------------------------------------------------------------------------------------
# Layout plumbing. The row kernels read tokens [..., C] as rows, and images [N, C, H, W] either in place (channel
# stride H·W, when C fits the images kernel) or as channels-last rows: free for a channels_last input, one copy of
# x (and of dy in the backward) for a plain NCHW input with a wide C.
# ---------------------------------------------------------------------------------------------------------------
def _rows_view(x: torch.Tensor, layout: str, images_kernel: bool):
    if layout == "tokens":
        return x.contiguous(), "tokens"
    if images_kernel and x.is_contiguous():
        return x, "images"
    return x.permute(0, 2, 3, 1).contiguous(), "nhwc"


def _grad_view(g: torch.Tensor, how: str) -> torch.Tensor:
    return g.permute(0, 2, 3, 1).contiguous() if how == "nhwc" else g.contiguous()


def _back(t: torch.Tensor, how: str) -> torch.Tensor:
    return t.permute(0, 3, 1, 2) if how == "nhwc" else t


class _RowNormFn(torch.autograd.Function):
    # The settings come as one tuple (mode, eps, layout, scalar_weight): autograd's apply costs per argument.
    @staticmethod
    def forward(ctx, x, weight, bias, cfg):
        # The kernel module checks the inputs (device, dtype) when it first plans a launch for their shape, dtype
        # and device, and launches through the launcher (on the tensors' device): no per-call check or guard here.
        mode, eps, layout, scalar_weight = cfg
        R = _KERNELS.get("_rownorm") or _mod("_rownorm")
        if layout == "tokens":
            xk, how = x.contiguous(), "tokens"
        else:
            xk, how = _rows_view(x, layout, R.next_pow2(x.shape[1]) <= R.MAX_IMAGES_C)
        y, _ = R.forward(xk, None, weight, bias, mode, eps, how == "images", scalar_weight)
        ctx.save_for_backward(xk, weight)  # no statistics: the backward computes them again from x
        ctx.cfg = (mode, eps, how, scalar_weight, None if bias is None else bias.dtype)
        return y if how == "tokens" else _back(y, how)

    @staticmethod
    @_once
    def backward(ctx, dy):
        return _row_backward(ctx, dy)


def _row_backward(ctx, dy):
    xk, weight = ctx.saved_tensors
    mode, eps, how, scalar_weight, bias_dtype = ctx.cfg
    need = ctx.needs_input_grad  # (x, weight, bias, cfg) or (x, weight, cfg): need[2] is False for the latter
    # the kernel module returns the parameter gradients in the parameters' dtypes
    dx, dw, db = _KERNELS["_rownorm"].backward(dy.contiguous() if how == "tokens" else _grad_view(dy, how), None,
                                               xk, weight, mode=mode, eps=eps, images=how == "images",
                                               scalar_weight=scalar_weight, bias_dtype=bias_dtype,
                                               need_dw=need[1] or need[2])
    return dx if how == "tokens" else _back(dx, how), dw, db, None


class _RowNormNoBiasFn(torch.autograd.Function):
    """``_RowNormFn`` without the bias argument, for the norms that have none (RMSNorm and kin): autograd's apply
    costs per argument, a None too."""

    @staticmethod
    def forward(ctx, x, weight, cfg):
        return _RowNormFn.forward(ctx, x, weight, None, cfg)

    @staticmethod
    @_once
    def backward(ctx, dy):
        dx, dw, _, _ = _row_backward(ctx, dy)
        return dx, dw, None


class _AddRowNormFn(torch.autograd.Function):
    # (mode, eps) come as one tuple: autograd's apply costs per argument.
    @staticmethod
    def forward(ctx, x, residual, weight, bias, cfg):
        mode, eps = cfg
        if x.dtype == residual.dtype:
            xk, rk = x.contiguous(), residual.contiguous()
        else:
            dt = torch.promote_types(x.dtype, residual.dtype)
            xk, rk = x.to(dt).contiguous(), residual.to(dt).contiguous()
        y, s = (_KERNELS.get("_rownorm") or _mod("_rownorm")).forward(xk, rk, weight, bias, mode, eps, False, False)
        ctx.save_for_backward(s, weight)
        ctx.cfg = (mode, eps, None if bias is None else bias.dtype, x.dtype, residual.dtype)
        ctx.set_materialize_grads(False)  # an unused s (or y) then costs no zero tensor and no read
        return y, s

    @staticmethod
    @_once
    def backward(ctx, dy, ds):
        return _add_row_backward(ctx, dy, ds)


def _add_row_backward(ctx, dy, ds):
    s, weight = ctx.saved_tensors
    mode, eps, bias_dtype, xdt, rdt = ctx.cfg
    if dy is None:
        dx, dw, db = ds, None, None
    else:
        need = ctx.needs_input_grad  # (x, r, weight, bias, cfg) or (x, r, weight, cfg): need[3] False for the latter
        dx, dw, db = _KERNELS["_rownorm"].backward(dy.contiguous(), ds.contiguous() if ds is not None else None,
                                                   s, weight, mode=mode, eps=eps, bias_dtype=bias_dtype,
                                                   need_dw=need[2] or need[3])
    if dx is None:
        return None, None, None, None, None
    # d(x + r)/dx = d(x + r)/dr = 1: both inputs get the same gradient, as torch's own add does.
    if dx.dtype == xdt and xdt == rdt:
        return dx, dx, dw, db, None
    return dx.to(xdt), dx.to(rdt), dw, db, None


class _AddNoBiasFn(torch.autograd.Function):
    """``_AddRowNormFn`` without the bias argument (add+RMSNorm): autograd's apply costs per argument."""

    @staticmethod
    def forward(ctx, x, residual, weight, cfg):
        return _AddRowNormFn.forward(ctx, x, residual, weight, None, cfg)

    @staticmethod
    @_once
    def backward(ctx, dy, ds):
        dx, dr, dw, _, _ = _add_row_backward(ctx, dy, ds)
        return dx, dr, dw, None


class _PointwiseFn(torch.autograd.Function):
    # (kind, layout) come as one tuple: autograd's apply costs per argument.
    @staticmethod
    def forward(ctx, x, alpha, shift, weight, bias, cfg):
        kind, layout = cfg
        P = _KERNELS.get("_pointwise") or _mod("_pointwise")
        if layout == "tokens":
            xk, how = x.contiguous(), "tokens"
        elif x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            xk, how = x.permute(0, 2, 3, 1), "nhwc"  # a free view: channels are already the fastest axis
        else:
            xk, how = x.contiguous(), "images"
        y = P.forward(xk, alpha, shift, weight, bias, kind, how == "images")
        if shift is None:
            ctx.save_for_backward(xk, alpha, weight)
        else:
            ctx.save_for_backward(xk, alpha, weight, shift)
        ctx.cfg = (kind, how, bias.dtype)
        return y if how == "tokens" else _back(y, how)

    @staticmethod
    @_once
    def backward(ctx, dy):
        return _pointwise_backward(ctx, dy)


def _pointwise_backward(ctx, dy):
    saved = ctx.saved_tensors
    xk, alpha, weight = saved[:3]
    shift = saved[3] if len(saved) == 4 else None
    kind, how, bias_dtype = ctx.cfg
    # the kernel module returns the parameter gradients in the parameters' dtypes
    dx, dw, db, da, ds = _KERNELS["_pointwise"].backward(
        dy.contiguous() if how == "tokens" else _grad_view(dy, how), xk, alpha, shift, weight, bias_dtype,
        kind=kind, images=how == "images")
    return dx if how == "tokens" else _back(dx, how), da, ds, dw, db, None


class _NoShiftFn(torch.autograd.Function):
    """``_PointwiseFn`` without the shift argument (DyT): autograd's apply costs per argument, a None too."""

    @staticmethod
    def forward(ctx, x, alpha, weight, bias, cfg):
        return _PointwiseFn.forward(ctx, x, alpha, None, weight, bias, cfg)

    @staticmethod
    @_once
    def backward(ctx, dy):
        dx, da, _, dw, db, _ = _pointwise_backward(ctx, dy)
        return dx, da, dw, db, None


class _GroupNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, num_groups, eps):
        _check(x)
        xk = x.contiguous()  # channels_last inputs are copied to NCHW: groups are contiguous there
        y, mean, rstd = _mod("_groupnorm").forward(xk, num_groups, weight, bias, eps,
                                                   store_stats=any(ctx.needs_input_grad))
        ctx.save_for_backward(xk, weight, mean, rstd)
        ctx.cfg = (num_groups, _dtype(bias))
        return y

    @staticmethod
    @_once
    def backward(ctx, dy):
        xk, weight, mean, rstd = ctx.saved_tensors
        num_groups, bias_dtype = ctx.cfg
        need_dw = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        dx, dw, db = _mod("_groupnorm").backward(dy.contiguous(), xk, num_groups, weight, mean, rstd,
                                                 bias_dtype is not None, need_dw=need_dw)
        return dx, _f(dw, weight), _f(db, bias_dtype), None, None


# ---------------------------------------------------------------------------------------------------------------
# Functional API (tested directly against float64 references in tests/test_triton_kernels.py).
# ---------------------------------------------------------------------------------------------------------------
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, layout: str = "tokens"):
    """y = γ·(x − μ)/√(σ² + ε) + β over the C features."""
    return _RowNormFn.apply(x, _c(weight), _c(bias), (0, float(eps), layout, False))


def rms_norm(x, weight=None, eps: float = 1e-6, layout: str = "tokens"):
    """y = γ·x/√(mean(x²) + ε); SRMSNorm is this with no weight."""
    return _RowNormNoBiasFn.apply(x, _c(weight), (1, float(eps), layout, False))


def crms_norm(x, weight=None, eps: float = 1e-6, layout: str = "tokens"):
    """y = γ·x/√((Σx² + (Σx)²)/(C + 1) + ε)."""
    return _RowNormNoBiasFn.apply(x, _c(weight), (2, float(eps), layout, False))


def scale_norm(x, g, eps: float = 1e-5, layout: str = "tokens"):
    """y = g·x/max(‖x‖₂, ε) with a scalar g."""
    return _RowNormNoBiasFn.apply(x, g, (3, float(eps), layout, True))


def add_layer_norm(x, residual, weight=None, bias=None, eps: float = 1e-5):
    """(LayerNorm(x + residual), x + residual)."""
    return _AddRowNormFn.apply(x, residual, _c(weight), _c(bias), (0, float(eps)))


def add_rms_norm(x, residual, weight=None, eps: float = 1e-6):
    """(RMSNorm(x + residual), x + residual)."""
    return _AddNoBiasFn.apply(x, residual, _c(weight), (1, float(eps)))


def dyt(x, alpha, weight, bias, layout: str = "tokens"):
    """y = γ·tanh(α·x) + β."""
    return _NoShiftFn.apply(x, alpha, _c(weight), _c(bias), (0, layout))


def derf(x, alpha, shift, weight, bias, layout: str = "tokens"):
    """y = γ·erf(α·x + s) + β."""
    return _PointwiseFn.apply(x, alpha, shift, _c(weight), _c(bias), (1, layout))


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """GroupNorm over images [N, C, *]: statistics per sample over (C/G, H, W) for each group."""
    if x.dim() < 2 or x.shape[1] % num_groups:
        raise ValueError(f"group_norm needs [N, C, ...] with C divisible by num_groups={num_groups}, "
                         f"got {tuple(x.shape)}")
    return _GroupNormFn.apply(x, _c(weight), _c(bias), int(num_groups), float(eps))


# ---------------------------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------------------------
# Settings (eps, layout, widths) are read from ``m.eager`` (an instance attribute) rather than through
# ``TritonNorm.__getattr__``'s fallback, which costs a caught AttributeError per name per call; parameters from
# ``m._parameters`` (``_param``): ``m.weight`` reaches them through both ``__getattr__``s after a failed normal
# lookup, several µs per call on the host (measured with scripts/triton_host.py --bench).
def _param(m, name):
    params = m._parameters
    return params[name] if name in params else getattr(m, name)


def _run_layernorm(m, x):
    e = m.eager
    layout = e.layout
    check_input(x, e.num_features, layout, "LayerNorm")
    return _RowNormFn.apply(x, _c(_param(m, "weight")), _c(_param(m, "bias")), (0, float(e.eps), layout, False))


def _run_rmsnorm(m, x):
    e = m.eager
    layout = e.layout
    check_input(x, e.num_features, layout, "RMSNorm")
    return _RowNormNoBiasFn.apply(x, _c(_param(m, "weight")), (1, float(e.eps), layout, False))


def _run_crmsnorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "CRMSNorm")
    return crms_norm(x, _param(m, "weight"), e.eps, e.layout)


def _run_scalenorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "ScaleNorm")
    return scale_norm(x, _param(m, "g"), e.eps, e.layout)


def _check_pair(m, x, residual, name):
    check_input(x, m.eager.num_features, "tokens", name)
    if residual.shape != x.shape:
        raise ValueError(f"{name} needs x and residual of the same shape, got {tuple(x.shape)} and "
                         f"{tuple(residual.shape)}")


def _run_add_layernorm(m, x, residual):
    _check_pair(m, x, residual, "AddLayerNorm")
    return add_layer_norm(x, residual, _param(m, "weight"), _param(m, "bias"), m.eager.eps)


def _run_add_rmsnorm(m, x, residual):
    _check_pair(m, x, residual, "AddRMSNorm")
    return add_rms_norm(x, residual, _param(m, "weight"), m.eager.eps)


def _run_dyt(m, x):
    e = m.eager
    layout = e.layout
    check_input(x, e.num_features, layout, "DyT")
    params = m._parameters  # DyT's alpha, weight and bias are always parameters
    return _NoShiftFn.apply(x, params["alpha"], params["weight"].contiguous(), params["bias"].contiguous(),
                            (0, layout))


def _run_derf(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "Derf")
    return derf(x, _param(m, "alpha"), _param(m, "shift"), _param(m, "weight"), _param(m, "bias"), e.layout)


def _run_groupnorm(m, x):
    check_input(x, m.num_features, "images", "GroupNorm")
    G = m.num_groups
    if (m.num_features // G) * x.shape[2] * x.shape[3] < 2:
        raise ValueError(f"GroupNorm with {G} groups needs more than one value per group, got input "
                         f"{tuple(x.shape)}; use fewer groups or a larger spatial size")
    return group_norm(x, G, _param(m, "weight"), _param(m, "bias"), m.eps)


_RUN = {
    "layernorm": _run_layernorm, "rmsnorm": _run_rmsnorm, "srmsnorm": _run_rmsnorm, "crmsnorm": _run_crmsnorm,
    "scalenorm": _run_scalenorm, "add_layernorm": _run_add_layernorm, "add_rmsnorm": _run_add_rmsnorm,
    "dyt": _run_dyt, "derf": _run_derf, "groupnorm": _run_groupnorm,
}


class TritonNorm(nn.Module):
    """An eager norm whose forward runs the fused Triton kernels; parameters and buffers are the eager module's.

    The eager module is kept outside ``_modules`` (so ``state_dict`` keys are exactly the eager ones) and still
    supplies the non-tensor settings (eps, layout, num_groups, ...) through attribute fallback. Parameters are
    read from this module, so ``.to()``/``.cuda()`` on it are always seen by the kernels.
    """

    def __init__(self, eager: nn.Module, op: str):
        super().__init__()
        if op not in _RUN:
            raise KeyError(f"no Triton kernel for {op!r}; kernels exist for {', '.join(sorted(_RUN))}")
        self.op = op
        adopt_state(self, eager)  # ``weight = None`` slots too, so they resolve without the fallback
        # Set last: before this, the attribute fallback is off, so registration sees only this module's names.
        object.__setattr__(self, "eager", eager)
        self.train(eager.training)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            eager = self.__dict__.get("eager")
            if eager is None:
                raise
            return getattr(eager, name)

    def forward(self, *args):
        return _RUN[self.op](self, *args)

    def train(self, mode: bool = True):
        super().train(mode)
        self.eager.train(mode)
        return self

    def extra_repr(self) -> str:
        return f"op={self.op}, " + self.eager.extra_repr()


def _specialise(op: str) -> type:
    """``TritonNorm`` whose ``forward`` is the op's run function itself: no dispatch through ``_RUN`` and ``*args``
    per call (about 1.5 µs of host time); a module attribute (``TritonNorm_<op>``), so instances pickle."""
    cls = type("TritonNorm", (TritonNorm,), {"forward": _RUN[op], "__module__": __name__,
                                             "__doc__": f"``TritonNorm`` of {op}."})
    cls.__qualname__ = f"TritonNorm_{op}"  # the name users and tests see stays TritonNorm; pickle finds the qualname
    globals()[cls.__qualname__] = cls
    return cls


_CLASSES = {op: _specialise(op) for op in _RUN}


def _builder(op: str):
    def build(eager: nn.Module, spec=None) -> nn.Module:
        return _CLASSES[op](eager, op)

    build.__name__ = f"build_{op}"
    build.__doc__ = f"The triton backend of {op}: a TritonNorm sharing ``eager``'s parameters."
    return build


build_layernorm = _builder("layernorm")
build_rmsnorm = _builder("rmsnorm")
build_srmsnorm = _builder("srmsnorm")
build_crmsnorm = _builder("crmsnorm")
build_scalenorm = _builder("scalenorm")
build_add_layernorm = _builder("add_layernorm")
build_add_rmsnorm = _builder("add_rmsnorm")
build_dyt = _builder("dyt")
build_derf = _builder("derf")
build_groupnorm = _builder("groupnorm")
