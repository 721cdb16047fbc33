"""The row norms' shared Triton device functions (``_rownorm``'s kernels call them): a tile's offsets, each mode's
row statistics (of whole rows in a tile, ``_stats``; of a wide row's running sums, ``_stats_of``), x̂, and the
backward's row reductions and dx. One formula per mode, written once, so the forwards and the backwards (which
compute the statistics again from x: no kernel keeps them between the passes) cannot drift apart."""

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
def _stats_of(s1, s2, shift, C, eps, MODE: tl.constexpr):
    """(aux, rstd) of a row from its sums Σd and Σd² of d = x − shift (the looped kernels, which see a wide row a
    chunk at a time). LayerNorm's shift is a value of the row, so the variance E[d²] − E[d]² loses no precision when
    |mean| ≫ std; the other modes pass 0 and sum x itself."""
    if MODE == 0:
        md = s1 / C
        rstd = tl.math.rsqrt(tl.maximum(s2 / C - md * md, 0.0) + eps)
        aux = shift + md
    elif MODE == 1:
        rstd = tl.math.rsqrt(s2 / C + eps)
        aux = 0.0 * s1
    elif MODE == 2:
        rstd = tl.math.rsqrt((s2 + s1 * s1) / (C + 1) + eps)
        aux = s1
    else:
        nrm = tl.sqrt(s2)
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
def _wide_coef(s1, s2, sgd, sg, shift, C, eps, MODE: tl.constexpr):
    """A wide row's statistics and backward reductions, (aux, rstd, c1, c2), from one pass over x and g = dy·γ:
    Σd, Σd², Σg·d and Σg with d = x − shift (as ``_stats_of``). Σg·x̂ = rstd·(Σg·d − E[d]·Σg) for LayerNorm,
    rstd·Σg·x for the others: the backward needs no statistics from the forward and reads x no more often."""
    aux, rstd = _stats_of(s1, s2, shift, C, eps, MODE)
    if MODE == 0:
        gx = rstd * (sgd - (s1 / C) * sg)
    else:
        gx = rstd * sgd
    c1, c2 = _coef_of(gx, sg, aux, C, MODE)
    return aux, rstd, c1, c2


@triton.jit
def _dx(g, xh, aux, rstd, c1, c2, MODE: tl.constexpr):
    if MODE == 0:
        dx = (g - xh * c1[:, None] - c2[:, None]) * rstd[:, None]
    elif MODE == 2:
        dx = (g - (xh + (aux * rstd)[:, None]) * c1[:, None]) * rstd[:, None]
    else:
        dx = (g - xh * c1[:, None]) * rstd[:, None]
    return dx
