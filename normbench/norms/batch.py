"""Norms with statistics over the batch: BatchNorm, Ghost BatchNorm, PowerNorm, Unified Normalization,
Online Normalization and Batch-Channel Normalization.

Layouts: ``tokens`` ``[N, ..., C]`` takes statistics per channel over every token of the batch; ``images``
``[N, C, H, W]`` over (N, H, W). Internally both are viewed as ``[N, C, S]`` (S = tokens per sample, or H·W).
Statistics are computed in float32 (float64 for float64 inputs); outputs have the input dtype. Running buffers
are always updated in place, so wrappers that share them (the ``compile`` backend) see every update.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._base import check_input, check_layout
from .groups import check_num_groups, compute_dtype


def to_ncs(x: torch.Tensor, layout: str) -> torch.Tensor:
    """View ``x`` as ``[N, C, S]``: images ``[N, C, H·W]``; tokens ``[N, ..., C]`` → ``[N, C, tokens per sample]``."""
    if layout == "images":
        return x.reshape(x.shape[0], x.shape[1], -1)
    if x.dim() == 1:
        return x.reshape(1, -1, 1)
    return x.reshape(x.shape[0], -1, x.shape[-1]).transpose(1, 2)


def from_ncs(y: torch.Tensor, shape: torch.Size, layout: str) -> torch.Tensor:
    if layout == "images" or len(shape) == 1:
        return y.reshape(shape)
    return y.transpose(1, 2).reshape(shape)


def _c(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A ``[C]`` tensor as ``[1, C, 1]`` in ``dtype``, to broadcast over ``[N, C, S]``."""
    return t.to(dtype).view(1, -1, 1)


def _need_two_values(name: str, x: torch.Tensor, num_features: int) -> None:
    if x.numel() // num_features < 2:
        raise ValueError(f"{name} needs more than one value per channel in training mode, got input "
                         f"{tuple(x.shape)}; use a larger batch (or more tokens/pixels per sample), or eval mode")


class _BatchStatNorm(nn.Module):
    """Base: per-channel γ (init 1), β (init 0), layout handling."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def _finish(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = z * _c(self.weight, z.dtype) + _c(self.bias, z.dtype)
        return from_ncs(y, x.shape, self.layout).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}, eps={self.eps}"


# ----------------------------------------------------------------------------------------------------------------
# BatchNorm and Ghost BatchNorm


class BatchNorm(_BatchStatNorm):
    """Ioffe & Szegedy 2015: y = γ·(x − μ_B)/√(σ_B² + ε) + β per channel.

    Training: μ_B, σ_B² (biased) over (N, H, W) for images, over every token of the batch for tokens; running
    statistics r ← (1 − m)·r + m·stat with m = 0.1, the running variance unbiased (σ_B²·n/(n−1)), as in torch.
    ``momentum=None`` gives the cumulative average. Eval: the running statistics.
    Batch size 1 works whenever a channel has more than one value (tokens: T > 1; images: H·W > 1); a single value
    per channel in training raises ``ValueError``, as torch does.
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5, momentum: float | None = 0.1):
        super().__init__(num_features, layout, eps)
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def _bn(self, xs: torch.Tensor, training: bool) -> torch.Tensor:
        """Plain BN (no affine) of ``xs`` ``[N, C, S]``, updating the running statistics in training."""
        rm, rv = self.running_mean, self.running_var
        # torch's kernel updates the running buffers in place but wants them in the compute dtype.
        if rm.dtype != xs.dtype:
            rm, rv = rm.to(xs.dtype), rv.to(xs.dtype)
        momentum = 0.0
        if training:
            self.num_batches_tracked.add_(1)
            momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        z = F.batch_norm(xs, rm, rv, None, None, training, momentum, self.eps)
        if training and rm is not self.running_mean:
            with torch.no_grad():
                self.running_mean.copy_(rm)
                self.running_var.copy_(rv)
        return z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, type(self).__name__)
        if self.training:
            _need_two_values(type(self).__name__, x, self.num_features)
        xs = to_ncs(x.to(compute_dtype(x)), self.layout)
        return self._finish(self._bn(xs, self.training), x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", momentum={self.momentum}"


class GhostBatchNorm(BatchNorm):
    """Hoffer et al. 2017: BatchNorm whose training statistics come from virtual ("ghost") batches.

    The batch is split along its leading dimension into chunks of ``virtual_batch_size`` samples (default 16;
    the last chunk is smaller when the batch size is not a multiple). Each chunk is normalised with its own
    statistics (tokens: over every token of the chunk's samples; images: over the chunk's (N, H, W)), and the
    running statistics are updated once per chunk, in order, with momentum 0.1 — the paper's exponentially
    weighted sum over ghost batches. The running variance is unbiased like torch's BN (the paper's Algorithm 1
    averages the standard deviation instead), so checkpoints interchange with ``BatchNorm``. Eval uses the
    running statistics. A trailing chunk holding a single value per channel is merged into the previous chunk;
    a whole batch with a single value per channel raises ``ValueError`` as in ``BatchNorm``.
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5, momentum: float | None = 0.1,
                 virtual_batch_size: int = 16):
        super().__init__(num_features, layout, eps, momentum)
        if int(virtual_batch_size) < 1:
            raise ValueError(f"virtual_batch_size must be >= 1, got {virtual_batch_size}")
        self.virtual_batch_size = int(virtual_batch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "GhostBatchNorm")
        xs = to_ncs(x.to(compute_dtype(x)), self.layout)
        if not self.training:
            return self._finish(self._bn(xs, False), x)
        _need_two_values("GhostBatchNorm", x, self.num_features)
        chunks = list(torch.split(xs, self.virtual_batch_size, dim=0))
        if len(chunks) > 1 and chunks[-1].numel() // self.num_features < 2:
            chunks[-2:] = [torch.cat(chunks[-2:], dim=0)]
        z = torch.cat([self._bn(c, True) for c in chunks], dim=0)
        return self._finish(z, x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", virtual_batch_size={self.virtual_batch_size}"


# ----------------------------------------------------------------------------------------------------------------
# PowerNorm


class _PowerNormFunction(torch.autograd.Function):
    """z = x/s with a constant s, and PowerNorm's approximate backward (Shen et al. 2020, Algorithm 1).

    Backward, with g = ∂L/∂z and ν the per-channel buffer ``nu`` (ν_{t−1} on entry):
        x̃' = g − ν_{t−1}·z;   ∂L/∂x = x̃'/s
        ν_t = ν_{t−1}·(1 − (1 − α)·Γ) + (1 − α)·Λ,   Γ = mean(z²), Λ = mean(g·z) per channel over the batch.
    """

    @staticmethod
    def forward(ctx, xs, scale, nu, alpha):
        z = xs / scale
        ctx.save_for_backward(z, scale)
        ctx.nu, ctx.alpha = nu, alpha
        return z

    @staticmethod
    def backward(ctx, g):
        z, scale = ctx.saved_tensors
        g = g.to(z.dtype)
        nu = _c(ctx.nu, z.dtype)
        gamma_stat = (z * z).mean(dim=(0, 2), keepdim=True)
        lam = (g * z).mean(dim=(0, 2), keepdim=True)
        gx = (g - nu * z) / scale
        with torch.no_grad():
            ctx.nu.copy_((nu * (1 - (1 - ctx.alpha) * gamma_stat) + (1 - ctx.alpha) * lam).view(-1))
        return gx, None, None, None


# The custom backward writes running statistics; compiled graphs do not reliably replay such side effects, so
# the compile backend runs these three functions eagerly (a graph break) and compiles the rest.
@torch.compiler.disable
def _power_norm(xs, scale, nu, alpha):
    return _PowerNormFunction.apply(xs, scale, nu, alpha)


@torch.compiler.disable
def _unified_norm(xs, scale, module, t, skip):
    return _UnifiedNormFunction.apply(xs, scale, module, t, skip)


@torch.compiler.disable
def _online_norm(xs, module):
    return _OnlineNormFunction.apply(xs, module)


class PowerNorm(_BatchStatNorm):
    """Shen et al. 2020: y = γ·x/ψ_{t−1} + β, no centring, with the approximate backward of Algorithm 1.

    Training step t (Algorithm 1): ψ_B² = mean of x² per channel over the batch (all tokens, or N·H·W);
    the output uses the running ψ_{t−1} = √(ψ²_{t−1} + ε) from the previous step, then
    ψ²_t = α_f·ψ²_{t−1} + (1 − α_f)·ψ_B². The backward treats ψ_{t−1} as a constant and corrects the gradient
    with the running statistic ν (see ``_PowerNormFunction``), updated with α_b each backward.
    Eval: y = γ·x/√(ψ² + ε) + β. Defaults follow the authors' code: α_f = α_b = 0.9, ε = 1e-5, ψ² starts at 1,
    ν at 0.

    First steps: Algorithm 1 leaves ψ_0 undefined. As in the authors' code (fairseq ``MaskPowerNorm``), for the
    first ``warmup_iters`` steps (default 1) the layer normalises by the current batch's ψ_B (same approximate
    backward, with s = ψ_B), and ψ² is updated as that code does: on steps t < ``warmup_iters`` it first becomes
    the running mean ψ² ← ψ²·(t−1)/t + ψ_B²/t, and on every step (warm-up included) the average above follows.
    Their default is 10000 steps; their training recipes pass the learning-rate warm-up, and so do ours
    (``train.recipes.NORM_KWARGS_FROM_RECIPE``). ``warmup_iters=0`` gives Algorithm 1 from step 1 with ψ_0² = 1.
    The authors' code also divides the gradient by the current batch's ψ_B after warm-up while the forward used
    ψ_{t−1}; here both use ψ_{t−1}, as Algorithm 1 states. Their optional group pre-scaling (not in the paper) is
    left out. Works at batch size 1 (no centring: a single value per channel is fine).
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5, alpha_fwd: float = 0.9,
                 alpha_bkw: float = 0.9, warmup_iters: int = 1):
        super().__init__(num_features, layout, eps)
        self.alpha_fwd, self.alpha_bkw, self.warmup_iters = alpha_fwd, alpha_bkw, int(warmup_iters)
        self.register_buffer("running_phi", torch.ones(num_features))  # ψ²
        self.register_buffer("running_nu", torch.zeros(num_features))  # ν of the approximate backward
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "PowerNorm")
        xs = to_ncs(x.to(compute_dtype(x)), self.layout)
        if not self.training:
            return self._finish(xs / (_c(self.running_phi, xs.dtype) + self.eps).sqrt(), x)
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            t = int(self.num_batches_tracked)
            psi2_b = xs.pow(2).mean(dim=(0, 2))
            phi = self.running_phi.to(xs.dtype, copy=True)  # a copy: ψ_{t−1} must survive the update below
            used = psi2_b if t <= self.warmup_iters else phi
            running = phi + (psi2_b - phi) / t if t < self.warmup_iters else phi  # the warm-up's running mean
            self.running_phi.copy_(self.alpha_fwd * running + (1 - self.alpha_fwd) * psi2_b)
            scale = (_c(used, xs.dtype) + self.eps).sqrt()
        z = _power_norm(xs, scale, self.running_nu, self.alpha_bkw)
        return self._finish(z, x)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", alpha_fwd={self.alpha_fwd}, alpha_bkw={self.alpha_bkw}, "
                f"warmup_iters={self.warmup_iters}")


# ----------------------------------------------------------------------------------------------------------------
# Unified Normalization


class _UnifiedNormFunction(torch.autograd.Function):
    """z = x/s with Unified Normalization's smoothed gradient statistic (Yang et al. 2022).

    With g = ∂L/∂z and g_σ = mean(g·z) per channel: ∂L/∂x = (g − ψ·z)/s where ψ is the exponential average
    ψ_t = α·ψ_{t−1} + (1 − α)·mean(last M values of g_σ) (just g_σ before the window fills or during warm-up);
    on a step flagged as an outlier ψ = g_σ, the exact gradient of x/√(mean(x²) + ε).
    """

    @staticmethod
    def forward(ctx, xs, scale, module, t, skip):
        z = xs / scale
        ctx.save_for_backward(z, scale)
        ctx.module, ctx.t, ctx.skip = module, t, skip
        return z

    @staticmethod
    def backward(ctx, g):
        z, scale = ctx.saved_tensors
        m, t, skip = ctx.module, ctx.t, ctx.skip
        g = g.to(z.dtype)
        win = m.window_size
        with torch.no_grad():
            g_sigma = (g * z).mean(dim=(0, 2))
            ema_prev = m.ema_gz.to(z.dtype)
            m.window_gz[t % win].copy_(ema_prev if skip else g_sigma)
            if skip or t <= win or t < m.warmup_iters:
                mean_g = g_sigma
            else:
                mean_g = m.window_gz.to(z.dtype).mean(dim=0)
            ema = m.momentum * ema_prev + (1 - m.momentum) * mean_g
            m.ema_gz.copy_(ema)
            psi = mean_g if skip else ema
        return (g - _c(psi, z.dtype) * z) / scale, None, None, None, None


class UnifiedNorm(_BatchStatNorm):
    """Yang et al. 2022 (Unified Normalization, UN): y = γ·x/√(σ̂_t² + ε) + β, no centring (μ̂ = 0).

    σ_t² = mean of x² per channel over the batch (all tokens, or N·H·W). Fluctuation smoothing: σ̂_t² is the
    geometric mean of the last M = ``window_size`` batch statistics (σ_t², ..., σ_{t−M+1}²); before the window is
    full and during the first ``warmup_iters`` steps, σ̂_t² = σ_t². The gradient statistic is smoothed likewise
    (see ``_UnifiedNormFunction``). Adaptive outlier filtration (``outlier_filtration``): with Ω_t the window
    including σ_t², if for any channel AM(Ω_t) − GM(Ω_t) > M·V, where V is the (unbiased) variance of √Ω over the
    previous window (all channels), the step is an outlier: it normalises by σ_t², uses the exact gradient, and
    the window keeps the running variance instead of σ_t² (``num_outliers`` counts these steps).
    Running statistic for inference: r ← α·r + (1 − α)·σ̂_t² (α = ``momentum`` = 0.9); eval y = γ·x/√(r + ε) + β,
    a fixed affine map that folds into the next linear layer.

    Defaults follow the authors' code (hikvision-research/Unified-Normalization): M = 4, warm-up 4000 steps,
    α = 0.9, ε = 1e-5. Outlier filtration defaults to on here (the paper's full method; the authors' code defaults
    it off and suggests off for NLP, on for vision). Differences from that code: its "gradient compensation"
    (rescaling ∂L/∂x and ∂L/∂γ by a clamped √(σ̂²+ε)/√(r+ε) after 1000 steps, described in the code only) is left
    out, so ∂L/∂γ is the gradient of this forward; outlier checks start only once the window holds M earlier
    statistics (with a warm-up shorter than M the code would compare against a partly zero-filled window).
    Works at batch size 1 (no centring: a single value per channel is fine).
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5, momentum: float = 0.9,
                 window_size: int = 4, warmup_iters: int = 4000, outlier_filtration: bool = True):
        super().__init__(num_features, layout, eps)
        if int(window_size) < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size}")
        self.momentum, self.window_size, self.warmup_iters = momentum, int(window_size), int(warmup_iters)
        self.outlier_filtration = bool(outlier_filtration)
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("ema_gz", torch.zeros(num_features))
        self.register_buffer("window_x2", torch.zeros(self.window_size, num_features))
        self.register_buffer("window_gz", torch.zeros(self.window_size, num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.register_buffer("num_outliers", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "UnifiedNorm")
        xs = to_ncs(x.to(compute_dtype(x)), self.layout)
        if not self.training:
            return self._finish(xs / (_c(self.running_var, xs.dtype) + self.eps).sqrt(), x)
        win = self.window_size
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            t = int(self.num_batches_tracked)
            x2 = xs.pow(2).mean(dim=(0, 2))
            full_before = win > 1 and t > win  # the window holds M statistics from earlier steps
            if full_before:
                recorded_var = self.window_x2.to(xs.dtype).sqrt().var()
            self.window_x2[t % win].copy_(x2)
            skip = win == 1
            window = self.window_x2.to(xs.dtype)
            if self.outlier_filtration and full_before and t >= self.warmup_iters:
                am, gm = window.mean(dim=0), window.log().mean(dim=0).exp()
                if bool((am - gm > win * recorded_var).any()):
                    self.window_x2[t % win].copy_(self.running_var)
                    self.num_outliers.add_(1)
                    skip = True
            if not skip and t > win and t >= self.warmup_iters:
                var = self.window_x2.to(xs.dtype).log().mean(dim=0).exp()
            else:
                var = x2
            self.running_var.copy_(self.momentum * self.running_var.to(xs.dtype) + (1 - self.momentum) * var)
            scale = (_c(var, xs.dtype) + self.eps).sqrt()
        z = _unified_norm(xs, scale, self, t, skip)
        return self._finish(z, x)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", momentum={self.momentum}, window_size={self.window_size}, "
                f"warmup_iters={self.warmup_iters}, outlier_filtration={self.outlier_filtration}")


# ----------------------------------------------------------------------------------------------------------------
# Online Normalization


class _OnlineNormFunction(torch.autograd.Function):
    """Online Normalization's forward statistics and control-process backward (Chiley et al. 2019).

    ``xs`` is ``[N, C, S]``; samples are processed in order n = 0..N−1, each with its per-channel mean m_n and
    biased variance v_n over its S positions:
        forward   z_n = (x_n − μ)/√(σ² + ε);  then σ² ← α_f·σ² + (1 − α_f)·v_n + α_f(1 − α_f)(m_n − μ)²,
                  μ ← μ + (1 − α_f)(m_n − μ)
        backward  g̃_n = g_n − (1 − α_b)·v·z_n;  v ← v + mean_S(g̃_n·z_n);  h_n = g̃_n/√(σ² + ε)
                  ∂L/∂x_n = h_n − (1 − α_b)·u;  u ← u + mean_S(∂L/∂x_n)
    (u, v: the decaying error accumulators, persistent across steps).
    """

    @staticmethod
    def forward(ctx, xs, module):
        dt = xs.dtype
        a = module.alpha_fwd
        means, vars_ = xs.mean(dim=2), xs.var(dim=2, unbiased=False)
        mu, var = module.running_mean.to(dt).clone(), module.running_var.to(dt).clone()
        centers, prev_vars = [], []
        for n in range(xs.shape[0]):
            centers.append(mu)
            prev_vars.append(var)
            d = means[n] - mu
            var = a * var + (1 - a) * vars_[n] + a * (1 - a) * d * d
            mu = mu + (1 - a) * d
        scale = (torch.stack(prev_vars) + module.eps).sqrt().unsqueeze(2)
        z = (xs - torch.stack(centers).unsqueeze(2)) / scale
        module.running_mean.copy_(mu)
        module.running_var.copy_(var)
        ctx.save_for_backward(z, scale)
        ctx.module = module
        return z

    @staticmethod
    def backward(ctx, g):
        z, scale = ctx.saved_tensors
        m = ctx.module
        g = g.to(z.dtype)
        c = 1 - m.alpha_bkw
        with torch.no_grad():
            # mean_S(g̃_n·z_n) = A_n − c·v·B_n, so v follows a per-channel recurrence on [C] vectors.
            a_stat, b_stat = (g * z).mean(dim=2), (z * z).mean(dim=2)
            v = m.v.to(z.dtype).clone()
            v_used = []
            for n in range(z.shape[0]):
                v_used.append(v)
                v = v + a_stat[n] - c * v * b_stat[n]
            h = (g - c * torch.stack(v_used).unsqueeze(2) * z) / scale
            h_mean = h.mean(dim=2)
            u = m.u.to(z.dtype).clone()
            u_used = []
            for n in range(z.shape[0]):
                u_used.append(u)
                u = m.alpha_bkw * u + h_mean[n]  # u + mean_S(h_n − c·u)
            gx = h - c * torch.stack(u_used).unsqueeze(2)
            m.v.copy_(v)
            m.u.copy_(u)
        return gx, None


class OnlineNorm(_BatchStatNorm):
    """Chiley et al. 2019 (Online Normalization): y = ECM(γ·(x − μ_{t−1})/√(σ²_{t−1} + ε) + β).

    Per-channel running mean μ and variance σ² are updated sample by sample inside the forward (decay α_f), and
    the backward removes the gradient components along the statistics with decaying error accumulators u, v
    (decay α_b); see ``_OnlineNormFunction``. A sample is one index of the leading dimension: for images its
    statistics are over (H, W); for tokens ``[N, ..., C]`` over its tokens (one token for ``[N, C]``).
    Eval: y = ECM(γ·(x − μ)/√(σ² + ε) + β) with the final running statistics.
    ECM is the paper's error-compensation mechanism: ``"ac"`` activation clamping to ±``clamp_value``
    (default, as in the authors' PyTorch code, 5), ``"ls"`` layer scaling (divide each sample by the root mean
    square of its output over all channels and positions), or ``None``.
    Defaults from the authors' code: α_f = 0.999, α_b = 0.99, ε = 1e-5, μ = 0, σ² = 1, u = v = 0.
    Works at batch size 1 by design. Within a training batch, sample n depends on samples 0..n−1 and on earlier
    batches, but sample 0 only on earlier batches. The per-sample recurrences run as Python loops over [C]-sized
    vectors (the authors use a CUDA kernel), so this eager version is slow for large batches.
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5, alpha_fwd: float = 0.999,
                 alpha_bkw: float = 0.99, ecm: str | None = "ac", clamp_value: float = 5.0, ls_eps: float = 1e-5):
        super().__init__(num_features, layout, eps)
        if ecm not in ("ac", "ls", None):
            raise ValueError(f"ecm must be 'ac' (activation clamping), 'ls' (layer scaling) or None, got {ecm!r}")
        self.alpha_fwd, self.alpha_bkw = alpha_fwd, alpha_bkw
        self.ecm, self.clamp_value, self.ls_eps = ecm, clamp_value, ls_eps
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("u", torch.zeros(num_features))
        self.register_buffer("v", torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "OnlineNorm")
        xs = to_ncs(x.to(compute_dtype(x)), self.layout)
        if self.training:
            z = _online_norm(xs, self)
        else:
            z = (xs - _c(self.running_mean, xs.dtype)) / (_c(self.running_var, xs.dtype) + self.eps).sqrt()
        y = z * _c(self.weight, z.dtype) + _c(self.bias, z.dtype)
        if self.ecm == "ac":
            y = y.clamp(-self.clamp_value, self.clamp_value)
        elif self.ecm == "ls":
            y = y / (y.pow(2).mean(dim=(1, 2), keepdim=True) + self.ls_eps).sqrt()
        return from_ncs(y, x.shape, self.layout).to(x.dtype)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", alpha_fwd={self.alpha_fwd}, alpha_bkw={self.alpha_bkw}, "
                f"ecm={self.ecm}")


# ----------------------------------------------------------------------------------------------------------------
# Batch-Channel Normalization


class BatchChannelNorm(nn.Module):
    """Qiao et al. 2019 (BCN): a batch normalisation followed by a channel (group) normalisation; images only.

    Batch step, with estimated statistics (``estimate=True``, the paper's micro-batch form and the default):
    in training, first μ̂ ← (1 − r)·μ̂ + r·mean(x), σ̂² ← (1 − r)·σ̂² + r·mean((x − μ̂_old)²) per channel over
    (N, H, W) (no gradient through them), then x̂ = (x − μ̂)/√(σ̂² + 1e-5) in both training and eval;
    ẋ = γ_b·x̂ + β_b (per channel: ``bn_weight``, ``bn_bias``). ``estimate=False`` uses ordinary BatchNorm
    (batch statistics in training, running ones in eval) as the paper does for large batches.
    Channel step: GroupNorm of ẋ over G groups without running state, y = γ_g·(ẋ − μ_g)/√(σ_g² + ε) + β_g with
    one γ_g, β_g per group (``weight``, ``bias``: shape [G]), as in the authors' code.

    G defaults to the largest divisor of C that is ≤ 32 and leaves at least 2 channels per group: with one
    channel per group the channel step would cancel the batch step entirely (it would become InstanceNorm).
    The update rate r (``momentum``) defaults to 0.1; the authors' code reads it from a buffer that starts at 0
    and is set by the training script (no value is given in the released code), so 0.1 is this port's choice.
    With ``estimate=True`` batch size 1 works for any image size; a group holding a single value raises
    ``ValueError``; with ``estimate=False`` a single value per channel in training raises ``ValueError``.
    """

    def __init__(self, num_features: int, layout: str = "images", num_groups: int | None = None, eps: float = 1e-5,
                 momentum: float = 0.1, estimate: bool = True):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout, ("images",))
        self.num_groups = check_num_groups(num_features, num_groups, min_group_size=min(2, num_features))
        self.eps, self.momentum, self.estimate = eps, momentum, bool(estimate)
        self.bn_eps = 1e-5
        self.bn_weight = nn.Parameter(torch.ones(num_features))
        self.bn_bias = nn.Parameter(torch.zeros(num_features))
        self.weight = nn.Parameter(torch.ones(self.num_groups))
        self.bias = nn.Parameter(torch.zeros(self.num_groups))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "BatchChannelNorm")
        n = x.shape[0]
        if (self.num_features // self.num_groups) * x.shape[2] * x.shape[3] < 2:
            raise ValueError(f"BatchChannelNorm with {self.num_groups} groups needs more than one value per group, "
                             f"got input {tuple(x.shape)}; use fewer groups")
        xs = to_ncs(x.to(compute_dtype(x)), "images")
        dt = xs.dtype
        if self.estimate:
            if self.training:
                with torch.no_grad():
                    rm, rv, r = self.running_mean.to(dt), self.running_var.to(dt), self.momentum
                    batch_mean = xs.mean(dim=(0, 2))
                    dev2 = (xs - _c(rm, dt)).pow(2).mean(dim=(0, 2))
                    self.running_mean.copy_((1 - r) * rm + r * batch_mean)
                    self.running_var.copy_((1 - r) * rv + r * dev2)
                    self.num_batches_tracked.add_(1)
            xb = (xs - _c(self.running_mean, dt)) / (_c(self.running_var, dt) + self.bn_eps).sqrt()
        else:
            if self.training:
                _need_two_values("BatchChannelNorm", x, self.num_features)
                self.num_batches_tracked.add_(1)
            rm, rv = self.running_mean, self.running_var
            if rm.dtype != dt:
                rm, rv = rm.to(dt), rv.to(dt)
            xb = F.batch_norm(xs, rm, rv, None, None, self.training, self.momentum, self.bn_eps)
            if self.training and rm is not self.running_mean:
                with torch.no_grad():
                    self.running_mean.copy_(rm)
                    self.running_var.copy_(rv)
        xb = xb * _c(self.bn_weight, dt) + _c(self.bn_bias, dt)
        xg = xb.reshape(n, self.num_groups, -1)
        mu, var = xg.mean(dim=2, keepdim=True), xg.var(dim=2, unbiased=False, keepdim=True)
        y = (xg - mu) / (var + self.eps).sqrt() * _c(self.weight, dt) + _c(self.bias, dt)
        return y.reshape(x.shape).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, layout={self.layout}, num_groups={self.num_groups}, eps={self.eps}, "
                f"momentum={self.momentum}, estimate={self.estimate}")
