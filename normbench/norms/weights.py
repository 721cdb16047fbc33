"""Weight reparameterizations wrapping a Linear or Conv2d: weight norm, weight standardization (plain and scaled),
spectral norm and σReparam.

Each wrapper keeps the wrapped layer as ``.layer`` (its ``weight`` is the raw parameter V or W, its ``bias`` is used as
is), computes the effective weight Ŵ in every forward, and runs the layer's own linear map or convolution with Ŵ.
"Per output unit" means per row of a Linear weight ``[out, in]`` or per filter of a Conv2d weight ``[out, in/groups, kh,
kw]``; the fan-in is the number of weights feeding one output unit. Ŵ is computed in at least float32 and cast back to
the layer's dtype, so bfloat16 layers keep accurate statistics.

The factories (``weight_norm`` and friends, the entry points of the NormSpecs) build ``Linear(C, C)`` for ``tokens`` or
``Conv2d(C, C, 3, padding=1)`` for ``images`` and wrap it; pass ``layer=`` to wrap an existing ``nn.Linear`` or
``nn.Conv2d`` instead (then ``num_features`` and ``layout`` are not used). If you re-initialise the wrapped weight after
wrapping (as a model's ``_init_weights`` pass would), call ``reset_from_layer()`` so that state derived from the weight
at wrap time (weight norm's g, the power-iteration vectors, σReparam's γ) follows it.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ._base import check_layout, upcast

_LAYERS = (nn.Linear, nn.Conv2d)


def _per_unit(p: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a ``[out]`` vector so it broadcasts over the output axis of a weight shaped like ``like``."""
    return p.view(-1, *([1] * (like.dim() - 1)))


def _make_layer(num_features: int, layout: str, layer: nn.Module | None) -> nn.Module:
    if layer is None:
        check_layout(layout)
        if layout == "tokens":
            return nn.Linear(num_features, num_features)
        return nn.Conv2d(num_features, num_features, 3, padding=1)
    if not isinstance(layer, _LAYERS):
        raise TypeError(f"weight reparameterizations wrap an nn.Linear or nn.Conv2d, got {type(layer).__name__}; "
                        "pass layer=None to build a Linear(C, C) (tokens) or Conv2d(C, C, 3, padding=1) (images)")
    return layer


class _Reparameterized(nn.Module):
    """Base: runs the wrapped Linear/Conv2d with the weight returned by ``effective_weight()``."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        if not isinstance(layer, _LAYERS):
            raise TypeError(f"{type(self).__name__} wraps an nn.Linear or nn.Conv2d, got {type(layer).__name__}")
        self.layer = layer

    @property
    def fan_in(self) -> int:
        return self.layer.weight[0].numel()

    def effective_weight(self) -> torch.Tensor:
        """Ŵ, in the layer's dtype, with gradients flowing to the raw parameters."""
        w = self.layer.weight
        return self._reparameterize(upcast(w)).to(w.dtype)

    def _reparameterize(self, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reset_from_layer(self) -> None:
        """Re-derive the state that depends on the wrapped weight (after it was re-initialised)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.effective_weight()
        if isinstance(self.layer, nn.Linear):
            return F.linear(x, w, self.layer.bias)
        return self.layer._conv_forward(x, w, self.layer.bias)

    def extra_repr(self) -> str:
        return f"fan_in={self.fan_in}"


class WeightNorm(_Reparameterized):
    """Salimans & Kingma 2016: w = g·v/‖v‖ per output unit, with v the wrapped weight and a learned g per unit.

    g is initialised to ‖v‖, so the wrapped layer computes the same function as before wrapping. (The paper's optional
    data-dependent initialisation of g and the bias from one batch is not applied.)
    """

    def __init__(self, layer: nn.Module, eps: float = 1e-12):
        super().__init__(layer)
        self.eps = eps
        self.g = nn.Parameter(torch.empty(layer.weight.shape[0], dtype=layer.weight.dtype,
                                          device=layer.weight.device))
        self.reset_from_layer()

    def _norm(self, v: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(v.flatten(1), dim=1).clamp_min(self.eps)

    def reset_from_layer(self) -> None:
        with torch.no_grad():
            v = self.layer.weight
            self.g.copy_(self._norm(upcast(v)))

    def _reparameterize(self, v: torch.Tensor) -> torch.Tensor:
        scale = self.g.to(v.dtype) / self._norm(v)
        return v * _per_unit(scale, v)


class WeightStandardization(_Reparameterized):
    """Qiao et al. 2019: Ŵ = (W − μ)/sqrt(σ² + ε) per output unit, μ and σ² (biased) over the unit's fan-in.

    Follows the paper's equation (ε inside the root, biased variance); the authors' code divides by the unbiased
    std + 1e-5 instead, which differs by O(1/fan_in).
    """

    def __init__(self, layer: nn.Module, eps: float = 1e-5):
        super().__init__(layer)
        self.eps = eps

    def _reparameterize(self, w: torch.Tensor) -> torch.Tensor:
        flat = w.flatten(1)
        mean = flat.mean(dim=1)
        var = flat.var(dim=1, unbiased=False)
        return (w - _per_unit(mean, w)) * _per_unit(torch.rsqrt(var + self.eps), w)


class ScaledWeightStandardization(_Reparameterized):
    """Brock et al. 2021 (NF-ResNets, NFNets): Ŵ = gain·(W − μ)/(σ·√N) per output unit, N = fan-in.

    μ and σ² (biased) over the unit's fan-in; the learned ``gain`` (one per output unit) is initialised to 1.
    As in the authors' code, the denominator is sqrt(max(N·σ², ε)) with ε = 1e-4. The activation gain γ of
    NF-ResNets belongs to the model's nonlinearity, not here; pair with ``adaptive_grad_clip`` as NFNets do.
    """

    def __init__(self, layer: nn.Module, eps: float = 1e-4, gain_init: float = 1.0):
        super().__init__(layer)
        self.eps = eps
        self.gain = nn.Parameter(torch.full((layer.weight.shape[0],), float(gain_init), dtype=layer.weight.dtype,
                                            device=layer.weight.device))

    def _reparameterize(self, w: torch.Tensor) -> torch.Tensor:
        flat = w.flatten(1)
        mean = flat.mean(dim=1)
        var = flat.var(dim=1, unbiased=False)
        scale = torch.rsqrt((var * self.fan_in).clamp_min(self.eps)) * self.gain.to(w.dtype)
        return (w - _per_unit(mean, w)) * _per_unit(scale, w)


class _PowerIterated(_Reparameterized):
    """Base for σ(W) estimated by power iteration on W viewed as a matrix ``[out, fan_in]``.

    Buffers ``u`` (left, ``[out]``) and ``v`` (right, ``[fan_in]``) hold the singular-vector estimates. In training
    each forward first runs one power iteration without gradient, v ← Wᵀu/‖Wᵀu‖, u ← Wv/‖Wv‖ (Miyato et al. 2018,
    Algorithm 1); in eval the stored vectors are used unchanged. Then σ = uᵀWv with u and v held constant, so the
    gradient flows through W only. u and v start at the exact top singular pair of the weight (an SVD at wrap time,
    as σReparam's reference code does), so σ is already right before the first training step.
    """

    def __init__(self, layer: nn.Module, eps: float = 1e-12):
        super().__init__(layer)
        self.eps = eps
        w = layer.weight
        self.register_buffer("u", torch.empty(w.shape[0], dtype=w.dtype, device=w.device))
        self.register_buffer("v", torch.empty(w[0].numel(), dtype=w.dtype, device=w.device))
        self._reset_vectors()

    def _reset_vectors(self) -> None:
        with torch.no_grad():
            w = self.layer.weight.flatten(1)
            u, _, vh = torch.linalg.svd(upcast(w), full_matrices=False)
            self.u.copy_(u[:, 0])
            self.v.copy_(vh[0])

    def reset_from_layer(self) -> None:
        self._reset_vectors()

    def sigma(self, w: torch.Tensor) -> torch.Tensor:
        """σ(W) for ``w`` (the raw weight in the compute dtype), running one power iteration first in training."""
        mat = w.flatten(1)
        u, v = self.u.to(w.dtype), self.v.to(w.dtype)
        if self.training:
            with torch.no_grad():
                v = F.normalize(mat.t() @ u, dim=0, eps=self.eps)
                u = F.normalize(mat @ v, dim=0, eps=self.eps)
                self.u.copy_(u)
                self.v.copy_(v)
        # clone: the graph must not save the buffers that the next training forward overwrites in place
        u, v = u.clone(), v.clone()
        return torch.dot(u, mat @ v).clamp_min(self.eps)


class SpectralNorm(_PowerIterated):
    """Miyato et al. 2018: Ŵ = W/σ(W), σ the largest singular value of W as a matrix ``[out, fan_in]``.

    σ comes from one power iteration per training forward (no iteration in eval), see ``_PowerIterated``.
    """

    def _reparameterize(self, w: torch.Tensor) -> torch.Tensor:
        return w / self.sigma(w)


class SigmaReparam(_PowerIterated):
    """Zhai et al. 2023: Ŵ = (γ/σ(W))·W with one learned scalar γ; σ(W) by power iteration as in SpectralNorm.

    γ starts at σ(W) of the wrapped weight (``gamma_init=None``), so Ŵ = W at init: this is what the authors'
    PyTorch reference (used for their vision, language-model and translation runs) does. ``gamma_init=1.0`` gives
    the other published choice (their JAX speech code), where Ŵ starts with spectral norm 1.
    """

    def __init__(self, layer: nn.Module, eps: float = 1e-12, gamma_init: float | None = None):
        super().__init__(layer, eps)
        self.gamma_init = gamma_init
        self.gamma = nn.Parameter(torch.ones((), dtype=layer.weight.dtype, device=layer.weight.device))
        self._reset_gamma()

    def _reset_gamma(self) -> None:
        with torch.no_grad():
            if self.gamma_init is None:
                w = self.layer.weight.flatten(1)
                w = upcast(w)
                self.gamma.copy_(torch.dot(self.u.to(w.dtype), w @ self.v.to(w.dtype)))
            else:
                self.gamma.fill_(float(self.gamma_init))

    def reset_from_layer(self) -> None:
        self._reset_vectors()
        self._reset_gamma()

    def _reparameterize(self, w: torch.Tensor) -> torch.Tensor:
        return w * (self.gamma.to(w.dtype) / self.sigma(w))


def weight_norm(num_features: int, layout: str = "tokens", layer: nn.Module | None = None,
                eps: float = 1e-12) -> WeightNorm:
    """Weight normalization (Salimans & Kingma 2016) of a new Linear/Conv2d over C features, or of ``layer``."""
    return WeightNorm(_make_layer(num_features, layout, layer), eps=eps)


def weight_std(num_features: int, layout: str = "tokens", layer: nn.Module | None = None,
               eps: float = 1e-5) -> WeightStandardization:
    """Weight standardization (Qiao et al. 2019) of a new Linear/Conv2d over C features, or of ``layer``."""
    return WeightStandardization(_make_layer(num_features, layout, layer), eps=eps)


def scaled_ws(num_features: int, layout: str = "tokens", layer: nn.Module | None = None,
              eps: float = 1e-4, gain_init: float = 1.0) -> ScaledWeightStandardization:
    """Scaled weight standardization (Brock et al. 2021) of a new Linear/Conv2d over C features, or of ``layer``."""
    return ScaledWeightStandardization(_make_layer(num_features, layout, layer), eps=eps, gain_init=gain_init)


def spectral_norm(num_features: int, layout: str = "tokens", layer: nn.Module | None = None,
                  eps: float = 1e-12) -> SpectralNorm:
    """Spectral normalization (Miyato et al. 2018) of a new Linear/Conv2d over C features, or of ``layer``."""
    return SpectralNorm(_make_layer(num_features, layout, layer), eps=eps)


def sigma_reparam(num_features: int, layout: str = "tokens", layer: nn.Module | None = None,
                  eps: float = 1e-12, gamma_init: float | None = None) -> SigmaReparam:
    """σReparam (Zhai et al. 2023) of a new Linear/Conv2d over C features, or of ``layer``."""
    return SigmaReparam(_make_layer(num_features, layout, layer), eps=eps, gamma_init=gamma_init)


def _unitwise_norm(t: torch.Tensor) -> torch.Tensor:
    """‖·‖₂ per output unit (over all axes but the first) for matrices and kernels; of the whole tensor for ≤1-D."""
    t = upcast(t)
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True)


@torch.no_grad()
def adaptive_grad_clip(parameters: torch.Tensor | Iterable[torch.Tensor], clipping: float = 0.01,
                       eps: float = 1e-3) -> None:
    """NFNets' unit-wise adaptive gradient clipping (Brock et al. 2021, arXiv 2102.06171), in place on ``.grad``.

    For each output unit i of each parameter W with gradient G:
    if ‖G_i‖/max(‖W_i‖, ε) > λ then G_i ← λ·max(‖W_i‖, ε)/‖G_i‖ · G_i, with λ = ``clipping`` and ε = ``eps``.
    Units are rows of a Linear weight / filters of a conv kernel (PyTorch puts the output axis first); biases,
    gains and scalars are treated as one unit. NFNets do not clip the final classifier layer: leave it out of
    ``parameters``.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    if clipping <= 0:
        raise ValueError(f"adaptive_grad_clip needs clipping > 0, got {clipping}")
    for p in parameters:
        if p.grad is None:
            continue
        g = p.grad
        max_norm = _unitwise_norm(p.detach()).clamp_min(eps) * clipping
        grad_norm = _unitwise_norm(g)
        # the 1e-6 floor only avoids 0/0; where it matters the unit is not clipped anyway
        clipped = g.to(grad_norm.dtype) * (max_norm / grad_norm.clamp_min(1e-6))
        g.copy_(torch.where(grad_norm > max_norm, clipped, g.to(grad_norm.dtype)).to(g.dtype))


__all__ = [
    "WeightNorm", "WeightStandardization", "ScaledWeightStandardization", "SpectralNorm", "SigmaReparam",
    "weight_norm", "weight_std", "scaled_ws", "spectral_norm", "sigma_reparam", "adaptive_grad_clip",
]
