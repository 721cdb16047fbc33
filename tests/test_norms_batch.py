"""The batch-statistics norms against float64 references written from the papers' algorithms.

BatchNorm, Ghost BatchNorm and Batch-Channel Norm have exact gradients: their references are plain float64 formulas
differentiated by autograd, and torch.autograd.gradcheck runs on the modules. PowerNorm, Unified Normalization and
Online Normalization replace the gradient by the papers' approximate backward rules: their references apply those
rules explicitly, step by step, tracking every running statistic themselves.
Tolerances: float64 module vs float64 reference rtol 1e-9 (operation order only); float32 module vs float64
reference rtol 1e-4 (float32 rounding, accumulated over a few steps).
"""

from __future__ import annotations

import pytest
import torch

from normbench.norms.batch import BatchChannelNorm, BatchNorm, GhostBatchNorm, OnlineNorm, PowerNorm, UnifiedNorm

F64 = {"rtol": 1e-9, "atol": 1e-10}
F32 = {"rtol": 1e-4, "atol": 5e-5}
C = 6
D = torch.float64


def _x(shape, seed=0, dtype=D, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=D) * scale + 0.4).to(dtype)


def _shape(layout, batch, tokens=3):
    """tokens: [N, T, C] (tokens=None: [N, C]); images: [N, C, 3, 2]."""
    if layout == "images":
        return (batch, C, 3, 2)
    return (batch, C) if tokens is None else (batch, tokens, C)


def _dims(x, layout):
    return (0, 2, 3) if layout == "images" else tuple(range(x.dim() - 1))


def _bc(p, x, layout):
    """Broadcast a per-channel [C] tensor against x."""
    return p.view(1, -1, 1, 1) if layout == "images" else p


def _randomize(module, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 0.0 if "bias" in name else 1.0
            p.copy_(base + 0.3 * torch.randn(p.shape, generator=g, dtype=D))
    return module


def _proj(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(100 + seed), dtype=D)


def _module_grads(module, x, proj):
    xm = x.clone().requires_grad_(True)
    y = module(xm)
    assert y.dtype == x.dtype and y.shape == x.shape
    grads = torch.autograd.grad((y.double() * proj).sum(), [xm, *module.parameters()])
    return y.detach().double(), [g.double() for g in grads]


def _params64(module):
    return {n: p.detach().double().requires_grad_(True) for n, p in module.named_parameters()}


def _check_autograd(module, ref, x, tol, seed=0):
    """module(x) vs ref(x64, params64): output, ∂/∂x and ∂/∂(every parameter) of Σ y·P, P random."""
    proj = _proj(x.shape, seed)
    ym, gm = _module_grads(module, x, proj)
    xr = x.detach().double().requires_grad_(True)
    params = _params64(module)
    yr = ref(xr, params)
    gr = torch.autograd.grad((yr * proj).sum(), [xr, *params.values()])
    _assert_same(module, ym, gm, yr.detach(), list(gr), tol)


def _check_explicit(module, ref_step, x, tol, seed=0):
    """Like _check_autograd, but ref_step(x64, params64, P) returns (y, [∂x, ∂params...]) by the paper's rule."""
    proj = _proj(x.shape, seed)
    ym, gm = _module_grads(module, x, proj)
    yr, gr = ref_step(x.detach().double(), _params64(module), proj)
    _assert_same(module, ym, gm, yr.detach(), [g.detach() for g in gr], tol)


def _assert_same(module, ym, gm, yr, gr, tol):
    torch.testing.assert_close(ym, yr, **tol)
    names = ["input", *[n for n, _ in module.named_parameters()]]
    assert len(gm) == len(gr) == len(names)
    for name, a, b in zip(names, gm, gr, strict=True):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"gradient of {name}: {m}")


# =====================================================================================================================
# BatchNorm


def ref_bn(x, p, state, layout, training, eps=1e-5, momentum=0.1):
    """Ioffe & Szegedy: batch statistics in training (running variance unbiased), running ones in eval."""
    d = _dims(x, layout)
    if training:
        n = x.numel() // C
        mu = x.mean(dim=d, keepdim=True)
        var = ((x - mu) ** 2).mean(dim=d, keepdim=True)
        state["mean"] = (1 - momentum) * state["mean"] + momentum * mu.detach().flatten()
        state["var"] = (1 - momentum) * state["var"] + momentum * var.detach().flatten() * n / (n - 1)
    else:
        mu, var = _bc(state["mean"], x, layout), _bc(state["var"], x, layout)
    return (x - mu) / torch.sqrt(var + eps) * _bc(p["weight"], x, layout) + _bc(p["bias"], x, layout)


def _bn_state():
    return {"mean": torch.zeros(C, dtype=D), "var": torch.ones(C, dtype=D)}


def _assert_running(module, state, tol):
    torch.testing.assert_close(module.running_mean.double(), state["mean"], **tol)
    torch.testing.assert_close(module.running_var.double(), state["var"], **tol)


# [1, C] tokens hold one value per channel: test_batchnorm_single_value_per_channel covers that case
@pytest.mark.parametrize("layout,tokens,batch", [
    (layout, tokens, batch) for layout, tokens in [("tokens", 3), ("tokens", None), ("images", None)]
    for batch in (1, 2, 8) if not (tokens is None and layout == "tokens" and batch == 1)])
def test_batchnorm_train_then_eval_matches_reference(layout, tokens, batch):
    m, state = _randomize(BatchNorm(C, layout)).double(), _bn_state()
    for step in range(3):
        x = _x(_shape(layout, batch, tokens), seed=step)
        _check_autograd(m, lambda x, p: ref_bn(x, p, state, layout, True), x, F64, seed=step)
        _assert_running(m, state, F64)
    m.eval()
    _check_autograd(m, lambda x, p: ref_bn(x, p, state, layout, False), _x(_shape(layout, batch, tokens), 9), F64)
    _assert_running(m, state, F64)
    assert int(m.num_batches_tracked) == 3


@pytest.mark.parametrize("layout", ["tokens", "images"])
def test_batchnorm_float32_and_torch_parity(layout):
    m, state = _randomize(BatchNorm(C, layout)), _bn_state()
    for step in range(2):
        x = _x(_shape(layout, 4), seed=step, dtype=torch.float32)
        _check_autograd(m, lambda x, p: ref_bn(x, p, state, layout, True), x, F32, seed=step)
    _assert_running(m, state, F32)
    # same running statistics as torch's own BatchNorm on the same data
    theirs = torch.nn.BatchNorm1d(C) if layout == "tokens" else torch.nn.BatchNorm2d(C)
    ours = BatchNorm(C, layout)
    for step in range(2):
        x = _x(_shape(layout, 4), seed=step, dtype=torch.float32)
        ours(x)
        theirs(x.reshape(-1, C) if layout == "tokens" else x)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)


def test_batchnorm_cumulative_average_when_momentum_is_none():
    m = BatchNorm(C, "tokens", momentum=None).double()
    xs = [_x((2, 3, C), seed=s) for s in range(3)]
    for x in xs:
        m(x)
    torch.testing.assert_close(m.running_mean, torch.stack([x.mean(dim=(0, 1)) for x in xs]).mean(0), **F64)


def test_batchnorm_single_value_per_channel():
    m = BatchNorm(C, "tokens").double()
    for shape in [(1, C), (C,)]:
        with pytest.raises(ValueError, match="more than one value per channel"):
            m(_x(shape))
    with pytest.raises(ValueError, match="more than one value per channel"):
        BatchNorm(C, "images")(_x((1, C, 1, 1), dtype=torch.float32))
    m.eval()  # eval needs no batch statistics
    assert m(_x((1, C))).shape == (1, C)


@pytest.mark.parametrize("layout", ["tokens", "images"])
def test_batchnorm_gradcheck(layout):
    m = _randomize(BatchNorm(3, layout)).double()
    x = _x((2, 2, 3) if layout == "tokens" else (2, 3, 2, 1)).requires_grad_(True)
    p = dict(m.named_parameters())

    def f(x, w, b):
        return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

    assert torch.autograd.gradcheck(f, (x, p["weight"], p["bias"]))


# =====================================================================================================================
# Ghost BatchNorm


def ref_ghost(x, p, state, layout, vbs):
    chunks = list(torch.split(x, vbs, dim=0))
    if len(chunks) > 1 and chunks[-1].numel() // C < 2:
        chunks = chunks[:-2] + [torch.cat(chunks[-2:])]
    return torch.cat([ref_bn(c, p, state, layout, True) for c in chunks])


@pytest.mark.parametrize("layout,shape,vbs", [
    ("tokens", (8, 3, C), 3),      # ghost batches of 3, 3, 2 samples
    ("tokens", (7, C), 3),         # 3, 3, 1 -> the single-value last chunk joins the previous one
    ("tokens", (1, 4, C), 16),     # batch size 1, several tokens
    ("tokens", (2, 3, C), 1),      # every sample its own ghost batch
    ("images", (8, C, 3, 2), 3),
    ("images", (1, C, 3, 2), 16),
    ("images", (5, C, 1, 1), 2),   # 2, 2, 1 -> merged
])
def test_ghost_batchnorm_matches_reference(layout, shape, vbs):
    m, state = _randomize(GhostBatchNorm(C, layout, virtual_batch_size=vbs)).double(), _bn_state()
    for step in range(2):
        _check_autograd(m, lambda x, p: ref_ghost(x, p, state, layout, vbs), _x(shape, seed=step), F64, seed=step)
        _assert_running(m, state, F64)
    m.eval()
    _check_autograd(m, lambda x, p: ref_bn(x, p, state, layout, False), _x(shape, seed=7), F64)


def test_ghost_batchnorm_statistics_stay_inside_each_ghost_batch():
    m = GhostBatchNorm(C, "tokens", virtual_batch_size=4).double()
    x = _x((8, 3, C))
    x2 = x.clone()
    x2[4:] = _x((4, 3, C), seed=5) * 10
    with torch.no_grad():
        y, y2 = m(x), m(x2)
    torch.testing.assert_close(y[:4], y2[:4], **F64)
    assert not torch.allclose(y[4:], y2[4:])
    # a virtual batch at least as large as the batch is plain BatchNorm
    a, b = GhostBatchNorm(C, "tokens", virtual_batch_size=8).double(), BatchNorm(C, "tokens").double()
    torch.testing.assert_close(a(x), b(x), **F64)
    _assert_running(a, {"mean": b.running_mean, "var": b.running_var}, F64)


def test_ghost_batchnorm_float32_single_value_and_gradcheck():
    m, state = _randomize(GhostBatchNorm(C, "images", virtual_batch_size=2)), _bn_state()
    _check_autograd(m, lambda x, p: ref_ghost(x, p, state, "images", 2), _x((5, C, 2, 2), dtype=torch.float32), F32)
    with pytest.raises(ValueError, match="more than one value per channel"):
        GhostBatchNorm(C, "tokens")(_x((1, C)))
    m = _randomize(GhostBatchNorm(3, "tokens", virtual_batch_size=2)).double()
    p = dict(m.named_parameters())

    def f(x, w, b):
        return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

    assert torch.autograd.gradcheck(f, (_x((5, 3)).requires_grad_(True), p["weight"], p["bias"]))


# =====================================================================================================================
# PowerNorm


class RefPowerNorm:
    """Shen et al. 2020, Algorithm 1, with the warm-up of the authors' fairseq ``MaskPowerNorm``: the first ``warmup``
    steps normalise by the batch's own ψ_B; before the last of them ψ² is first the running mean of the ψ_B², and
    every step then takes the exponential average with the batch's ψ_B²."""

    def __init__(self, layout, warmup=1, alpha_fwd=0.9, alpha_bkw=0.9, eps=1e-5):
        self.layout, self.warmup, self.af, self.ab, self.eps = layout, warmup, alpha_fwd, alpha_bkw, eps
        self.psi2, self.nu, self.t = torch.ones(C, dtype=D), torch.zeros(C, dtype=D), 0

    def train_step(self, x, p, proj):
        d, bc = _dims(x, self.layout), (lambda t: _bc(t, x, self.layout))
        self.t += 1
        psi2_b = (x * x).mean(dim=d)
        used = psi2_b if self.t <= self.warmup else self.psi2
        if self.t < self.warmup:
            self.psi2 = self.psi2 * (self.t - 1) / self.t + psi2_b / self.t
        self.psi2 = self.af * self.psi2 + (1 - self.af) * psi2_b
        psi = torch.sqrt(used + self.eps)
        xhat = x / bc(psi)
        y = bc(p["weight"]) * xhat + bc(p["bias"])
        dxhat = bc(p["weight"].detach()) * proj
        gamma_stat, lam = (xhat * xhat).mean(dim=d), (dxhat * xhat).mean(dim=d)
        x_tilde = dxhat - bc(self.nu) * xhat
        self.nu = self.nu * (1 - (1 - self.ab) * gamma_stat) + (1 - self.ab) * lam
        return y, [x_tilde / bc(psi), (proj * xhat).sum(dim=d), proj.sum(dim=d)]

    def eval(self, x, p):
        bc = lambda t: _bc(t, x, self.layout)  # noqa: E731
        return bc(p["weight"]) * x / bc(torch.sqrt(self.psi2 + self.eps)) + bc(p["bias"])


@pytest.mark.parametrize("layout,tokens", [("tokens", 3), ("tokens", None), ("images", None)])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_powernorm_algorithm1_train_then_eval(layout, tokens, batch):
    m, ref = _randomize(PowerNorm(C, layout)).double(), RefPowerNorm(layout)
    for step in range(4):
        _check_explicit(m, ref.train_step, _x(_shape(layout, batch, tokens), seed=step), F64, seed=step)
        torch.testing.assert_close(m.running_phi, ref.psi2, **F64)
        torch.testing.assert_close(m.running_nu, ref.nu, **F64)
    m.eval()
    _check_autograd(m, ref.eval, _x(_shape(layout, batch, tokens), seed=9), F64)


@pytest.mark.parametrize("warmup", [0, 3])
def test_powernorm_warmup(warmup):
    m, ref = _randomize(PowerNorm(C, "tokens", warmup_iters=warmup)).double(), RefPowerNorm("tokens", warmup)
    for step in range(5):
        _check_explicit(m, ref.train_step, _x((2, 3, C), seed=step), F64, seed=step)
        torch.testing.assert_close(m.running_phi, ref.psi2, **F64)
    if warmup == 0:  # pure Algorithm 1: step 1 divides by ψ_0 = 1, whatever the batch
        m2 = PowerNorm(C, "tokens", warmup_iters=0).double()
        x = _x((2, 3, C))
        torch.testing.assert_close(m2(x), x / (1 + 1e-5) ** 0.5, **F64)


def test_powernorm_backward_is_the_approximation_not_autograd():
    m = PowerNorm(C, "tokens").double()
    x = _x((4, 3, C)).requires_grad_(True)
    (gx,) = torch.autograd.grad((m(x) * _proj(x.shape, 0)).sum(), [x])
    xd = x.detach().requires_grad_(True)
    exact = xd / torch.sqrt((xd * xd).mean(dim=(0, 1)) + 1e-5)
    (gexact,) = torch.autograd.grad((exact * _proj(x.shape, 0)).sum(), [xd])
    assert not torch.allclose(gx, gexact, rtol=1e-3)
    torch.testing.assert_close(m.running_nu, (1 - 0.9) * ((_proj(x.shape, 0) * exact.detach()).mean(dim=(0, 1))),
                               **F64)


def test_powernorm_float32_and_one_value_per_channel():
    m, ref = _randomize(PowerNorm(C, "images")), RefPowerNorm("images")
    for step in range(3):
        _check_explicit(m, ref.train_step, _x((3, C, 2, 2), seed=step, dtype=torch.float32), F32, seed=step)
    m, ref = _randomize(PowerNorm(C, "tokens")).double(), RefPowerNorm("tokens")
    for step in range(2):  # no centring: a batch of one token trains fine
        _check_explicit(m, ref.train_step, _x((1, C), seed=step), F64, seed=step)


# =====================================================================================================================
# Unified Normalization


class RefUnifiedNorm:
    """Yang et al. 2022 as in the authors' README and code (without their undocumented gradient compensation)."""

    def __init__(self, layout, window=4, warmup=4000, filtration=True, alpha=0.9, eps=1e-5):
        self.layout, self.m, self.warmup, self.filt = layout, window, warmup, filtration
        self.alpha, self.eps = alpha, eps
        self.r, self.psi = torch.ones(C, dtype=D), torch.zeros(C, dtype=D)
        self.stats, self.gstats, self.t, self.outliers = [], [], 0, 0

    def train_step(self, x, p, proj):
        d, bc, M = _dims(x, self.layout), (lambda t: _bc(t, x, self.layout)), self.m
        self.t += 1
        t = self.t
        sigma2 = (x * x).mean(dim=d)
        prev = self.stats[-M:]
        window = (prev + [sigma2])[-M:]
        skip = M == 1
        if self.filt and M > 1 and len(prev) == M and t >= self.warmup:
            threshold = M * torch.sqrt(torch.stack(prev)).var()
            w = torch.stack(window)
            am, gm = w.mean(0), torch.exp(torch.log(w).mean(0))
            if bool((am - gm > threshold).any()):
                skip, window[-1] = True, self.r
                self.outliers += 1
        self.stats.append(window[-1])
        if not skip and t > M and t >= self.warmup:
            var = torch.exp(torch.log(torch.stack(window)).mean(0))  # geometric mean of the window
        else:
            var = sigma2
        self.r = self.alpha * self.r + (1 - self.alpha) * var
        s = torch.sqrt(var + self.eps)
        z = x / bc(s)
        y = bc(p["weight"]) * z + bc(p["bias"])
        g = bc(p["weight"].detach()) * proj
        g_sigma = (g * z).mean(dim=d)
        self.gstats.append(self.psi if skip else g_sigma)
        if skip or t <= M or t < self.warmup:
            mean_g = g_sigma
        else:
            mean_g = torch.stack(self.gstats[-M:]).mean(0)
        self.psi = self.alpha * self.psi + (1 - self.alpha) * mean_g
        psi = mean_g if skip else self.psi
        return y, [(g - bc(psi) * z) / bc(s), (proj * z).sum(dim=d), proj.sum(dim=d)]

    def eval(self, x, p):
        bc = lambda t: _bc(t, x, self.layout)  # noqa: E731
        return bc(p["weight"]) * x / bc(torch.sqrt(self.r + self.eps)) + bc(p["bias"])


@pytest.mark.parametrize("layout,tokens", [("tokens", 3), ("tokens", None), ("images", None)])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_unified_norm_window_outliers_and_eval(layout, tokens, batch):
    kw = {"window_size": 3, "warmup_iters": 2}
    m, ref = _randomize(UnifiedNorm(C, layout, **kw)).double(), RefUnifiedNorm(layout, 3, 2)
    for step in range(8):
        x = _x(_shape(layout, batch, tokens), seed=step) * (40.0 if step == 5 else 1.0)  # step 6 is an outlier
        _check_explicit(m, ref.train_step, x, F64, seed=step)
        torch.testing.assert_close(m.running_var, ref.r, **F64)
        torch.testing.assert_close(m.ema_gz, ref.psi, **F64)
    assert ref.outliers >= 1 and int(m.num_outliers) == ref.outliers
    m.eval()
    _check_autograd(m, ref.eval, _x(_shape(layout, batch, tokens), seed=20), F64)


def test_unified_norm_without_filtration_and_defaults():
    m = UnifiedNorm(C, "tokens", window_size=2, warmup_iters=0, outlier_filtration=False).double()
    ref = RefUnifiedNorm("tokens", 2, 0, filtration=False)
    for step in range(5):
        x = _x((2, 3, C), seed=step) * (40.0 if step == 3 else 1.0)
        _check_explicit(m, ref.train_step, x, F64, seed=step)
    assert int(m.num_outliers) == 0 == ref.outliers
    d = UnifiedNorm(C)
    assert (d.window_size, d.warmup_iters, d.momentum, d.eps, d.outlier_filtration) == (4, 4000, 0.9, 1e-5, True)


def test_unified_norm_window_of_one_is_exact_rms_over_the_batch():
    """M = 1 disables smoothing: forward x/√(mean x² + ε) with its exact gradient, at any batch size."""
    m = _randomize(UnifiedNorm(3, "tokens", window_size=1, warmup_iters=0)).double()
    p = dict(m.named_parameters())

    def f(x, w, b):
        return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

    for shape in [(1, 3), (4, 2, 3)]:
        assert torch.autograd.gradcheck(f, (_x(shape).requires_grad_(True), p["weight"], p["bias"]))


def test_unified_norm_float32():
    m, ref = _randomize(UnifiedNorm(C, "images", window_size=2, warmup_iters=0)), RefUnifiedNorm("images", 2, 0)
    for step in range(4):
        _check_explicit(m, ref.train_step, _x((2, C, 2, 2), seed=step, dtype=torch.float32), F32, seed=step)


# =====================================================================================================================
# Online Normalization


class RefOnlineNorm:
    """Chiley et al. 2019 as in the authors' numpy reference: one sample at a time, forward and backward."""

    def __init__(self, layout, ecm=None, alpha_fwd=0.999, alpha_bkw=0.99, eps=1e-5, clamp=5.0, ls_eps=1e-5):
        self.layout, self.ecm, self.af, self.ab, self.eps, self.clamp, self.ls_eps = (
            layout, ecm, alpha_fwd, alpha_bkw, eps, clamp, ls_eps)
        self.mu, self.var = torch.zeros(C, dtype=D), torch.ones(C, dtype=D)
        self.u, self.v = torch.zeros(C, dtype=D), torch.zeros(C, dtype=D)

    def _split(self, x):
        """Per-sample [C, S] blocks."""
        if self.layout == "images":
            return [xi.reshape(C, -1) for xi in x]
        if x.dim() == 1:
            return [x.reshape(C, 1)]
        return [xi.reshape(-1, C).T for xi in x]

    def _join(self, blocks, shape):
        if self.layout == "images":
            return torch.stack(blocks).reshape(shape)
        return torch.stack([b.T for b in blocks]).reshape(shape)

    def _ecm(self, y):
        if self.ecm == "ac":
            return y.clamp(-self.clamp, self.clamp)
        if self.ecm == "ls":
            n = y.shape[0] if y.dim() > 1 else 1
            per_sample = y.reshape(n, -1)
            return (per_sample / torch.sqrt((per_sample ** 2).mean(1, keepdim=True) + self.ls_eps)).reshape(y.shape)
        return y

    def train_step(self, x, p, proj):
        outs, scales = [], []
        for xi in self._split(x):
            scale = torch.sqrt(self.var + self.eps)
            outs.append((xi - self.mu[:, None]) / scale[:, None])
            scales.append(scale)
            mu_i = xi.mean(1)
            var_i = ((xi - mu_i[:, None]) ** 2).mean(1)
            self.var = self.af * self.var + (1 - self.af) * var_i + self.af * (1 - self.af) * (mu_i - self.mu) ** 2
            self.mu = self.mu + (1 - self.af) * (mu_i - self.mu)
        out = self._join(outs, x.shape).requires_grad_(True)
        y = self._ecm(_bc(p["weight"], x, self.layout) * out + _bc(p["bias"], x, self.layout))
        g_out, g_w, g_b = torch.autograd.grad((y * proj).sum(), [out, p["weight"], p["bias"]])
        grads_in = []
        for gi, oi, si in zip(self._split(g_out), [o.detach() for o in outs], scales):
            grad = gi - (1 - self.ab) * self.v[:, None] * oi
            self.v = self.v + (grad * oi).mean(1)
            grad = grad / si[:, None]
            gx = grad - (1 - self.ab) * self.u[:, None]
            self.u = self.u + gx.mean(1)
            grads_in.append(gx)
        return y, [self._join(grads_in, x.shape), g_w, g_b]

    def eval(self, x, p):
        bc = lambda t: _bc(t, x, self.layout)  # noqa: E731
        return self._ecm(bc(p["weight"]) * (x - bc(self.mu)) / bc(torch.sqrt(self.var + self.eps)) + bc(p["bias"]))


@pytest.mark.parametrize("layout,tokens", [("tokens", 3), ("tokens", None), ("images", None)])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_online_norm_matches_reference(layout, tokens, batch):
    m, ref = _randomize(OnlineNorm(C, layout, ecm=None)).double(), RefOnlineNorm(layout)
    for step in range(3):
        _check_explicit(m, ref.train_step, _x(_shape(layout, batch, tokens), seed=step), F64, seed=step)
        for ours, theirs in [(m.running_mean, ref.mu), (m.running_var, ref.var), (m.u, ref.u), (m.v, ref.v)]:
            torch.testing.assert_close(ours, theirs, **F64)
    m.eval()
    _check_autograd(m, ref.eval, _x(_shape(layout, batch, tokens), seed=9), F64)


@pytest.mark.parametrize("ecm,layout", [("ac", "tokens"), ("ac", "images"), ("ls", "tokens"), ("ls", "images")])
def test_online_norm_error_compensation(ecm, layout):
    m, ref = _randomize(OnlineNorm(C, layout, ecm=ecm)).double(), RefOnlineNorm(layout, ecm=ecm)
    for step in range(2):
        # scale 4 so that activation clamping at ±5 really clips some outputs
        _check_explicit(m, ref.train_step, _x(_shape(layout, 3), seed=step, scale=4.0), F64, seed=step)
    m.eval()
    _check_autograd(m, ref.eval, _x(_shape(layout, 3), seed=9, scale=4.0), F64)


def test_online_norm_float32_and_single_sample():
    m, ref = _randomize(OnlineNorm(C, "images")), RefOnlineNorm("images", ecm="ac")
    for step in range(2):
        _check_explicit(m, ref.train_step, _x((3, C, 2, 2), seed=step, dtype=torch.float32), F32, seed=step)
    m, ref = _randomize(OnlineNorm(C, "tokens")).double(), RefOnlineNorm("tokens", ecm="ac")
    for step in range(3):  # batch size 1 with a single value per channel, even a bare [C] vector
        _check_explicit(m, ref.train_step, _x((1, C) if step < 2 else (C,), seed=step), F64, seed=step)


def test_online_norm_sample_order_dependence():
    """In training, sample n sees samples 0..n−1 of its batch; sample 0 sees only earlier batches."""
    m = OnlineNorm(C, "tokens").double()
    x = _x((4, 3, C))
    x2 = x.clone()
    x2[0] = x2[0] * 3 + 1
    with torch.no_grad():
        y, y2 = OnlineNorm(C, "tokens").double()(x), m(x2)
    assert not torch.allclose(y[0], y2[0])
    assert not torch.allclose(y[1:], y2[1:])
    x3 = x.clone()
    x3[1:] = x3[1:] * 5
    with torch.no_grad():
        y3 = OnlineNorm(C, "tokens").double()(x3)
    torch.testing.assert_close(y[0], y3[0], **F64)


# =====================================================================================================================
# Batch-Channel Normalization


class RefBCN:
    """Qiao et al. 2019: (estimated or batch) BN with per-channel affine, then GroupNorm with per-group affine."""

    def __init__(self, groups, estimate=True, r=0.1, eps=1e-5):
        self.g, self.estimate, self.r, self.eps = groups, estimate, r, eps
        self.state = _bn_state()

    def __call__(self, x, p, training):
        c4 = lambda t: t.view(1, -1, 1, 1)  # noqa: E731
        s = self.state
        if self.estimate:
            if training:
                batch_mean = x.detach().mean(dim=(0, 2, 3))
                dev2 = ((x.detach() - c4(s["mean"])) ** 2).mean(dim=(0, 2, 3))
                s["mean"] = (1 - self.r) * s["mean"] + self.r * batch_mean
                s["var"] = (1 - self.r) * s["var"] + self.r * dev2
            xh = (x - c4(s["mean"])) / torch.sqrt(c4(s["var"]) + 1e-5)
            xb = xh * c4(p["bn_weight"]) + c4(p["bn_bias"])
        else:
            xb = ref_bn(x, {"weight": p["bn_weight"], "bias": p["bn_bias"]}, s, "images", training)
        n = x.shape[0]
        xg = xb.reshape(n, self.g, -1)
        mu = xg.mean(dim=2, keepdim=True)
        var = ((xg - mu) ** 2).mean(dim=2, keepdim=True)
        y = (xg - mu) / torch.sqrt(var + self.eps) * p["weight"].view(1, -1, 1) + p["bias"].view(1, -1, 1)
        return y.reshape(x.shape)


@pytest.mark.parametrize("estimate", [True, False])
@pytest.mark.parametrize("batch", [1, 2, 8])
def test_batch_channel_norm_train_then_eval(estimate, batch):
    m = _randomize(BatchChannelNorm(C, estimate=estimate)).double()
    assert m.num_groups == 3 and m.weight.shape == (3,)
    ref = RefBCN(3, estimate)
    for step in range(3):
        _check_autograd(m, lambda x, p: ref(x, p, True), _x((batch, C, 3, 2), seed=step), F64, seed=step)
        _assert_running(m, ref.state, F64)
    m.eval()
    _check_autograd(m, lambda x, p: ref(x, p, False), _x((batch, C, 3, 2), seed=9), F64)


def test_batch_channel_norm_groups_float32_and_micro_batch():
    assert [BatchChannelNorm(c).num_groups for c in (64, 32, 8, 6, 3, 1)] == [32, 16, 4, 3, 1, 1]
    m, ref = _randomize(BatchChannelNorm(C, num_groups=2)), RefBCN(2)
    _check_autograd(m, lambda x, p: ref(x, p, True), _x((2, C, 2, 2), dtype=torch.float32), F32)
    # estimated statistics need no batch: one 1x1 image trains (two channels per group)
    m, ref = _randomize(BatchChannelNorm(C)).double(), RefBCN(3)
    _check_autograd(m, lambda x, p: ref(x, p, True), _x((1, C, 1, 1)), F64)
    with pytest.raises(ValueError, match="more than one value per channel"):
        BatchChannelNorm(C, estimate=False)(_x((1, C, 1, 1), dtype=torch.float32))
    with pytest.raises(ValueError, match="more than one value per group"):
        BatchChannelNorm(C, num_groups=C)(_x((2, C, 1, 1), dtype=torch.float32))


def test_batch_channel_norm_gradcheck():
    x = _x((2, 4, 2, 1)).requires_grad_(True)
    for estimate, train, r in [(True, False, 0.1), (True, True, 0.0), (False, True, 0.1)]:
        m = _randomize(BatchChannelNorm(4, momentum=r, estimate=estimate)).double().train(train)
        if not train:
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        names = [n for n, _ in m.named_parameters()]

        def f(x, *params, m=m, names=names):
            return torch.func.functional_call(m, dict(zip(names, params)), (x,))

        assert torch.autograd.gradcheck(f, (x, *m.parameters()))


# =====================================================================================================================
# every batch norm: 16-bit inputs train with float32 statistics


@pytest.mark.parametrize("cls,layout", [(BatchNorm, "tokens"), (GhostBatchNorm, "images"), (PowerNorm, "tokens"),
                                        (UnifiedNorm, "images"), (OnlineNorm, "tokens"),
                                        (BatchChannelNorm, "images")])
def test_bfloat16_training_step(cls, layout):
    m = cls(C, layout)
    x = _x(_shape(layout, 4), dtype=torch.bfloat16).requires_grad_(True)
    y = m(x)
    y.float().pow(2).sum().backward()
    assert y.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    assert torch.isfinite(x.grad.float()).all() and torch.isfinite(y.float()).all()
    ref = cls(C, layout)
    torch.testing.assert_close(y.float(), ref(x.detach().float()), rtol=0.02, atol=0.05)


# =====================================================================================================================
# the approximate backwards survive torch.compile (they write running statistics, which traced graphs can drop)


@pytest.mark.parametrize("cls,kw", [(PowerNorm, {}), (UnifiedNorm, {"window_size": 2, "warmup_iters": 0}),
                                    (OnlineNorm, {})])
def test_custom_backward_under_torch_compile(cls, kw):
    eager, compiled = cls(C, "tokens", **kw), cls(C, "tokens", **kw)
    run = torch.compile(compiled, backend="aot_eager")  # AOTAutograd tracing, without code generation
    for step in range(3):
        x = _x((4, 3, C), seed=step, dtype=torch.float32)
        grads = []
        for m in (eager, run):
            xi = x.clone().requires_grad_(True)
            (m(xi) * _proj(x.shape, step).float()).sum().backward()
            grads.append(xi.grad)
        torch.testing.assert_close(grads[1], grads[0])
    assert list(eager.state_dict()) == list(compiled.state_dict())
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, msg=lambda m: f"buffer {name}: {m}")
