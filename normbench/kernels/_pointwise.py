"""Fused Triton kernels for the point-wise norms DyT (y = γ·tanh(αx) + β) and Derf (y = γ·erf(αx + s) + β).

No statistics: the forward is one read of x and one write of y. The tensor is viewed as a 2-D grid of rows and
columns so the per-channel γ/β index never needs a per-element integer division:
* tokens ``[..., C]``: rows = tokens, columns = channels (γ indexed by column);
* images ``[N, C, H, W]``: rows = (n, c) planes, columns = pixels (γ indexed by ``row % C``, once per row).
The backward writes dx and reduces dγ, dβ, dα (and ds for Derf) without atomics: per-program partial sums
(tokens: a persistent grid over row tiles; images: per-plane sums over pixel ranges), summed afterwards.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (
    INTERPRET,
    SumParts,
    cdiv,
    check_tensor,
    col_block,
    first_launch,
    next_pow2,
    num_sms,
    prune_by_elements_per_thread,
    tuned,
    warps_for,
)
from ._env import plan_cache

DYT, DERF = 0, 1

FWD_TILE = 2048 if INTERPRET else 8192
BWD_TILE = 512 if INTERPRET else 2048
#: Persistent backward programs (tokens) or pixel splits (images) per SM.
PROGRAMS_PER_SM = 4


@triton.jit
def _tanh(z):
    # From exp rather than libdevice.tanh so the GPU and Triton's CPU interpreter (which has no libdevice) run the
    # same code; exp(−2|z|) never overflows, and the absolute error stays at float32 rounding.
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t)


@triton.jit
def _act(x, alpha, shift, KIND: tl.constexpr):
    """(f(z), f'(z)) with z = αx (+ s for Derf)."""
    if KIND == 0:
        t = _tanh(alpha * x)
        d = 1.0 - t * t
    else:
        z = alpha * x + shift
        t = tl.math.erf(z)
        d = 1.1283791670955126 * tl.exp(-z * z)  # 2/√π·exp(−z²)
    return t, d


def _fwd_rows(args) -> int:
    return min(max(1, args["TILE"] // args["BLOCK_C"]), next_pow2(args["NROWS"]))


@triton.jit
def _pw_fwd_kernel(X, W, B, A, SH, Y, NROWS, NCOLS, C,
                   KIND: tl.constexpr, CH_ON_ROWS: tl.constexpr,
                   TILE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rmask = rows < NROWS
    cmask = cols < NCOLS
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * NCOLS + cols[None, :]
    alpha = tl.load(A).to(tl.float32)
    shift = 0.0
    if KIND == 1:
        shift = tl.load(SH).to(tl.float32)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    t, _ = _act(x, alpha, shift, KIND)
    if CH_ON_ROWS:
        ch = rows % C
        w = tl.load(W + ch, mask=rmask, other=0.0).to(tl.float32)[:, None]
        b = tl.load(B + ch, mask=rmask, other=0.0).to(tl.float32)[:, None]
    else:
        w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        b = tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, (t * w + b).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _pw_bwd_cols_kernel(X, W, A, SH, DY, DX, DW_PART, DB_PART, DA_PART, DS_PART, NROWS, C, n_tiles,
                        PART_ROW, B_OFF, A_OFF, S_OFF,
                        KIND: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Tokens: program (p, cb) walks row tiles p, p+P, ... of column block cb; one partial row of dγ/dβ each (row p,
    ``PART_ROW`` apart, dβ at + B_OFF), dα/ds partials at + A_OFF/S_OFF (one buffer: ``_common.SumParts``). With
    one program the partials are the gradients, stored in their dtypes."""
    pid = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    alpha = tl.load(A).to(tl.float32)
    shift = 0.0
    if KIND == 1:
        shift = tl.load(SH).to(tl.float32)
    acc_w = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_a = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_s = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for t in range(pid, n_tiles, tl.num_programs(0)):
        rows = t * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = (rows < NROWS)[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        f, d = _act(x, alpha, shift, KIND)
        dz = dy * w * d  # zero wherever dy was masked, so every sum below ignores padding
        tl.store(DX + offs, (dz * alpha).to(DX.dtype.element_ty), mask=mask)
        acc_w += dy * f
        acc_b += dy
        acc_a += dz * x
        if KIND == 1:
            acc_s += dz
    tl.store(DW_PART + pid * PART_ROW + cols, tl.sum(acc_w, axis=0).to(DW_PART.dtype.element_ty), mask=cmask)
    tl.store(DB_PART + B_OFF + pid * PART_ROW + cols, tl.sum(acc_b, axis=0).to(DB_PART.dtype.element_ty), mask=cmask)
    k = pid * tl.num_programs(1) + cb
    tl.store(DA_PART + A_OFF + k, tl.sum(tl.sum(acc_a, axis=1), axis=0).to(DA_PART.dtype.element_ty))
    if KIND == 1:
        tl.store(DS_PART + S_OFF + k, tl.sum(tl.sum(acc_s, axis=1), axis=0).to(DS_PART.dtype.element_ty))


@triton.jit
def _pw_bwd_rows_kernel(X, W, A, SH, DY, DX, PART, NROWS, HW, C, HW_PER_SPLIT, SOFF, S,
                        KIND: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Images: program (rb, sp) takes BLOCK_R (n, c) planes over pixel range sp. Per-plane partial sums of dγ and dβ
    go to row (n, sp) of PART as [N·splits, 2C] (dβ at + C), dα/ds per program at PART + SOFF (+ S for ds)."""
    pid = tl.program_id(0)
    sp = tl.program_id(1)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < NROWS
    ch = rows % C
    w = tl.load(W + ch, mask=rmask, other=0.0).to(tl.float32)[:, None]
    alpha = tl.load(A).to(tl.float32)
    shift = 0.0
    if KIND == 1:
        shift = tl.load(SH).to(tl.float32)
    acc_w = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_a = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_s = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    start = sp * HW_PER_SPLIT
    end = tl.minimum(start + HW_PER_SPLIT, HW)
    for c0 in range(start, end, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = rmask[:, None] & (cols < end)[None, :]
        offs = rows.to(tl.int64)[:, None] * HW + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        f, d = _act(x, alpha, shift, KIND)
        dz = dy * w * d
        tl.store(DX + offs, (dz * alpha).to(DX.dtype.element_ty), mask=mask)
        acc_w += dy * f
        acc_b += dy
        acc_a += dz * x
        if KIND == 1:
            acc_s += dz
    n_split = tl.num_programs(1)
    prow = ((rows // C) * n_split + sp).to(tl.int64) * (2 * C) + ch
    tl.store(PART + prow, tl.sum(acc_w, axis=1), mask=rmask)
    tl.store(PART + prow + C, tl.sum(acc_b, axis=1), mask=rmask)
    k = pid * n_split + sp
    tl.store(PART + SOFF + k, tl.sum(tl.sum(acc_a, axis=1), axis=0))
    if KIND == 1:
        tl.store(PART + SOFF + S + k, tl.sum(tl.sum(acc_s, axis=1), axis=0))


_FWD_CONFIGS = [triton.Config({"TILE": t}, num_warps=w) for t in (4096, 8192, 16384) for w in (4, 8, 16)]
_pw_fwd_tuned = tuned(
    _pw_fwd_kernel, _FWD_CONFIGS, key=["NROWS", "BLOCK_C", "KIND", "CH_ON_ROWS"],  # rows: see _rownorm
    prune=prune_by_elements_per_thread(lambda cfg, a: _fwd_rows({**a, **cfg.kwargs}) * a["BLOCK_C"], 8, 32),
    heuristics={"BLOCK_R": _fwd_rows})
_BWD_CONFIGS = [triton.Config({}, num_warps=w) for w in (2, 4, 8)]
_bwd_prune = prune_by_elements_per_thread(lambda cfg, a: a["BLOCK_R"] * a["BLOCK_C"], 4, 16)
_pw_bwd_cols_tuned = tuned(_pw_bwd_cols_kernel, _BWD_CONFIGS, key=["BLOCK_R", "BLOCK_C", "KIND"], prune=_bwd_prune)
_pw_bwd_rows_tuned = tuned(_pw_bwd_rows_kernel, _BWD_CONFIGS, key=["BLOCK_R", "BLOCK_C", "KIND"], prune=_bwd_prune)


def _geometry(x: torch.Tensor, images: bool):
    """(rows, columns, C) of the 2-D view described in the module docstring."""
    if images:
        C = x.shape[1]
        rows = x.shape[0] * C
        return rows, x.numel() // max(1, rows), C
    C = x.shape[-1]
    return x.numel() // max(1, C), C, C


# Launch plans: what a call decides from its shape, dtypes and device is decided once per key (see _rownorm).
_FWD_PLANS = plan_cache()
_BWD_PLANS = plan_cache()


def forward(x, alpha, shift, weight, bias, kind: int, images: bool):
    """y for contiguous ``x`` (tokens [..., C] or images [N, C, H, W]). (Positional: this runs on every call, and
    keywords cost host time.)"""
    key = (x.shape, x.dtype, x.device, weight.dtype, bias.dtype, alpha.dtype, kind, images)
    plan = _FWD_PLANS.get(key)
    y = torch.empty_like(x)
    if plan is None:
        check_tensor(x)
        plan = _FWD_PLANS[key] = [_geometry(x, images), None]
    (nrows, ncols, C), step = plan
    if nrows * ncols == 0:
        return y
    args = (x, weight, bias, alpha, shift if shift is not None else alpha, y, nrows, ncols, C)
    if step is not None:
        step(*args)
        return y
    block_c = col_block(ncols)
    meta = dict(KIND=kind, CH_ON_ROWS=images, BLOCK_C=block_c)
    if _pw_fwd_tuned is None:
        block_r = _fwd_rows({"TILE": FWD_TILE, "BLOCK_C": block_c, "NROWS": nrows})
        meta.update(TILE=FWD_TILE, BLOCK_R=block_r, num_warps=warps_for(block_r * block_c, 16, 4))
    plan[1] = first_launch(_pw_fwd_tuned, _pw_fwd_kernel,
                           lambda META: (cdiv(nrows, META["BLOCK_R"]), cdiv(ncols, block_c)), args, meta,
                           {"BLOCK_R": _fwd_rows})
    return y


class _BwdPlan:
    __slots__ = ("geometry", "grid", "parts", "meta", "step", "direct", "sums")

    def __init__(self, geometry, grid, parts, meta):
        self.geometry, self.grid, self.parts, self.meta, self.step = geometry, grid, parts, meta, None
        self.direct, self.sums = False, None


def _bwd_plan(dy, x, kind: int, images: bool) -> _BwdPlan:
    check_tensor(dy, "gradient")
    nrows, ncols, C = _geometry(x, images)
    if x.numel() == 0:
        return _BwdPlan((nrows, ncols, C), None, None, None)
    block_c = col_block(ncols)
    block_r = min(max(1, BWD_TILE // block_c), next_pow2(nrows))
    sms = num_sms(x.device)
    if images:
        n_rb = cdiv(nrows, block_r)
        n_chunks = cdiv(ncols, block_c)
        split = max(1, min(n_chunks, cdiv(PROGRAMS_PER_SM * sms, n_rb)))
        per_split = cdiv(n_chunks, split) * block_c
        split = cdiv(ncols, per_split)
        grid = (n_rb, split)
        # rows of the dγ/dβ partials (samples × splits), dα (ds) partials (programs), the pixels per split
        parts = ((nrows // C) * split, n_rb * split, per_split)
    else:
        n_tiles = cdiv(nrows, block_r)
        n_cb = cdiv(ncols, block_c)
        P = max(1, min(n_tiles, cdiv(PROGRAMS_PER_SM * sms, n_cb)))
        grid = (P, n_cb)
        parts = (P, P * n_cb, n_tiles)
    meta = dict(KIND=kind, BLOCK_R=block_r, BLOCK_C=block_c)
    plan = _BwdPlan((nrows, ncols, C), grid, parts, meta)
    # one program (tokens) writes the gradients themselves; otherwise one buffer of partials and one final launch
    plan.direct = not images and grid == (1, 1)
    if not plan.direct:
        plan.sums = SumParts(parts[0], C, parts[1])
    return plan


def backward(dy, x, alpha, shift, weight, bias_dtype, *, kind: int, images: bool):
    """(dx, dγ, dβ, dα, ds or None), each parameter gradient in its parameter's dtype (β's: ``bias_dtype``)."""
    key = (x.shape, x.dtype, x.device, dy.dtype, weight.dtype, bias_dtype, alpha.dtype, kind, images)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        plan = _BWD_PLANS[key] = _bwd_plan(dy, x, kind, images)
    nrows, ncols, C = plan.geometry
    dev = x.device
    dx = torch.empty_like(x)
    derf = kind == DERF
    if plan.grid is None:
        return (dx, torch.zeros_like(weight), torch.zeros(C, device=dev, dtype=bias_dtype), torch.zeros_like(alpha),
                torch.zeros_like(shift) if derf else None)
    dw = torch.empty_like(weight)
    db = torch.empty(C, device=dev, dtype=bias_dtype)
    da = torch.empty_like(alpha)
    ds = torch.empty_like(shift) if derf else None
    p_rows, n_scalar, last = plan.parts
    sh = shift if shift is not None else alpha
    if plan.direct:
        args = (x, weight, alpha, sh, dy, dx, dw, db, da, ds if derf else da, nrows, C, last, 0, 0, 0, 0)
    else:
        part = torch.empty(p_rows * 2 * C + n_scalar * (2 if derf else 1), device=dev, dtype=torch.float32)
        soff = p_rows * 2 * C
        if images:
            args = (x, weight, alpha, sh, dy, dx, part, nrows, ncols, C, last, soff, n_scalar)
        else:
            args = (x, weight, alpha, sh, dy, dx, part, part, part, part, nrows, C, last, 2 * C, C, soff,
                    soff + n_scalar)
    if plan.step is not None:
        plan.step(*args)
    else:
        kernel, tuner = ((_pw_bwd_rows_kernel, _pw_bwd_rows_tuned) if images
                         else (_pw_bwd_cols_kernel, _pw_bwd_cols_tuned))
        meta = plan.meta
        if tuner is None:
            meta = dict(meta, num_warps=warps_for(meta["BLOCK_R"] * meta["BLOCK_C"], 8, 2))
        grid = plan.grid
        plan.step = first_launch(tuner, kernel, lambda META: grid, args, meta)
    if plan.sums is not None:
        plan.sums(part, (dw, db), (da, ds) if derf else (da,))
    return dx, dw, db, da, ds
