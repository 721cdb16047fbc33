"""Fused Triton kernels for the row-wise norms: LayerNorm, RMSNorm, CRMSNorm, SRMSNorm, ScaleNorm, residual variants.

One kernel family serves every mode; ``MODE`` picks the statistic (``_rowmath._stats``: the device functions the
kernels share live there), a few flags the affine part.
Layouts: tokens ``[M, C]`` (rows contiguous) and images ``[N, C, H, W]`` normalised per pixel over C, read in
place with a channel stride of H·W (``IMAGES``), so no permute copy is needed when C is at most ``MAX_IMAGES_C``.

Paths (docs/kernels.md has the details and byte counts):
* fused: a row fits one block (C ≤ ``MAX_FUSED_C``). Forward reads x once and writes y. Backward (C ≤
  ``MAX_FUSED_C_BWD``) is persistent: ``P`` programs walk row tiles, write dx, keep dγ/dβ partial sums in registers
  and store one partial row each, summed by one more launch (``_common.SumParts``; no atomics).
* wide: C > ``MAX_FUSED_C``: one program per row loops over it for the statistics, then again (from L2) for y. The
  wide backward (C > ``MAX_FUSED_C_BWD``) is one persistent kernel (``_row_bwd_wide_kernel``, three HBM passes; a
  row's second read comes from L2), or the two-kernel path (five) where its rows would not fit ``WIDE_L2_SHARE`` of
  the L2.

Saved for backward: x (or the residual sum s) and the weight, never the row statistics: every backward computes
them again from x. A tile of whole rows reduces each row in registers (``_rowmath._stats``, as the forward did);
the wide kernels accumulate Σd, Σd² beside the reductions they need anyway (Σg·d, Σg; d = x − x₀) in their first
pass over x and dy (``_rowmath._wide_coef``), so no path reads x more often for it. The forward therefore
allocates only its outputs, at every width: a register reduction in the backward instead of an allocation, a
store and a load of 8 bytes a row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (
    INTERPRET,
    Plan,
    SumParts,
    cdiv,
    check_tensor,
    compiled_occupancy,
    first_launch,
    l2_bytes,
    next_pow2,
    num_sms,
    prune_by_elements_per_thread,
    tuned,
    warps_for,
)
from ._env import plan_cache
from ._rowmath import _coef, _dx, _stats, _stats_of, _tile, _wide_coef, _xhat

LAYERNORM, RMSNORM, CRMSNORM, SCALENORM = 0, 1, 2, 3

#: Widest row (power-of-two block) the forward holds in registers; wider rows take the looped path.
MAX_FUSED_C = 16384
#: The same for the backward, which keeps about six row-sized float32 tiles live (x, dy, x̂, g, dγ and dβ sums):
#: 8192 of them already fill a 1024-thread block's 64 registers per thread.
MAX_FUSED_C_BWD = 8192
#: Widest C for the in-place images kernel; beyond it images go through a channels-last copy.
MAX_IMAGES_C = 1024
#: Column chunk of the wide path.
WIDE_CHUNK = 4096
#: Elements per tile (rows·BLOCK_C) when not autotuned. Small in the interpreter so tests walk several tiles.
FWD_TILE = 2048 if INTERPRET else 4096
BWD_TILE = 1024 if INTERPRET else 4096
#: Persistent backward programs per SM when the kernel's occupancy is unknown (autotuned, or the interpreter);
#: otherwise the grid is the compiled kernel's occupancy (``_common.programs_per_sm``) times the SMs.
PROGRAMS_PER_SM = 2


def _fwd_rows(args) -> int:
    rows = max(1, args["TILE"] // args["BLOCK_C"])
    if args["IMAGES"]:
        # ≥16 pixels per channel keeps each channel's run at least 32-64 bytes long (whole sectors).
        rows = max(rows, 16)
        return min(rows, next_pow2(args["HW"]))
    return min(rows, next_pow2(args["M"]))


_FWD_CONFIGS = [triton.Config({"TILE": t}, num_warps=w) for t in (4096, 8192, 16384) for w in (4, 8, 16, 32)]
_BWD_CONFIGS = [triton.Config({}, num_warps=w) for w in (4, 8, 16, 32)]


@triton.jit
def _row_fwd_kernel(X, R, W, B, Y, S, M, C, HW, eps,
                    MODE: tl.constexpr, IMAGES: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
                    HAS_B: tl.constexpr, SCALAR_W: tl.constexpr,
                    TILE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    offs, mask, rmask, srow = _tile(tl.program_id(0), M, C, HW, cols, IMAGES, BLOCK_R)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        # Normalise the sum as stored (rounded to the input dtype), which is what the caller gets back as s.
        s = (x + tl.load(R + offs, mask=mask, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + offs, s, mask=mask)
        x = s.to(tl.float32)
    aux, rstd = _stats(x, mask, C, eps, MODE)
    y = _xhat(x, aux, rstd, MODE)
    if HAS_W:
        y = y * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if SCALAR_W:
        y = y * tl.load(W).to(tl.float32)
    if HAS_B:
        y = y + tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _row_fwd_wide_kernel(X, R, W, B, Y, S, M, C, HW, eps,
                         MODE: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                         SCALAR_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows: one program per row loops over it for the statistics (writing s = x + r), then again (from L2)
    for y. (M and HW are unused: the fused kernel's arguments, so that one planned call serves both.)"""
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    shift = 0.0
    if MODE == 0:
        # Sums of (x − x₀) instead of x: the variance then loses no precision when |mean| ≫ std.
        k = tl.load(X + base).to(tl.float32)
        if HAS_RES:
            k = (k + tl.load(R + base).to(tl.float32)).to(S.dtype.element_ty).to(tl.float32)
        shift = k
    acc1 = tl.zeros([BLOCK_C], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            s = (x + tl.load(R + base + cols, mask=mask, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
            tl.store(S + base + cols, s, mask=mask)
            x = s.to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        acc1 += d
        acc2 += d * d
    aux, rstd = _stats_of(tl.sum(acc1, axis=0), tl.sum(acc2, axis=0), shift, C, eps, MODE)
    if HAS_RES:
        tl.debug_barrier()  # the second loop reads s back: the block's stores are visible to all its threads
    src = S if HAS_RES else X
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        x = tl.load(src + base + cols, mask=mask, other=0.0).to(tl.float32)
        if MODE == 0:
            y = (x - aux) * rstd
        else:
            y = x * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        if SCALAR_W:
            y = y * tl.load(W).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _row_coef_kernel(X, W, DY, COEF, M, C, eps,
                     MODE: tl.constexpr, HAS_W: tl.constexpr, SCALAR_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows: one program per row loops over it once for its statistics and the backward's two row
    reductions, stored as COEF[k·M + row] for k = 0..3: aux, rstd, c1, c2 (``_wide_coef``)."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    shift = 0.0
    if MODE == 0:
        shift = tl.load(X + base).to(tl.float32)
    acc1 = tl.zeros([BLOCK_C], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    acc_gd = tl.zeros([BLOCK_C], dtype=tl.float32)
    acc_g = tl.zeros([BLOCK_C], dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        x = tl.load(X + base + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        if SCALAR_W:
            g = g * tl.load(W).to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        acc1 += d
        acc2 += d * d
        acc_gd += g * d
        acc_g += g
    aux, rstd, c1, c2 = _wide_coef(tl.sum(acc1, axis=0), tl.sum(acc2, axis=0), tl.sum(acc_gd, axis=0),
                                   tl.sum(acc_g, axis=0), shift, C, eps, MODE)
    tl.store(COEF + row, aux)
    tl.store(COEF + M + row, rstd)
    tl.store(COEF + 2 * M + row, c1)
    tl.store(COEF + 3 * M + row, c2)


@triton.jit
def _row_bwd_kernel(X, W, DY, DS, DX, COEF, DW_PART, DB_PART, DSW_PART, M, C, HW, n_tiles,
                    PART_ROW, B_OFF, SW_OFF, eps,
                    MODE: tl.constexpr, IMAGES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    SCALAR_W: tl.constexpr, HAS_DS: tl.constexpr, HAS_COEF: tl.constexpr, COMPUTE_DW: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Persistent: program (p, cb) takes row tiles p, p+P, ... of column block cb; partial dγ/dβ per program at row
    p (``PART_ROW`` apart) of DW_PART, DB_PART + B_OFF, dg's at DSW_PART + SW_OFF (one program: the gradients).
    A tile of whole rows computes each row's statistics again from x (as the forward did, ``_stats``) and its
    reductions; a column block of wide rows (``HAS_COEF``) reads both from ``_row_coef_kernel``'s COEF."""
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    if HAS_W:
        w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if SCALAR_W:
        sw = tl.load(W).to(tl.float32)
    acc_w = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for t in range(pid, n_tiles, n_progs):
        offs, mask, rmask, srow = _tile(t, M, C, HW, cols, IMAGES, BLOCK_R)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_COEF:
            aux = tl.load(COEF + srow, mask=rmask, other=0.0)
            rstd = tl.load(COEF + M + srow, mask=rmask, other=0.0)
        else:
            aux, rstd = _stats(x, mask, C, eps, MODE)
        xh = _xhat(x, aux, rstd, MODE)
        if COMPUTE_DW:
            # before g is formed, so that dy's registers are free by dx (LayerNorm + residual at C = 8192: no spill)
            acc_w += dy * xh  # dy is 0 outside the tile, so padding adds nothing
            if HAS_B:
                acc_b += dy
        if HAS_W:
            g = dy * w
        elif SCALAR_W:
            g = dy * sw
        else:
            g = dy
        if HAS_COEF:
            c1 = tl.load(COEF + 2 * M + srow, mask=rmask, other=0.0)
            c2 = tl.load(COEF + 3 * M + srow, mask=rmask, other=0.0)
        else:
            c1, c2 = _coef(g, xh, aux, C, MODE)
        dx = _dx(g, xh, aux, rstd, c1, c2, MODE)
        if HAS_DS:
            dx += tl.load(DS + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
    if COMPUTE_DW:
        if HAS_W:
            tl.store(DW_PART + pid * PART_ROW + cols, tl.sum(acc_w, axis=0).to(DW_PART.dtype.element_ty), mask=cmask)
        if HAS_B:
            tl.store(DB_PART + B_OFF + pid * PART_ROW + cols, tl.sum(acc_b, axis=0).to(DB_PART.dtype.element_ty),
                     mask=cmask)
        if SCALAR_W:
            tl.store(DSW_PART + SW_OFF + pid * tl.num_programs(1) + cb,
                     tl.sum(tl.sum(acc_w, axis=1), axis=0).to(DSW_PART.dtype.element_ty))


_row_fwd_tuned = tuned(
    # M (rows) is in the key: the best tile for 4k rows is not the best for 32k (wave quantisation over the SMs).
    _row_fwd_kernel, _FWD_CONFIGS, key=["M", "BLOCK_C", "MODE", "IMAGES", "HAS_RES"],
    prune=prune_by_elements_per_thread(lambda cfg, a: _fwd_rows({**a, **cfg.kwargs}) * a["BLOCK_C"], 8, 32),
    heuristics={"BLOCK_R": _fwd_rows})
_row_bwd_tuned = tuned(
    _row_bwd_kernel, _BWD_CONFIGS, key=["BLOCK_R", "BLOCK_C", "MODE", "IMAGES", "HAS_COEF"],
    prune=prune_by_elements_per_thread(lambda cfg, a: a["BLOCK_R"] * a["BLOCK_C"], 4, 16))
_FWD_HEURISTICS = {"BLOCK_R": _fwd_rows}


def _fwd_meta(M: int, HW: int, **meta) -> dict:
    """The forward tile kernel's launch parameters: the flags alone when autotuned (the tuner picks TILE and warps
    and the heuristic BLOCK_R), else the fixed tile, its rows and warps."""
    if _row_fwd_tuned is not None:
        return meta
    block_r = _fwd_rows({**meta, "M": M, "HW": HW, "TILE": FWD_TILE})
    return dict(meta, TILE=FWD_TILE, BLOCK_R=block_r, num_warps=warps_for(block_r * meta["BLOCK_C"], 16, 4))


def _bwd_warps(meta) -> int:
    # sm_90 ptxas: the images tile (channels strided) needs ~2x the registers of a tokens tile; at 8 elements per
    # thread it spills at 32 warps, at 16 it fits in 128 registers (see python -m normbench.kernels.aot).
    return warps_for(meta["BLOCK_R"] * meta["BLOCK_C"], 16 if meta["IMAGES"] else 8, 4)


def _bwd_programs_per_sm(args, meta) -> int:
    """Occupancy of the (non-autotuned) backward kernel for these arguments, else ``PROGRAMS_PER_SM``."""
    if _row_bwd_tuned is not None:
        return PROGRAMS_PER_SM
    warps = _bwd_warps(meta)
    key = ("row_bwd", warps, args[0].dtype, args[0].device, tuple(sorted(meta.items())))
    return compiled_occupancy(_row_bwd_kernel, args, meta, warps, key) or PROGRAMS_PER_SM


def _geometry(x: torch.Tensor, images: bool):
    """(M stat rows, C, HW) of a contiguous tokens [..., C] or images [N, C, H, W] tensor."""
    if images:
        n, c = x.shape[0], x.shape[1]
        hw = x.numel() // max(1, n * c)
        return n * hw, c, hw
    c = x.shape[-1]
    return x.numel() // max(1, c), c, 1


@triton.jit
def _row_bwd_wide_kernel(X, W, DY, DS, DX, DW_PART, DB_PART, DSW_PART, M, C, PART_ROW, B_OFF, SW_OFF, eps,
                         MODE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, SCALAR_W: tl.constexpr,
                         HAS_DS: tl.constexpr, COMPUTE_DW: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows, persistent: program p takes rows p, p+P, ...; per row one pass for the statistics and reductions
    (``_wide_coef``), one (from L2) for dx; dγ/dβ add up in its row of DW_PART, DB_PART + B_OFF (its first row writes
    them), dg at + SW_OFF."""
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    if SCALAR_W:
        sw = tl.load(W).to(tl.float32)
    acc_sw = tl.zeros([1], dtype=tl.float32)
    for row in range(pid, M, n_progs):
        base = (row + 0 * pid).to(tl.int64) * C  # a tensor in the interpreter too (its loop variable is an int)
        later = (row + 0 * pid) > pid  # not this program's first row: add to its partial sums
        shift = tl.zeros([1], dtype=tl.float32)
        if MODE == 0:
            shift = tl.load(X + base + tl.zeros([1], dtype=tl.int32)).to(tl.float32)
        s1 = tl.zeros([1], dtype=tl.float32)
        s2 = tl.zeros([1], dtype=tl.float32)
        sgd = tl.zeros([1], dtype=tl.float32)
        sg = tl.zeros([1], dtype=tl.float32)
        for c0 in range(0, C, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            mask = (cols < C)[None, :]
            x = tl.load(X + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(DY + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_W:
                g = g * tl.load(W + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
            if SCALAR_W:
                g = g * sw
            d = tl.where(mask, x - shift[:, None], 0.0)
            s1 += tl.sum(d, axis=1)
            s2 += tl.sum(d * d, axis=1)
            sgd += tl.sum(g * d, axis=1)
            sg += tl.sum(g, axis=1)
        aux, rstd, c1, c2 = _wide_coef(s1, s2, sgd, sg, shift, C, eps, MODE)
        for c0 in range(0, C, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            cm = cols < C
            mask = cm[None, :]
            x = tl.load(X + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_W:
                g = dy * tl.load(W + cols, mask=cm, other=0.0).to(tl.float32)[None, :]
            elif SCALAR_W:
                g = dy * sw
            else:
                g = dy
            xh = tl.where(mask, _xhat(x, aux, rstd, MODE), 0.0)
            dx = _dx(g, xh, aux, rstd, c1, c2, MODE)
            if HAS_DS:
                dx += tl.load(DS + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(DX + base + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if COMPUTE_DW:
                if HAS_W:
                    part = DW_PART + pid.to(tl.int64) * PART_ROW + cols
                    tl.store(part, tl.load(part, mask=cm & later, other=0.0) + tl.sum(dy * xh, axis=0), mask=cm)
                if HAS_B:
                    part = DB_PART + B_OFF + pid.to(tl.int64) * PART_ROW + cols
                    tl.store(part, tl.load(part, mask=cm & later, other=0.0) + tl.sum(dy, axis=0), mask=cm)
                if SCALAR_W:
                    acc_sw += tl.sum(tl.sum(dy * xh, axis=1), axis=0)
    if COMPUTE_DW:
        if SCALAR_W:
            tl.store(DSW_PART + SW_OFF + pid + tl.arange(0, 1), acc_sw)


#: "fused3": the one-kernel wide backward (three HBM passes); "split5": reductions kernel + tile kernel (five).
#: Kept selectable so a GPU can measure both (docs/kernels.md).
WIDE_BWD = "fused3"
#: Programs per SM of the wide backward (8 warps, chunks of ``WIDE_CHUNK``): one, so that the programs' rows and
#: dγ/dβ partial rows (``P·C·(2e + 8)`` bytes for LayerNorm) stay in L2 up to C = 16384 in bfloat16 on an H100.
WIDE_PROGRAMS_PER_SM = 1
#: Share of the L2 the fused wide backward may count on (the rest: other traffic, set-associativity).
WIDE_L2_SHARE = 0.6


def _wide_fused_fits(P: int, C: int, elem: int, has_w: bool, has_b: bool, l2: int) -> bool:
    """Whether P programs' rows in flight (x, dy) and their fp32 partial sums fit in ``WIDE_L2_SHARE`` of L2 (the
    second read of each row must come from L2 for the fused wide backward to move three passes, not five)."""
    per_program = C * (2 * elem + 4 * int(has_w) + 4 * int(has_b))
    return P * per_program <= WIDE_L2_SHARE * l2


def _wide(C: int, images: bool, limit: int) -> bool:
    return not images and next_pow2(C) > limit


# ---------------------------------------------------------------------------------------------------------------
# Launch plans. Everything a call decides from its shape, dtypes and device (path, grid, block sizes, warps, the
# autotuner's choice) is decided once per key and kept: a later call allocates its outputs and launches. The
# module-level limits are in the keys, so a test that changes one gets a fresh plan.
# ---------------------------------------------------------------------------------------------------------------
_FWD_PLANS = plan_cache()
_BWD_PLANS = plan_cache()


def forward(x, residual, weight, bias, mode: int, eps: float, images: bool = False, scalar_weight: bool = False):
    """(y, s = x + residual or None) for contiguous ``x``: one launch, and y (and s) its only allocations. No
    statistics are kept: every backward computes them again from x (or s). (Positional arguments: this runs on every
    call, and keywords cost host time.)"""
    key = (x.shape, x.dtype, x.device, mode, images, scalar_weight,
           None if residual is None else residual.dtype, None if weight is None else weight.dtype,
           None if bias is None else bias.dtype, MAX_FUSED_C, MAX_IMAGES_C, WIDE_CHUNK)
    plan = _FWD_PLANS.get(key)
    y = torch.empty_like(x)
    w = weight if weight is not None else x
    b = bias if bias is not None else x
    if plan is not None and plan.steps is not None:  # the common call: planned
        if residual is None:
            plan.steps(x, x, w, b, y, x, plan.M, plan.C, plan.HW, eps)
            return y, None
        s = torch.empty_like(x)
        plan.steps(x, residual, w, b, y, s, plan.M, plan.C, plan.HW, eps)
        return y, s
    if plan is None:
        check_tensor(x)
        if residual is not None:
            check_tensor(residual, "residual")
        M, C, HW = _geometry(x, images)
        if images and next_pow2(C) > MAX_IMAGES_C:
            raise ValueError(f"images kernel takes C <= {MAX_IMAGES_C}; the caller permutes wider inputs to "
                             "channels-last")
        plan = _FWD_PLANS[key] = Plan(M=M, C=C, HW=HW, wide=_wide(C, images, MAX_FUSED_C))
    s = torch.empty_like(x) if residual is not None else None
    M, C, HW = plan.M, plan.C, plan.HW
    if M == 0:
        return y, s
    args = (x, residual if residual is not None else x, w, b, y, s if s is not None else x, M, C, HW, eps)
    flags = dict(MODE=mode, HAS_W=weight is not None and not scalar_weight, HAS_B=bias is not None,
                 SCALAR_W=scalar_weight, HAS_RES=residual is not None)
    if plan.wide:  # one program per row, looping over it twice
        plan.steps = first_launch(None, _row_fwd_wide_kernel, lambda META: (M,), args,
                                  dict(flags, BLOCK_C=WIDE_CHUNK, num_warps=8))
        return y, s
    meta = _fwd_meta(M, HW, IMAGES=images, BLOCK_C=next_pow2(C), **flags)
    if images:
        N = M // HW
        grid_of = lambda META: (N * cdiv(HW, META["BLOCK_R"]),)  # noqa: E731
    else:
        grid_of = lambda META: (cdiv(M, META["BLOCK_R"]),)  # noqa: E731
    plan.steps = first_launch(_row_fwd_tuned, _row_fwd_kernel, grid_of, args, meta, _FWD_HEURISTICS)
    return y, s


def _bwd_plan(dy, ds, x, weight, *, mode, images, scalar_weight, has_bias, need_dw) -> Plan:
    check_tensor(dy, "gradient")
    M, C, HW = _geometry(x, images)
    has_w = weight is not None and not scalar_weight
    need_dw = need_dw and (weight is not None or has_bias)
    plan = Plan(M=M, C=C, HW=HW, has_w=has_w, need_dw=need_dw, path="empty" if x.numel() == 0 else "tile")
    if plan.path == "empty":
        return plan
    plan.nv = (int(has_w) + int(has_bias)) if need_dw else 0
    dev, wide = x.device, _wide(C, images, MAX_FUSED_C_BWD)
    plan.wide = wide
    P = max(1, min(M, WIDE_PROGRAMS_PER_SM * num_sms(dev)))
    if wide and WIDE_BWD == "fused3" and _wide_fused_fits(P, C, x.element_size(), has_w and need_dw,
                                                          has_bias and need_dw, l2_bytes(dev)):
        plan.path, plan.P, plan.n_cb = "fused3", P, 1
    else:
        _tile_grid(plan, dy, ds, x, weight, mode, images, scalar_weight, has_bias)
    # One program (per column block) writes the gradients themselves, in the parameters' dtypes; otherwise one
    # float32 buffer holds every partial sum (``_common.SumParts``), summed by one more launch.
    plan.direct = plan.path == "tile" and plan.P * plan.n_cb == 1
    if need_dw and not plan.direct:
        n_scalar = plan.P * plan.n_cb if scalar_weight else 0
        plan.part_size, plan.sums = plan.P * plan.nv * C + n_scalar, SumParts(plan.P, C, n_scalar)
    return plan


def _tile_grid(plan, dy, ds, x, weight, mode, images, scalar_weight, has_bias) -> None:
    M, C, HW, has_w, need_dw, wide, dev = plan.M, plan.C, plan.HW, plan.has_w, plan.need_dw, plan.wide, x.device
    block_c = WIDE_CHUNK if wide else next_pow2(C)
    if images:
        # ≥16 pixels per channel run where registers allow (C ≤ 512); 8 at C = 1024 keeps the tile at 8192.
        block_r = min(max(BWD_TILE // block_c, min(16, 8192 // block_c)), next_pow2(HW))
        n_tiles = (M // HW) * cdiv(HW, block_r)
    else:
        block_r = min(max(1, BWD_TILE // block_c), next_pow2(M))
        n_tiles = cdiv(M, block_r)
    meta = dict(MODE=mode, IMAGES=images, HAS_W=has_w, HAS_B=has_bias, SCALAR_W=scalar_weight,
                HAS_DS=ds is not None, HAS_COEF=wide, COMPUTE_DW=need_dw, BLOCK_R=block_r, BLOCK_C=block_c)
    # placeholders for the pointers a configuration never reads (as in backward())
    probe = (x, weight if weight is not None else x, dy, ds if ds is not None else x, x, x, x, x, x,
             M, C, HW, n_tiles, C, C, C, 1e-5)
    plan.n_cb, plan.meta, plan.n_tiles = cdiv(C, block_c), meta, n_tiles
    plan.P = max(1, min(n_tiles, cdiv(_bwd_programs_per_sm(probe, meta) * num_sms(dev), plan.n_cb)))


def backward(dy, ds, x, weight, *, mode: int, eps: float, images: bool = False,
             scalar_weight: bool = False, bias_dtype: torch.dtype | None = None, need_dw: bool = True):
    """dx (+ ds when given) and the parameter gradients (dγ or dg, dβ; None where absent or not needed), each in
    its parameter's dtype (``bias_dtype``: the bias's, None without one). The statistics are computed again from x,
    with ``eps``."""
    has_bias = bias_dtype is not None
    key = (x.shape, x.dtype, x.device, dy.dtype, None if ds is None else ds.dtype,
           None if weight is None else weight.dtype, mode, images, scalar_weight, bias_dtype, need_dw,
           MAX_FUSED_C_BWD, WIDE_CHUNK, WIDE_BWD)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        plan = _BWD_PLANS[key] = _bwd_plan(dy, ds, x, weight, mode=mode, images=images,
                                           scalar_weight=scalar_weight, has_bias=has_bias, need_dw=need_dw)
    dx = torch.empty_like(x)
    need_dw, has_w, C = plan.need_dw, plan.has_w, plan.C
    if plan.path == "empty":
        db = torch.zeros(C, dtype=bias_dtype, device=x.device) if has_bias else None
        return dx, None if weight is None else torch.zeros_like(weight), db
    P, M, dw, db = plan.P, plan.M, None, None
    # the kernels' gradient pointers and offsets: the gradients themselves (one program), or regions of one buffer;
    # x stands in for the pointers a configuration never reads
    dwp = dbp = dswp = x
    row = b_off = sw_off = 0
    if need_dw:
        dw = torch.empty_like(weight) if weight is not None else None
        db = torch.empty(C, device=x.device, dtype=bias_dtype) if has_bias else None
        if plan.direct:
            dwp, dbp, dswp = dw if has_w else x, db if has_bias else x, dw if scalar_weight else x
        else:
            dwp = dbp = dswp = part = torch.empty(plan.part_size, device=x.device, dtype=torch.float32)
            row, b_off, sw_off = plan.nv * C, C if has_w else 0, P * plan.nv * C
    w, dsx, steps = weight if weight is not None else x, ds if ds is not None else x, plan.steps
    if plan.path == "fused3":
        args = (x, w, dy, dsx, dx, dwp, dbp, dswp, M, C, row, b_off, sw_off, eps)
        if steps is None:
            plan.steps = (first_launch(None, _row_bwd_wide_kernel, lambda META: (P,), args,
                                       dict(MODE=mode, HAS_W=has_w, HAS_B=has_bias, SCALAR_W=scalar_weight,
                                            HAS_DS=ds is not None, COMPUTE_DW=need_dw, BLOCK_C=WIDE_CHUNK,
                                            num_warps=8)),)
        else:
            steps[0](*args)
    else:
        # wide rows: each row's statistics and reductions (aux, rstd, c1, c2) in one float32 buffer
        coef = torch.empty(4 * M, device=x.device, dtype=torch.float32) if plan.wide else x
        args = (x, w, dy, dsx, dx, coef, dwp, dbp, dswp, M, C, plan.HW, plan.n_tiles, row, b_off, sw_off, eps)
        coef_args = (x, w, dy, coef, M, C, eps)
        if steps is not None:
            if plan.wide:
                steps[1](*coef_args)
            steps[0](*args)
        else:
            first = None
            if plan.wide:
                first = first_launch(None, _row_coef_kernel, lambda META: (M,), coef_args,
                                     dict(MODE=mode, HAS_W=has_w, SCALAR_W=scalar_weight, BLOCK_C=WIDE_CHUNK,
                                          num_warps=8))
            meta = plan.meta
            if _row_bwd_tuned is None:
                meta = dict(meta, num_warps=_bwd_warps(meta))
            n_cb = plan.n_cb
            plan.steps = (first_launch(_row_bwd_tuned, _row_bwd_kernel, lambda META: (P, n_cb), args, meta), first)
    if plan.sums is not None:
        vec = (dw, db) if has_w and has_bias else (dw,) if has_w else (db,) if has_bias else ()
        plan.sums(part, vec, (dw,) if scalar_weight else ())
    return dx, dw, db
