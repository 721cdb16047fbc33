"""The row norms' shared Triton device functions (``_rownorm``'s kernels call them): a tile's offsets, each mode's
row statistics, x̂, and the backward's row reductions and dx. One formula per mode, written once, so the forward,
the fused backward (which recomputes the statistics with ``_stats``) and the wide kernels cannot drift apart."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _stats(x, mask, C, eps, MODE: tl.constexpr):
    """(aux, rstd) per row of a tile holding whole rows; masked entries of ``x`` are 0."""
    if MODE == 0:
        mean = tl.sum(x, axis=1) / C
        d = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.math.rsqrt(tl.sum(d * d, axis=1) / C + eps)
        aux = mean
    elif MODE == 1:
        rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / C + eps)
        aux = tl.zeros_like(rstd)
    elif MODE == 2:
        s = tl.sum(x, axis=1)
        rstd = tl.math.rsqrt((tl.sum(x * x, axis=1) + s * s) / (C + 1) + eps)
        aux = s
    else:
        nrm = tl.sqrt(tl.sum(x * x, axis=1))
        rstd = 1.0 / tl.maximum(nrm, eps)
        aux = (nrm >= eps).to(tl.float32)
    return aux, rstd


@triton.jit
def _xhat(x, aux, rstd, MODE: tl.constexpr):
    if MODE == 0:
        xh = (x - aux[:, None]) * rstd[:, None]
    else:
        xh = x * rstd[:, None]
    return xh


@triton.jit
def _tile(t, M, C, HW, cols, IMAGES: tl.constexpr, BLOCK_R: tl.constexpr):
    """Offsets of row tile ``t``: (element offsets, element mask, row mask, statistic index per row)."""
    r = tl.arange(0, BLOCK_R)
    cmask = cols < C
    if IMAGES:
        nhb = tl.cdiv(HW, BLOCK_R)
        n = t // nhb
        hw = (t % nhb) * BLOCK_R + r
        rmask = hw < HW
        srow = n * HW + hw
        offs = (n.to(tl.int64) * C * HW + hw)[:, None] + cols.to(tl.int64)[None, :] * HW
    else:
        rows = t * BLOCK_R + r
        rmask = rows < M
        srow = rows
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    return offs, rmask[:, None] & cmask[None, :], rmask, srow


@triton.jit
def _coef(g, xh, aux, C, MODE: tl.constexpr):
    """The row reductions of the backward: dx = rstd·(g − x̂·c1 − c2) (CRMSNorm: (x̂ + Σx·rstd)·c1)."""
    gx = tl.sum(g * xh, axis=1)
    if MODE == 0:
        c1 = gx / C
        c2 = tl.sum(g, axis=1) / C
    elif MODE == 1:
        c1 = gx / C
        c2 = tl.zeros_like(c1)
    elif MODE == 2:
        c1 = gx / (C + 1)
        c2 = tl.zeros_like(c1)
    else:
        c1 = gx * aux  # a clamped norm (aux = 0) is a constant: no term through it
        c2 = tl.zeros_like(c1)
    return c1, c2


@triton.jit
def _coef_of(gx, gs, aux, C, MODE: tl.constexpr):
    """(c1, c2) of ``_coef`` from a row's Σg·x̂ and Σg (the wide kernels' accumulated sums)."""
    c2 = 0.0 * gx
    if MODE == 0:
        c1 = gx / C
        c2 = gs / C
    elif MODE == 2:
        c1 = gx / (C + 1)
    elif MODE == 3:
        c1 = gx * aux
    else:
        c1 = gx / C
    return c1, c2


@triton.jit
def _dx(g, xh, aux, rstd, c1, c2, MODE: tl.constexpr):
    if MODE == 0:
        dx = (g - xh * c1[:, None] - c2[:, None]) * rstd[:, None]
    elif MODE == 2:
        dx = (g - (xh + (aux * rstd)[:, None]) * c1[:, None]) * rstd[:, None]
    else:
        dx = (g - xh * c1[:, None]) * rstd[:, None]
    return dx
