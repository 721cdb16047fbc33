"""normbench's Triton norm kernels as ``torch.library`` ops (namespace ``normbench``), so that compiled regions
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
* ``normbench::dyt``, ``derf``: the point-wise kernels; their backward ``normbench::pointwise_backward``.
* ``normbench::group_norm``: (y, mean, rstd), the float32 [N·G] statistics the kernel stores for its backward
  (non-differentiable outputs); its backward ``normbench::group_norm_backward`` reads them.

The real implementations are the backend's own launch path (``triton_backend``'s autograd functions' forward and
backward bodies, given a plain context object instead of autograd's): same plans, same kernels.

:func:`traceable` wraps a Triton backend's module for a policy (:mod:`normbench.policy.dispatch`): called eagerly it
runs the module's own forward (the lean direct path, no dispatcher), traced by Dynamo it calls the op. The ops are
registered when this module is imported (``normbench.policy`` imports it).

Every Triton backend of a norm a policy can drive has its op here (the row-wise, residual, point-wise and group
kernels); the softmax kernels are no norm a policy drives.
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


def _wanted(first, dw, db, need_dw, weight, bias) -> list:
    """A backward op's outputs: the input's gradient, then the weight's and the bias's where asked for and present
    (the fake implementations list the same, by shape)."""
    return [first] + ([dw] if need_dw and weight is not None else []) + ([db] if need_dw and bias is not None else [])


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
    return _wanted(dx, dw, db, need_dw, weight, bias)


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
    return _wanted(dsum, dw, db, need_dw, weight, bias)


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


# --- point-wise: DyT, Derf ----------------------------------------------------------------------------------------
DYT, DERF = 0, 1


def _pw_view(x: Tensor, layout: str):
    """(the kernel's view of x, how), as ``_PointwiseFn.forward`` takes it: tokens as rows; a channels-last image as
    its free NHWC view; any other image contiguous."""
    if layout == "tokens":
        return x.contiguous(), "tokens"
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return x.permute(0, 2, 3, 1), "nhwc"
    return x.contiguous(), "images"


def _pw_forward(x, alpha, shift, weight, bias, kind: int, layout: str) -> Tensor:
    return _tb._PointwiseFn.forward(_Ctx(), x, alpha, shift, _tb._c(weight), _tb._c(bias), (kind, layout))


def _pw_fake(x, layout: str) -> Tensor:
    xk, how = _pw_view(x, layout)
    return _tb._back(torch.empty_like(xk), how)


@torch.library.custom_op("normbench::dyt", mutates_args=())
def dyt(x: Tensor, alpha: Tensor, weight: Tensor, bias: Tensor, layout: str) -> Tensor:
    """DyT through normbench's Triton kernel: y = γ·tanh(α·x) + β."""
    return _pw_forward(x, alpha, None, weight, bias, DYT, layout)


@torch.library.custom_op("normbench::derf", mutates_args=())
def derf(x: Tensor, alpha: Tensor, shift: Tensor, weight: Tensor, bias: Tensor, layout: str) -> Tensor:
    """Derf through normbench's Triton kernel: y = γ·erf(α·x + s) + β."""
    return _pw_forward(x, alpha, shift, weight, bias, DERF, layout)


@dyt.register_fake
def _dyt_fake(x, alpha, weight, bias, layout):
    return _pw_fake(x, layout)


@derf.register_fake
def _derf_fake(x, alpha, shift, weight, bias, layout):
    return _pw_fake(x, layout)


@torch.library.custom_op("normbench::pointwise_backward", mutates_args=())
def pointwise_backward(dy: Tensor, x: Tensor, alpha: Tensor, shift: Optional[Tensor], weight: Tensor, bias: Tensor,
                       layout: str) -> list[Tensor]:
    """[dx, dα, (ds: Derf, where ``shift`` is given), dγ, dβ] of DyT (no shift) or Derf at x, each parameter's
    gradient in its dtype."""
    xk, how = _pw_view(x, layout)
    weight = _tb._c(weight)
    ctx = _Ctx()
    ctx.saved_tensors = (xk, alpha, weight) if shift is None else (xk, alpha, weight, shift)
    ctx.cfg = (DYT if shift is None else DERF, how, bias.dtype)
    dx, da, ds, dw, db, _ = _tb._pointwise_backward(ctx, dy)
    return [dx, da, dw, db] if shift is None else [dx, da, ds, dw, db]


@pointwise_backward.register_fake
def _pointwise_backward_fake(dy, x, alpha, shift, weight, bias, layout):
    C = x.shape[-1] if layout == "tokens" else x.shape[1]
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format)
    db = x.new_empty((C,), dtype=bias.dtype)
    if shift is None:
        return [_pw_fake(x, layout), torch.empty_like(alpha), dw, db]
    return [_pw_fake(x, layout), torch.empty_like(alpha), torch.empty_like(shift), dw, db]


def _pw_autograd(op, has_shift: bool) -> None:
    """``op``'s backward: ``pointwise_backward`` on the saved x and parameters. Inputs are (x, alpha, [shift,] weight,
    bias, layout)."""

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:-1])
        ctx.cfg = inputs[-1]

    def backward(ctx, dy):
        saved = ctx.saved_tensors
        x, alpha = saved[:2]
        shift = saved[2] if has_shift else None
        weight, bias = saved[-2:]
        grads = torch.ops.normbench.pointwise_backward(dy, x, alpha, shift, weight, bias, ctx.cfg)
        return (*grads, None)

    op.register_autograd(backward, setup_context=setup_context)


_pw_autograd(dyt, False)
_pw_autograd(derf, True)


# --- GroupNorm: y and the statistics its backward reads --------------------------------------------------------------
@torch.library.custom_op("normbench::group_norm", mutates_args=())
def group_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], num_groups: int,
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd): GroupNorm over images [N, C, *] through normbench's Triton kernel, and the float32 [N·G]
    statistics its backward reads (the kernel stores them; nothing is computed again)."""
    ctx = _Ctx()
    ctx.needs_input_grad = (True, True, True, False, False)   # store the statistics
    y = _tb._GroupNormFn.forward(ctx, x, _tb._c(weight), _tb._c(bias), num_groups, eps)
    _, _, mean, rstd = ctx.saved_tensors
    return y, mean, rstd


@group_norm.register_fake
def _group_norm_fake(x, weight, bias, num_groups, eps):
    stats = x.new_empty((x.shape[0] * num_groups,), dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stats, torch.empty_like(stats)


@torch.library.custom_op("normbench::group_norm_backward", mutates_args=())
def group_norm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], mean: Tensor,
                        rstd: Tensor, num_groups: int, need_dw: bool) -> list[Tensor]:
    """[dx, dγ where there is a weight and need_dw, dβ where there is a bias and need_dw], each parameter's gradient
    in its dtype."""
    weight = _tb._c(weight)
    ctx = _Ctx()
    ctx.saved_tensors = (x.contiguous(), weight, mean, rstd)
    ctx.cfg = (num_groups, None if bias is None else bias.dtype)
    ctx.needs_input_grad = (True, need_dw, need_dw, False, False)
    dx, dw, db, _, _ = _tb._GroupNormFn.backward(ctx, dy)
    return _wanted(dx, dw, db, need_dw, weight, bias)


@group_norm_backward.register_fake
def _group_norm_backward_fake(dy, x, weight, bias, mean, rstd, num_groups, need_dw):
    out = [torch.empty_like(x, memory_format=torch.contiguous_format)]
    if need_dw and weight is not None:
        out.append(x.new_empty((x.shape[1],), dtype=weight.dtype))
    if need_dw and bias is not None:
        out.append(x.new_empty((x.shape[1],), dtype=bias.dtype))
    return out


def _gn_setup(ctx, inputs, output):
    x, weight, bias, num_groups, _eps = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.cfg = num_groups


def _gn_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    need_dw = bool(need[1] or need[2])
    grads = iter(torch.ops.normbench.group_norm_backward(dy, x, weight, bias, mean, rstd, ctx.cfg, need_dw))
    dx = next(grads)
    dw = next(grads) if need_dw and weight is not None else None
    db = next(grads) if need_dw and bias is not None else None
    return dx, dw, db, None, None


group_norm.register_autograd(_gn_backward, setup_context=_gn_setup)


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


def _traced_dyt(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "DyT")
    p = m._parameters
    return torch.ops.normbench.dyt(x, p["alpha"], p["weight"], p["bias"], e.layout)


def _traced_derf(m, x):
    e = m.eager
    check_input(x, e.num_features, e.layout, "Derf")
    p = _tb._param
    return torch.ops.normbench.derf(x, p(m, "alpha"), p(m, "shift"), p(m, "weight"), p(m, "bias"), e.layout)


def _traced_groupnorm(m, x):
    e = m.eager
    check_input(x, e.num_features, "images", "GroupNorm")
    G = e.num_groups
    if (e.num_features // G) * x.shape[2] * x.shape[3] < 2:
        raise ValueError(f"GroupNorm with {G} groups needs more than one value per group, got input "
                         f"{tuple(x.shape)}; use fewer groups or a larger spatial size")
    return torch.ops.normbench.group_norm(x, _tb._param(m, "weight"), _tb._param(m, "bias"), int(G),
                                          float(e.eps))[0]


#: Triton backend op (``TritonNorm.op``) -> what a compiled region calls instead of its module's forward.
TRACED = {"layernorm": _traced_layernorm, "rmsnorm": _traced_rmsnorm, "srmsnorm": _traced_rmsnorm,
          "crmsnorm": _traced_crmsnorm, "scalenorm": _traced_scalenorm,
          "add_layernorm": _traced_add_layernorm, "add_rmsnorm": _traced_add_rmsnorm, "dyt": _traced_dyt,
          "derf": _traced_derf, "groupnorm": _traced_groupnorm}


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
