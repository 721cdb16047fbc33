"""Fused Triton kernels for GroupNorm over contiguous images ``[N, C, H, W]`` (any trailing spatial shape).

Group (n, g) is a contiguous run of C/G·HW values, read as a [C/G, HW] tile so γ/β are indexed per channel row
and never by a per-element division.
* fused (the group fits one block): forward reads x once, writes y and float32 mean/rstd per group; backward
  reads x and dy once, writes dx and per-(n, c) sums Σdy·x̂ and Σdy, which become dγ, dβ by a sum over N.
* looped (bigger groups): the forward splits each group's pixels over several programs (partial shifted sums,
  then a normalising pass that combines them), so N·G small with huge H·W still fills the GPU. The backward
  is two passes like PyTorch's own kernel: per-(n, c) sums, a few tiny [N, C] tensor ops, then dx element-wise.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import INTERPRET, cdiv, col_block, next_pow2, num_sms, prune_by_elements_per_thread, tuned, warps_for
from ._env import launcher

#: Largest group tile (power-of-two C/G times power-of-two HW) held in registers, forward and backward.
MAX_FUSED = 16384
MAX_FUSED_BWD = 8192
#: Elements per tile of the looped kernels.
TILE = 1024 if INTERPRET else 4096
PROGRAMS_PER_SM = 4


@triton.jit
def _gn_fwd_fused_kernel(X, W, B, Y, MEAN, RSTD, C, HW, G, eps,
                         HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr,
                         BLOCK_CPG: tl.constexpr, BLOCK_HW: tl.constexpr):
    ng = tl.program_id(0)
    CPG = C // G
    ch = tl.arange(0, BLOCK_CPG)
    hw = tl.arange(0, BLOCK_HW)
    cmask = ch < CPG
    mask = cmask[:, None] & (hw < HW)[None, :]
    offs = ng.to(tl.int64) * CPG * HW + ch[:, None] * HW + hw[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    L = CPG * HW
    mean = tl.sum(tl.sum(x, axis=1), axis=0) / L
    d = tl.where(mask, x - mean, 0.0)
    rstd = tl.math.rsqrt(tl.sum(tl.sum(d * d, axis=1), axis=0) / L + eps)
    y = d * rstd
    chan = (ng % G) * CPG + ch
    if HAS_W:
        y = y * tl.load(W + chan, mask=cmask, other=0.0).to(tl.float32)[:, None]
    if HAS_B:
        y = y + tl.load(B + chan, mask=cmask, other=0.0).to(tl.float32)[:, None]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    if STORE_STATS:
        tl.store(MEAN + ng, mean)
        tl.store(RSTD + ng, rstd)


@triton.jit
def _gn_stats_kernel(X, PART, C, HW, G, HW_PER_SPLIT, BLOCK_CPG: tl.constexpr, BLOCK_HW: tl.constexpr):
    """Partial Σ(x − x₀), Σ(x − x₀)² of group ng over pixel range sp; x₀ (the group's first value) is shared by
    every split, so the partials add up exactly and the variance keeps its precision when |mean| ≫ std."""
    ng = tl.program_id(0)
    sp = tl.program_id(1)
    CPG = C // G
    base = ng.to(tl.int64) * CPG * HW
    k = tl.load(X + base).to(tl.float32)
    start = sp * HW_PER_SPLIT
    end = tl.minimum(start + HW_PER_SPLIT, HW)
    acc1 = tl.zeros([BLOCK_CPG, BLOCK_HW], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_CPG, BLOCK_HW], dtype=tl.float32)
    for c0 in range(0, CPG, BLOCK_CPG):
        ch = c0 + tl.arange(0, BLOCK_CPG)
        cmask = ch < CPG
        for h0 in range(start, end, BLOCK_HW):
            hw = h0 + tl.arange(0, BLOCK_HW)
            mask = cmask[:, None] & (hw < end)[None, :]
            x = tl.load(X + base + ch[:, None] * HW + hw[None, :], mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - k, 0.0)
            acc1 += d
            acc2 += d * d
    i = (ng * tl.num_programs(1) + sp) * 2
    tl.store(PART + i, tl.sum(tl.sum(acc1, axis=1), axis=0))
    tl.store(PART + i + 1, tl.sum(tl.sum(acc2, axis=1), axis=0))


@triton.jit
def _gn_fwd_split_kernel(X, W, B, Y, PART, MEAN, RSTD, C, HW, G, eps, HW_PER_SPLIT,
                         HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr,
                         BLOCK_SPLIT: tl.constexpr, BLOCK_CPG: tl.constexpr, BLOCK_HW: tl.constexpr):
    """Combines the group's partial sums (every split does it: cheaper than another launch) and normalises."""
    ng = tl.program_id(0)
    sp = tl.program_id(1)
    n_split = tl.num_programs(1)
    CPG = C // G
    base = ng.to(tl.int64) * CPG * HW
    k = tl.load(X + base).to(tl.float32)
    si = tl.arange(0, BLOCK_SPLIT)
    smask = si < n_split
    s1 = tl.sum(tl.load(PART + (ng * n_split + si) * 2, mask=smask, other=0.0), axis=0)
    s2 = tl.sum(tl.load(PART + (ng * n_split + si) * 2 + 1, mask=smask, other=0.0), axis=0)
    L = CPG * HW
    md = s1 / L
    rstd = tl.math.rsqrt(tl.maximum(s2 / L - md * md, 0.0) + eps)
    mean = k + md
    if STORE_STATS:
        tl.store(MEAN + ng, mean, mask=sp == 0)
        tl.store(RSTD + ng, rstd, mask=sp == 0)
    start = sp * HW_PER_SPLIT
    end = tl.minimum(start + HW_PER_SPLIT, HW)
    for c0 in range(0, CPG, BLOCK_CPG):
        ch = c0 + tl.arange(0, BLOCK_CPG)
        cmask = ch < CPG
        chan = (ng % G) * CPG + ch
        if HAS_W:
            w = tl.load(W + chan, mask=cmask, other=0.0).to(tl.float32)[:, None]
        if HAS_B:
            b = tl.load(B + chan, mask=cmask, other=0.0).to(tl.float32)[:, None]
        for h0 in range(start, end, BLOCK_HW):
            hw = h0 + tl.arange(0, BLOCK_HW)
            mask = cmask[:, None] & (hw < end)[None, :]
            offs = base + ch[:, None] * HW + hw[None, :]
            y = (tl.load(X + offs, mask=mask, other=0.0).to(tl.float32) - mean) * rstd
            if HAS_W:
                y = y * w
            if HAS_B:
                y = y + b
            tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gn_bwd_fused_kernel(X, W, DY, DX, MEAN, RSTD, DS_NC, DB_NC, C, HW, G,
                         HAS_W: tl.constexpr, BLOCK_CPG: tl.constexpr, BLOCK_HW: tl.constexpr):
    ng = tl.program_id(0)
    CPG = C // G
    ch = tl.arange(0, BLOCK_CPG)
    hw = tl.arange(0, BLOCK_HW)
    cmask = ch < CPG
    mask = cmask[:, None] & (hw < HW)[None, :]
    offs = ng.to(tl.int64) * CPG * HW + ch[:, None] * HW + hw[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(MEAN + ng)
    rstd = tl.load(RSTD + ng)
    xh = tl.where(mask, (x - mean) * rstd, 0.0)
    if HAS_W:
        g = dy * tl.load(W + (ng % G) * CPG + ch, mask=cmask, other=0.0).to(tl.float32)[:, None]
    else:
        g = dy
    L = CPG * HW
    c1 = tl.sum(tl.sum(g * xh, axis=1), axis=0) / L
    c2 = tl.sum(tl.sum(g, axis=1), axis=0) / L
    dx = (g - xh * c1 - c2) * rstd
    tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
    # (n, c) = ng·C/G + ch: per-channel sums of this sample, summed over N on the host side.
    tl.store(DS_NC + ng * CPG + ch, tl.sum(dy * xh, axis=1), mask=cmask)
    tl.store(DB_NC + ng * CPG + ch, tl.sum(dy, axis=1), mask=cmask)


@triton.jit
def _gn_bwd_reduce_kernel(X, DY, MEAN, RSTD, DS_PART, DB_PART, NC, HW, CPG, HW_PER_SPLIT,
                          BLOCK_R: tl.constexpr, BLOCK_HW: tl.constexpr):
    """Σ_hw dy·x̂ and Σ_hw dy for BLOCK_R (n, c) planes over pixel range sp."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    sp = tl.program_id(1)
    n_split = tl.num_programs(1)
    rmask = rows < NC
    grp = rows // CPG  # (n·C + c)//(C/G) = n·G + c//(C/G)
    mean = tl.load(MEAN + grp, mask=rmask, other=0.0)[:, None]
    rstd = tl.load(RSTD + grp, mask=rmask, other=0.0)[:, None]
    start = sp * HW_PER_SPLIT
    end = tl.minimum(start + HW_PER_SPLIT, HW)
    acc_s = tl.zeros([BLOCK_R, BLOCK_HW], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_R, BLOCK_HW], dtype=tl.float32)
    for h0 in range(start, end, BLOCK_HW):
        hw = h0 + tl.arange(0, BLOCK_HW)
        mask = rmask[:, None] & (hw < end)[None, :]
        offs = rows.to(tl.int64)[:, None] * HW + hw[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        acc_s += dy * (x - mean) * rstd
        acc_b += dy
    tl.store(DS_PART + rows * n_split + sp, tl.sum(acc_s, axis=1), mask=rmask)
    tl.store(DB_PART + rows * n_split + sp, tl.sum(acc_b, axis=1), mask=rmask)


@triton.jit
def _gn_bwd_dx_kernel(X, W, DY, DX, MEAN, RSTD, C1, C2, NC, HW, C, CPG,
                      HAS_W: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_HW: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    hw = tl.program_id(1) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    rmask = rows < NC
    mask = rmask[:, None] & (hw < HW)[None, :]
    grp = rows // CPG
    mean = tl.load(MEAN + grp, mask=rmask, other=0.0)[:, None]
    rstd = tl.load(RSTD + grp, mask=rmask, other=0.0)[:, None]
    c1 = tl.load(C1 + grp, mask=rmask, other=0.0)[:, None]
    c2 = tl.load(C2 + grp, mask=rmask, other=0.0)[:, None]
    offs = rows.to(tl.int64)[:, None] * HW + hw[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_W:
        g = g * tl.load(W + rows % C, mask=rmask, other=0.0).to(tl.float32)[:, None]
    dx = (g - (x - mean) * rstd * c1 - c2) * rstd
    tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)


_WARPS = [triton.Config({}, num_warps=w) for w in (4, 8, 16, 32)]
_tile = lambda cfg, a: a["BLOCK_CPG"] * a["BLOCK_HW"]  # noqa: E731
_gn_fwd_fused_tuned = tuned(_gn_fwd_fused_kernel, _WARPS, key=["BLOCK_CPG", "BLOCK_HW"],
                            prune=prune_by_elements_per_thread(_tile, 8, 32))
_gn_bwd_fused_tuned = tuned(_gn_bwd_fused_kernel, _WARPS, key=["BLOCK_CPG", "BLOCK_HW"],
                            prune=prune_by_elements_per_thread(_tile, 4, 16))


def _launch(kernel, tuned_kernel, grid, args, per_thread, **meta):
    # through the launcher (the hook tests stub); GroupNorm has no cached launch plans yet (docs/kernels.md)
    if tuned_kernel is not None:
        return launcher().launch(tuned_kernel, grid, args, meta)
    meta["num_warps"] = warps_for(meta["BLOCK_CPG"] * meta["BLOCK_HW"], per_thread, 4)
    return launcher().launch(kernel, grid, args, meta)


def _geometry(x: torch.Tensor, G: int):
    N, C = x.shape[0], x.shape[1]
    HW = x.numel() // max(1, N * C)
    return N, C, HW, C // G


def _split(n_chunks: int, parallel: int, sms: int, block: int, length: int):
    """(programs per group, pixels per program): enough programs to fill the GPU when N·G (or N·C) is small."""
    split = max(1, min(n_chunks, cdiv(PROGRAMS_PER_SM * sms, parallel)))
    per = cdiv(n_chunks, split) * block
    return cdiv(length, per), per


def forward(x, G: int, weight, bias, eps: float, store_stats: bool = True):
    """(y, mean, rstd) for contiguous ``x``; mean and rstd are float32 [N·G]."""
    N, C, HW, CPG = _geometry(x, G)
    y = torch.empty_like(x)
    f32 = dict(device=x.device, dtype=torch.float32)
    mean = torch.empty(N * G, **f32)
    rstd = torch.empty(N * G, **f32)
    if x.numel() == 0:
        return y, mean, rstd
    w = weight if weight is not None else x
    b = bias if bias is not None else x
    flags = dict(HAS_W=weight is not None, HAS_B=bias is not None, STORE_STATS=store_stats)
    bc, bh = next_pow2(CPG), next_pow2(HW)
    if bc * bh <= MAX_FUSED:
        _launch(_gn_fwd_fused_kernel, _gn_fwd_fused_tuned, (N * G,), (x, w, b, y, mean, rstd, C, HW, G, eps), 16,
                BLOCK_CPG=bc, BLOCK_HW=bh, **flags)
        return y, mean, rstd
    bh = col_block(HW)
    bc = max(1, min(next_pow2(CPG), TILE // bh))
    split, per = _split(cdiv(HW, bh), N * G, num_sms(x.device), bh, HW)
    part = torch.empty(N * G * split * 2, **f32)
    warps = warps_for(bc * bh, 8, 4)
    launch = launcher().launch
    launch(_gn_stats_kernel, (N * G, split), (x, part, C, HW, G, per), dict(BLOCK_CPG=bc, BLOCK_HW=bh,
                                                                            num_warps=warps))
    launch(_gn_fwd_split_kernel, (N * G, split), (x, w, b, y, part, mean, rstd, C, HW, G, eps, per),
           dict(BLOCK_SPLIT=next_pow2(split), BLOCK_CPG=bc, BLOCK_HW=bh, num_warps=warps, **flags))
    return y, mean, rstd


def backward(dy, x, G: int, weight, mean, rstd, has_bias: bool, need_dw: bool = True):
    """(dx, dγ, dβ) with parameter gradients in float32 (None where the parameter is absent)."""
    N, C, HW, CPG = _geometry(x, G)
    dev = x.device
    f32 = dict(device=dev, dtype=torch.float32)
    dx = torch.empty_like(x)
    if x.numel() == 0:
        return dx, torch.zeros(C, **f32) if weight is not None else None, torch.zeros(C, **f32) if has_bias else None
    w = weight if weight is not None else x
    bc, bh = next_pow2(CPG), next_pow2(HW)
    if bc * bh <= MAX_FUSED_BWD:
        ds = torch.empty(N, C, **f32)
        db = torch.empty(N, C, **f32)
        _launch(_gn_bwd_fused_kernel, _gn_bwd_fused_tuned, (N * G,), (x, w, dy, dx, mean, rstd, ds, db, C, HW, G), 8,
                HAS_W=weight is not None, BLOCK_CPG=bc, BLOCK_HW=bh)
    else:
        NC = N * C
        bh = col_block(HW)
        br = max(1, min(next_pow2(NC), TILE // bh))
        warps = warps_for(br * bh, 8, 4)
        n_rb = cdiv(NC, br)
        split, per = _split(cdiv(HW, bh), n_rb, num_sms(dev), bh, HW)
        ds_part = torch.empty(NC * split, **f32)
        db_part = torch.empty(NC * split, **f32)
        launcher().launch(_gn_bwd_reduce_kernel, (n_rb, split), (x, dy, mean, rstd, ds_part, db_part, NC, HW, CPG, per),
                          dict(BLOCK_R=br, BLOCK_HW=bh, num_warps=warps))
        ds = ds_part.view(N, C, split).sum(-1)
        db = db_part.view(N, C, split).sum(-1)
        L = CPG * HW
        gs, gb = (ds * weight.float(), db * weight.float()) if weight is not None else (ds, db)
        c1 = (gs.view(N, G, CPG).sum(-1) / L).reshape(-1)
        c2 = (gb.view(N, G, CPG).sum(-1) / L).reshape(-1)
        launcher().launch(_gn_bwd_dx_kernel, (n_rb, cdiv(HW, bh)), (x, w, dy, dx, mean, rstd, c1, c2, NC, HW, C, CPG),
                          dict(HAS_W=weight is not None, BLOCK_R=br, BLOCK_HW=bh, num_warps=warps))
    if not need_dw:
        return dx, None, None
    return dx, ds.sum(0) if weight is not None else None, db.sum(0) if has_bias else None
