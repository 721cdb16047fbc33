"""normbench's row-wise Triton kernels as ``torch.library`` ops (namespace ``normbench``), so that compiled regions
and captured graphs see them: ``torch.compile`` traces a call to one of these ops into its graph (Dynamo cannot trace
the backend's own path, a launch from a plan cache).

* ``normbench::layer_norm``, ``rms_norm`` (RMSNorm; SRMSNorm is it without a weight), ``crms_norm``, ``scale_norm``:
  the forward; each has a fake implementation (output shape, dtype and strides as the kernel's: tokens contiguous,
  images in place or channels-last as ``triton_backend._rows_view`` decides) and its backward registered with
  ``register_autograd``, which calls
* ``normbench::row_norm_backward``: dx and the parameter gradients the kernel computes (a list: dx, then dγ or dg,
  then dβ, each only where the parameter exists and a gradient is needed). No statistics are saved between the two:
  the kernels compute them again from x, so the forward's only output is y.
* ``normbench::add_layer_norm``, ``add_rms_norm``: (y, s = x + residual), the fused residual kernels; their backward
  ``normbench::add_row_norm_backward`` (the sum's gradient, then the parameters').

The real implementations are the backend's own launch path (``triton_backend``'s autograd functions' forward and
backward bodies, given a plain context object instead of autograd's): same plans, same kernels.

:func:`traceable` wraps a Triton backend's module for a policy (:mod:`normbench.policy.dispatch`): called eagerly it
runs the module's own forward (the lean direct path, no dispatcher), traced by Dynamo it calls the op. The ops are
registered when this module is imported (``normbench.policy`` imports it).

The point-wise (DyT, Derf) and GroupNorm kernels have no op yet: their modules are returned unwrapped and a compile
of them breaks the graph as before.
"""

from typing import Optional

import torch
from torch import Tensor, nn

from normbench.kernels import triton_backend as _tb
from normbench.norms._base import check_input

#: The kernels' statistic per norm (``MODE`` of ``_rownorm``), as ``triton_backend``'s functional API passes it.
LAYERNORM, RMSNORM, CRMSNORM, SCALENORM = 0, 1, 2, 3


class _Ctx:
    """What ``_RowNormFn.forward`` and ``_row_backward`` read and write of an autograd context."""

    __slots__ = ("saved_tensors", "cfg", "needs_input_grad")

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors

    def set_materialize_grads(self, value: bool) -> None:
        pass


def _rows(x: Tensor, layout: str):
    """(the kernel's view of x, how) as ``_RowNormFn.forward`` takes it (tokens: rows; images: in place when C fits
    the images kernel and x is contiguous, else a channels-last copy)."""
    if layout == "tokens":
        return _tb._rows_view(x, layout, False)
    R = _tb._mod("_rownorm")
    return _tb._rows_view(x, layout, R.next_pow2(int(x.shape[1])) <= R.MAX_IMAGES_C)


def _forward(x, weight, bias, mode: int, eps: float, layout: str, scalar_weight: bool) -> Tensor:
    return _tb._RowNormFn.forward(_Ctx(), x, _tb._c(weight), _tb._c(bias), (mode, float(eps), layout, scalar_weight))


def _forward_fake(x, layout: str) -> Tensor:
    xk, how = _rows(x, layout)
    return _tb._back(torch.empty_like(xk), how)


# --- the forward ops ------------------------------------------------------------------------------------------------
@torch.library.custom_op("normbench::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, layout: str) -> Tensor:
    """LayerNorm through normbench's Triton kernel: y = γ·(x − μ)/√(σ² + ε) + β over the C features."""
    return _forward(x, weight, bias, LAYERNORM, eps, layout, False)


@torch.library.custom_op("normbench::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float, layout: str) -> Tensor:
    """RMSNorm through normbench's Triton kernel: y = γ·x/√(mean(x²) + ε) (SRMSNorm: no γ)."""
    return _forward(x, weight, None, RMSNORM, eps, layout, False)


@torch.library.custom_op("normbench::crms_norm", mutates_args=())
def crms_norm(x: Tensor, weight: Optional[Tensor], eps: float, layout: str) -> Tensor:
    """CRMSNorm through normbench's Triton kernel: y = γ·x/√((Σx² + (Σx)²)/(C + 1) + ε)."""
    return _forward(x, weight, None, CRMSNORM, eps, layout, False)


@torch.library.custom_op("normbench::scale_norm", mutates_args=())
def scale_norm(x: Tensor, g: Tensor, eps: float, layout: str) -> Tensor:
    """ScaleNorm through normbench's Triton kernel: y = g·x/max(‖x‖₂, ε), g a scalar."""
    return _forward(x, g, None, SCALENORM, eps, layout, True)


@layer_norm.register_fake
def _layer_norm_fake(x, weight, bias, eps, layout):
    return _forward_fake(x, layout)


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps, layout):
    return _forward_fake(x, layout)


@crms_norm.register_fake
def _crms_norm_fake(x, weight, eps, layout):
    return _forward_fake(x, layout)


@scale_norm.register_fake
def _scale_norm_fake(x, g, eps, layout):
    return _forward_fake(x, layout)


# --- the backward op ------------------------------------------------------------------------------------------------
@torch.library.custom_op("normbench::row_norm_backward", mutates_args=())
def row_norm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], mode: int,
                      eps: float, layout: str, scalar_weight: bool, need_dw: bool) -> list[Tensor]:
    """[dx, dγ (or dg) where there is a weight and need_dw, dβ where there is a bias and need_dw] of the row-wise
    norm ``mode`` at x, the statistics computed again from x."""
    weight = _tb._c(weight)
    xk, how = _rows(x, layout)
    ctx = _Ctx()
    ctx.saved_tensors = (xk, weight)
    ctx.cfg = (mode, float(eps), how, scalar_weight, None if bias is None else bias.dtype)
    ctx.needs_input_grad = (True, need_dw, need_dw, False)
    dx, dw, db, _ = _tb._row_backward(ctx, dy)
    out = [dx]
    if need_dw and weight is not None:
        out.append(dw)
    if need_dw and bias is not None:
        out.append(db)
    return out


@row_norm_backward.register_fake
def _row_norm_backward_fake(dy, x, weight, bias, mode, eps, layout, scalar_weight, need_dw):
    out = [_forward_fake(x, layout)]
    if need_dw and weight is not None:
        out.append(torch.empty_like(weight, memory_format=torch.contiguous_format))
    if need_dw and bias is not None:
        out.append(x.new_empty((x.shape[-1] if layout == "tokens" else x.shape[1],), dtype=bias.dtype))
    return out


def _autograd(op, mode: int, has_bias: bool, scalar_weight: bool = False) -> None:
    """``op``'s backward: ``row_norm_backward`` on the saved x and parameters. Inputs are (x, weight, [bias,] eps,
    layout)."""

    def setup_context(ctx, inputs, output):
        x, weight = inputs[0], inputs[1]
        bias = inputs[2] if has_bias else None
        ctx.save_for_backward(x, weight, bias)
        ctx.cfg = inputs[-2:]

    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        eps, layout = ctx.cfg
        need = ctx.needs_input_grad
        need_dw = bool(need[1] or (has_bias and need[2]))
        grads = iter(torch.ops.normbench.row_norm_backward(dy, x, weight, bias, mode, eps, layout, scalar_weight,
                                                           need_dw))
        dx = next(grads)
        dw = next(grads) if need_dw and weight is not None else None
        db = next(grads) if need_dw and bias is not None else None
        return (dx, dw, db, None, None) if has_bias else (dx, dw, None, None)

    op.register_autograd(backward, setup_context=setup_context)


_autograd(layer_norm, LAYERNORM, True)
_autograd(rms_norm, RMSNORM, False)
_autograd(crms_norm, CRMSNORM, False)
_autograd(scale_norm, SCALENORM, False, scalar_weight=True)


# --- residual + norm: (y, s = x + residual) ------------------------------------------------------------------------
def _add_forward(x, residual, weight, bias, mode: int, eps: float):
    y, s = _tb._AddRowNormFn.forward(_Ctx(), x, residual, _tb._c(weight), _tb._c(bias), (mode, float(eps)))
    return y, s


def _add_fake(x, residual):
    dt = torch.promote_types(x.dtype, residual.dtype)
    return (torch.empty_like(x, dtype=dt, memory_format=torch.contiguous_format),
            torch.empty_like(x, dtype=dt, memory_format=torch.contiguous_format))


@torch.library.custom_op("normbench::add_layer_norm", mutates_args=())
def add_layer_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                   eps: float) -> tuple[Tensor, Tensor]:
    """(LayerNorm(x + residual), x + residual) through normbench's fused Triton kernel."""
    return _add_forward(x, residual, weight, bias, LAYERNORM, eps)


@torch.library.custom_op("normbench::add_rms_norm", mutates_args=())
def add_rms_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    """(RMSNorm(x + residual), x + residual) through normbench's fused Triton kernel."""
    return _add_forward(x, residual, weight, None, RMSNORM, eps)


@add_layer_norm.register_fake
def _add_layer_norm_fake(x, residual, weight, bias, eps):
    return _add_fake(x, residual)


@add_rms_norm.register_fake
def _add_rms_norm_fake(x, residual, weight, eps):
    return _add_fake(x, residual)


@torch.library.custom_op("normbench::add_row_norm_backward", mutates_args=())
def add_row_norm_backward(dy: Tensor, ds: Optional[Tensor], s: Tensor, weight: Optional[Tensor],
                          bias: Optional[Tensor], mode: int, eps: float, need_dw: bool) -> list[Tensor]:
    """[d(x + residual) in s's dtype, dγ where there is a weight and need_dw, dβ where there is a bias and need_dw]
    of the residual norm ``mode`` at s = x + residual (its statistics computed again from s)."""
    weight = _tb._c(weight)
    _tb._mod("_rownorm")
    ctx = _Ctx()
    ctx.saved_tensors = (s, weight)
    ctx.cfg = (mode, float(eps), None if bias is None else bias.dtype, s.dtype, s.dtype)
    ctx.needs_input_grad = (True, True, need_dw, need_dw, False)
    dsum, _, dw, db, _ = _tb._add_row_backward(ctx, dy, ds)
    out = [dsum]
    if need_dw and weight is not None:
        out.append(dw)
    if need_dw and bias is not None:
        out.append(db)
    return out


@add_row_norm_backward.register_fake
def _add_row_norm_backward_fake(dy, ds, s, weight, bias, mode, eps, need_dw):
    out = [torch.empty_like(s, memory_format=torch.contiguous_format)]
    if need_dw and weight is not None:
        out.append(torch.empty_like(weight, memory_format=torch.contiguous_format))
    if need_dw and bias is not None:
        out.append(s.new_empty((s.shape[-1],), dtype=bias.dtype))
    return out


def _add_autograd(op, mode: int, has_bias: bool) -> None:
    """``op``'s backward: ``add_row_norm_backward`` on the saved sum s and parameters, the sum's gradient given to x
    and residual in their dtypes (as the backend's autograd function does). Inputs are (x, residual, weight,
    [bias,] eps)."""

    def setup_context(ctx, inputs, output):
        x, residual, weight = inputs[:3]
        bias = inputs[3] if has_bias else None
        ctx.save_for_backward(output[1], weight, bias)
        ctx.cfg = (inputs[-1], x.dtype, residual.dtype)

    def backward(ctx, dy, ds):
        s, weight, bias = ctx.saved_tensors
        eps, xdt, rdt = ctx.cfg
        need = ctx.needs_input_grad
        need_dw = bool(need[2] or (has_bias and need[3]))
        dw = db = None
        if dy is None:  # y unused: s's gradient is the sum's
            dsum = ds
        else:
            grads = iter(torch.ops.normbench.add_row_norm_backward(dy, ds, s, weight, bias, mode, eps, need_dw))
            dsum = next(grads)
            dw = next(grads) if need_dw and weight is not None else None
            db = next(grads) if need_dw and bias is not None else None
        dx = None if dsum is None else dsum.to(xdt)
        dr = None if dsum is None else dsum.to(rdt)
        return (dx, dr, dw, db, None) if has_bias else (dx, dr, dw, None)

    op.register_autograd(backward, setup_context=setup_context)


_add_autograd(add_layer_norm, LAYERNORM, True)
_add_autograd(add_rms_norm, RMSNORM, False)


# --- what a compiled region calls instead of a Triton backend's module ---------------------------------------------
def _traced_layernorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "LayerNorm")
    return torch.ops.normbench.layer_norm(x, _tb._param(m, "weight"), _tb._param(m, "bias"), float(e.eps), e.layout)


def _traced_rmsnorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "RMSNorm")
    return torch.ops.normbench.rms_norm(x, _tb._param(m, "weight"), float(e.eps), e.layout)


def _traced_crmsnorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "CRMSNorm")
    return torch.ops.normbench.crms_norm(x, _tb._param(m, "weight"), float(e.eps), e.layout)


def _traced_scalenorm(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "ScaleNorm")
    return torch.ops.normbench.scale_norm(x, _tb._param(m, "g"), float(e.eps), e.layout)


def _traced_add_layernorm(m, x, residual):
    _tb._check_pair(m, x, residual, "AddLayerNorm")
    return torch.ops.normbench.add_layer_norm(x, residual, _tb._param(m, "weight"), _tb._param(m, "bias"),
                                              float(m.eager.eps))


def _traced_add_rmsnorm(m, x, residual):
    _tb._check_pair(m, x, residual, "AddRMSNorm")
    return torch.ops.normbench.add_rms_norm(x, residual, _tb._param(m, "weight"), float(m.eager.eps))


#: Triton backend op (``TritonNorm.op``) -> what a compiled region calls instead of its module's forward.
TRACED = {"layernorm": _traced_layernorm, "rmsnorm": _traced_rmsnorm, "srmsnorm": _traced_rmsnorm,
          "crmsnorm": _traced_crmsnorm, "scalenorm": _traced_scalenorm,
          "add_layernorm": _traced_add_layernorm, "add_rmsnorm": _traced_add_rmsnorm}


class Traceable(nn.Module):
    """A Triton backend's module as a policy runs it: its own forward when called eagerly (the backend's lean direct
    path), its ``normbench`` op when Dynamo traces it (``torch.compiler.is_compiling()``: a constant True while
    tracing, so the graph holds the op and no branch). The backend's module is kept outside ``_modules`` (its
    parameters are the policy site's, ``state_dict`` keys stay the site's own)."""

    def __init__(self, module: nn.Module, traced):
        super().__init__()
        d = self.__dict__
        d["module"], d["direct"], d["traced"] = module, module.forward, traced
        self.training = module.training

    def forward(self, *args):
        if torch.compiler.is_compiling():
            return self.traced(self.module, *args)
        return self.direct(*args)

    def train(self, mode: bool = True):
        super().train(mode)
        self.module.train(mode)
        return self

    def extra_repr(self) -> str:
        return f"{self.module.op} -> torch.ops.normbench (compiled)"


def traceable(module: nn.Module) -> nn.Module:
    """``module`` wrapped in :class:`Traceable` when it is a Triton backend's module whose kernel has an op here;
    else ``module`` itself."""
    if isinstance(module, _tb.TritonNorm) and module.op in TRACED:
        return Traceable(module, TRACED[module.op])
    return module
