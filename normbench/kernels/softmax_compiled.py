"""The ``compile_three_pass`` and ``compile_two_pass`` backends of softmax and log-softmax: explicit formulations
compiled by ``torch.compile`` (the CPU check of the two-pass paper's claim; ``normbench.softmax`` has the claim).

Explicit formulations, as Inductor's C++ backend compiles them (torch 2.13; read its generated code with
``TORCH_LOGS=output_code``):

* ``compile_three_pass``: m = max x; e = exp(x − m) stored with Σe; y = e/Σe. Inductor emits the paper's "three-pass
  with reloading": a max loop, an exp-and-sum loop that writes e, and a loop that rescales e.
* ``compile_two_pass``: no max pass. Inductor cannot express the paper's (mantissa, exponent) pair as one reduction
  (written directly, it splits the dependent max-of-exponents and the rescaled sum into separate loops over the row),
  so this formulation keeps the paper's cost model, not its representation: pass 1 is one loop,
  S = Σ exp(x − a) with a = the row's first entry instead of its max; pass 2 writes y = exp(x − a)/S. Where the
  paper's extended exponent prevents overflow, this one detects it: a row whose S is 0, infinite or NaN (a spread
  above about 80 over its first entry, all −inf, +inf or NaN entries) is recomputed by the three-pass formulation,
  which gives the reference answer there (for softmax scores that rarely happens; it costs those rows three more
  passes).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from normbench.kernels._softmax_module import AlgorithmSoftmax

# --- explicit formulations (compiled per backend) -------------------------------------------------------------------

def _three_pass(x: torch.Tensor, log: bool) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    m = xf.amax(-1, keepdim=True)
    if log:
        return ((xf - m) - torch.log(torch.exp(xf - m).sum(-1, keepdim=True))).to(x.dtype)
    e = torch.exp(xf - m)
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def _two_pass_sum(x: torch.Tensor):
    xf = x.float()
    a = xf[..., :1]
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return a, torch.exp(xf - a).sum(-1, keepdim=True)


def _two_pass_out(x: torch.Tensor, a: torch.Tensor, s: torch.Tensor, log: bool) -> torch.Tensor:
    xf = x.float()
    if log:
        return ((xf - a) - torch.log(s)).to(x.dtype)
    return (torch.exp(xf - a) / s).to(x.dtype)


def _backward(y: torch.Tensor, dy: torch.Tensor, log: bool) -> torch.Tensor:
    yf, gf = y.float(), dy.float()
    if log:
        return (gf - torch.exp(yf) * gf.sum(-1, keepdim=True)).to(y.dtype)
    return (yf * (gf - (gf * yf).sum(-1, keepdim=True))).to(y.dtype)


@functools.lru_cache(maxsize=None)
def _compiled_fn(name: str):
    fn = {"three_pass": _three_pass, "2pass_sum": _two_pass_sum, "2pass_out": _two_pass_out, "bwd": _backward}[name]
    # fullgraph: a graph break raises instead of running part of the formulation eagerly.
    return torch.compile(fn, dynamic=False, fullgraph=True)


def _compiled(name: str, *args):
    """Run a compiled formulation; hitting Dynamo's recompile limit raises instead of silently running eager code
    (the record would then time eager under a compiled backend's name)."""
    import torch._dynamo

    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        return _compiled_fn(name)(*args)


def compiled_forward(x: torch.Tensor, algo: str, log: bool) -> torch.Tensor:
    """The compiled formulation ``algo`` (three_pass or two_pass) of softmax/log-softmax over the last axis.

    Rows are viewed as 2-D ``(-1, C)`` so inputs of any rank share one compiled graph per (rows, C, dtype).
    """
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    if algo == "three_pass":
        return _compiled("three_pass", x, log).view(shape)
    a, s = _compiled("2pass_sum", x)
    y = _compiled("2pass_out", x, a, s, log)
    bad = ~(torch.isfinite(s) & (s > 0)).squeeze(-1)
    if bool(bad.any()):  # overflow (or no finite maximum): these rows take the three-pass
        y[bad] = _three_pass(x[bad], log)
    return y.view(shape)


class _CompiledFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, algo, log):
        y = compiled_forward(x.contiguous(), algo, log)
        ctx.save_for_backward(y)
        ctx.log = log
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        shape = y.shape
        dx = _compiled("bwd", y.reshape(-1, shape[-1]), dy.contiguous().view(-1, shape[-1]), ctx.log)
        return dx.view(shape), None, None


class CompiledSoftmax(AlgorithmSoftmax):
    """Softmax or log-softmax over ``[..., C]`` by an explicit formulation compiled with ``torch.compile``."""

    def _run(self, x):
        return _CompiledFn.apply(x, self.algo, self.log)

    def row_passes(self, pass_: str) -> int:
        fwd = 3 if self.algo == "three_pass" else 2
        return {"fwd": fwd, "bwd": 2, "fwd+bwd": fwd + 2}[pass_]


def compile_unavailable() -> str | None:
    """``None`` when ``torch.compile`` exists here, else the reason."""
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0 or newer"
    return None


def build_compile_three_pass(eager: nn.Module, spec=None) -> nn.Module:
    """The ``compile_three_pass`` backend."""
    return CompiledSoftmax(eager, "three_pass")


def build_compile_two_pass(eager: nn.Module, spec=None) -> nn.Module:
    """The ``compile_two_pass`` backend."""
    return CompiledSoftmax(eager, "two_pass")
