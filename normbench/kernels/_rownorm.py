"""Fused Triton kernels for the row-wise norms: LayerNorm, RMSNorm, CRMSNorm, SRMSNorm, ScaleNorm, residual variants.

One kernel family serves every mode; ``MODE`` picks the statistic (``_rowmath._stats``: the device functions the
kernels share live there), a few flags the affine part.
Layouts: tokens ``[M, C]`` (rows contiguous) and images ``[N, C, H, W]`` normalised per pixel over C, read in
place with a channel stride of H·W (``IMAGES``), so no permute copy is needed when C is at most ``MAX_IMAGES_C``.

Paths (docs/kernels.md has the details and byte counts):
* fused: a row fits one block (C ≤ ``MAX_FUSED_C``). Forward reads x once, writes y and float32 (aux, rstd) per
  row. Backward is persistent: ``P`` programs walk row tiles, write dx, keep dγ/dβ partial sums in registers and
  store one partial row each, summed by one more launch (``_common.SumParts``; no atomics).
* wide: C > ``MAX_FUSED_C``: a per-row statistics kernel, then the tile kernel column-blocked. The wide backward
  (C > ``MAX_FUSED_C_BWD``) is one persistent kernel (``_row_bwd_wide_kernel``, three HBM passes; a row's second
  read comes from L2), or the two-kernel path (five) where its rows would not fit ``WIDE_L2_SHARE`` of the L2.

Saved for backward: x (or the residual sum s). Where the backward's tile holds whole rows (C ≤ ``MAX_FUSED_C_BWD``)
it computes each row's statistics again from x, so the forward allocates and writes none (a register reduction in
the backward instead of an allocation and 8 bytes a row each way, and one host-side allocation fewer per call).
Wider rows keep per row ``aux`` and ``rstd`` in float32: ``aux`` is the mean for LayerNorm, Σx for CRMSNorm, 1/0
(norm ≥ ε or clamped) for ScaleNorm, and unused (0) for RMSNorm.
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
from ._rowmath import _coef, _coef_of, _dx, _stats, _tile, _xhat

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
def _row_fwd_kernel(X, R, W, B, Y, S, AUX, RSTD, M, C, HW, eps,
                    MODE: tl.constexpr, IMAGES: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
                    HAS_B: tl.constexpr, SCALAR_W: tl.constexpr, HAS_STATS: tl.constexpr, STORE_STATS: tl.constexpr,
                    TILE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    offs, mask, rmask, srow = _tile(tl.program_id(0), M, C, HW, cols, IMAGES, BLOCK_R)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        # Normalise the sum as stored (rounded to the input dtype), which is what the caller gets back as s.
        s = (x + tl.load(R + offs, mask=mask, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + offs, s, mask=mask)
        x = s.to(tl.float32)
    if HAS_STATS:
        aux = tl.load(AUX + srow, mask=rmask, other=0.0)
        rstd = tl.load(RSTD + srow, mask=rmask, other=0.0)
    else:
        aux, rstd = _stats(x, mask, C, eps, MODE)
        if STORE_STATS:
            if MODE != 1:  # RMSNorm has no aux statistic: its caller passes rstd for both
                tl.store(AUX + srow, aux, mask=rmask)
            tl.store(RSTD + srow, rstd, mask=rmask)
    y = _xhat(x, aux, rstd, MODE)
    if HAS_W:
        y = y * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if SCALAR_W:
        y = y * tl.load(W).to(tl.float32)
    if HAS_B:
        y = y + tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _row_stats_kernel(X, R, S, AUX, RSTD, C, eps,
                      MODE: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows: one program per row loops over it once for the statistics (and writes s = x + r)."""
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
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
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
    if MODE != 1:
        tl.store(AUX + row, aux)
    tl.store(RSTD + row, rstd)


@triton.jit
def _row_coef_kernel(X, W, DY, AUX, RSTD, C1, C2, C,
                     MODE: tl.constexpr, HAS_W: tl.constexpr, SCALAR_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows: one program per row loops over it once for the backward's two row reductions."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    aux = tl.load(AUX + row)
    rstd = tl.load(RSTD + row)
    acc_gx = tl.zeros([BLOCK_C], dtype=tl.float32)
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
        if MODE == 0:
            xh = (x - aux) * rstd
        else:
            xh = x * rstd
        acc_gx += g * xh
        acc_g += g
    c1, c2 = _coef_of(tl.sum(acc_gx, axis=0), tl.sum(acc_g, axis=0), aux, C, MODE)
    tl.store(C1 + row, c1)
    tl.store(C2 + row, c2)


@triton.jit
def _row_bwd_kernel(X, W, DY, DS, DX, AUX, RSTD, C1, C2, DW_PART, DB_PART, DSW_PART, M, C, HW, n_tiles,
                    PART_ROW, B_OFF, SW_OFF, eps,
                    MODE: tl.constexpr, IMAGES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    SCALAR_W: tl.constexpr, HAS_DS: tl.constexpr, HAS_COEF: tl.constexpr, COMPUTE_DW: tl.constexpr,
                    RECOMPUTE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Persistent: program (p, cb) takes row tiles p, p+P, ... of column block cb; partial dγ/dβ per program at row
    p (``PART_ROW`` apart) of DW_PART, DB_PART + B_OFF, dg's at DSW_PART + SW_OFF (one program: the gradients).
    ``RECOMPUTE``: the tile holds whole rows, and each row's statistics are computed again from x (as the forward
    did, ``_stats``) instead of read from AUX and RSTD, which the forward then never allocates or writes."""
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
        if RECOMPUTE:
            aux, rstd = _stats(x, mask, C, eps, MODE)
        else:
            aux = tl.load(AUX + srow, mask=rmask, other=0.0)
            rstd = tl.load(RSTD + srow, mask=rmask, other=0.0)
        xh = _xhat(x, aux, rstd, MODE)
        if HAS_W:
            g = dy * w
        elif SCALAR_W:
            g = dy * sw
        else:
            g = dy
        if HAS_COEF:
            c1 = tl.load(C1 + srow, mask=rmask, other=0.0)
            c2 = tl.load(C2 + srow, mask=rmask, other=0.0)
        else:
            c1, c2 = _coef(g, xh, aux, C, MODE)
        dx = _dx(g, xh, aux, rstd, c1, c2, MODE)
        if HAS_DS:
            dx += tl.load(DS + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)
        if COMPUTE_DW:
            acc_w += dy * xh  # dy is 0 outside the tile, so padding adds nothing
            if HAS_B:
                acc_b += dy
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
    _row_fwd_kernel, _FWD_CONFIGS, key=["M", "BLOCK_C", "MODE", "IMAGES", "HAS_RES", "HAS_STATS"],
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
def _row_bwd_wide_kernel(X, W, DY, DS, DX, AUX, RSTD, DW_PART, DB_PART, DSW_PART, M, C, PART_ROW, B_OFF, SW_OFF,
                         MODE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, SCALAR_W: tl.constexpr,
                         HAS_DS: tl.constexpr, COMPUTE_DW: tl.constexpr, BLOCK_C: tl.constexpr):
    """Wide rows, persistent: program p takes rows p, p+P, ...; per row one pass for the reductions, one (from L2)
    for dx; dγ/dβ add up in its row of DW_PART, DB_PART + B_OFF (its first row writes them), dg at + SW_OFF."""
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    if SCALAR_W:
        sw = tl.load(W).to(tl.float32)
    acc_sw = tl.zeros([1], dtype=tl.float32)
    for row in range(pid, M, n_progs):
        base = (row + 0 * pid).to(tl.int64) * C  # a tensor in the interpreter too (its loop variable is an int)
        later = (row + 0 * pid) > pid  # not this program's first row: add to its partial sums
        aux = tl.load(AUX + row + tl.zeros([1], dtype=tl.int32))
        rstd = tl.load(RSTD + row + tl.zeros([1], dtype=tl.int32))
        gx = tl.zeros([1], dtype=tl.float32)
        gs = tl.zeros([1], dtype=tl.float32)
        for c0 in range(0, C, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            mask = (cols < C)[None, :]
            x = tl.load(X + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(DY + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_W:
                g = g * tl.load(W + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
            if SCALAR_W:
                g = g * sw
            xh = tl.where(mask, _xhat(x, aux, rstd, MODE), 0.0)
            gx += tl.sum(g * xh, axis=1)
            gs += tl.sum(g, axis=1)
        c1, c2 = _coef_of(gx, gs, aux, C, MODE)
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


def keeps_stats(C: int, images: bool) -> bool:
    """Whether a backward of rows of C needs the forward's statistics: only the wide backward (C >
    ``MAX_FUSED_C_BWD``), whose tiles do not hold whole rows; the fused one recomputes them."""
    return _wide(C, images, MAX_FUSED_C_BWD)


# ---------------------------------------------------------------------------------------------------------------
# Launch plans. Everything a call decides from its shape, dtypes and device (path, grid, block sizes, warps, the
# autotuner's choice) is decided once per key and kept: a later call allocates its outputs and launches. The
# module-level limits are in the keys, so a test that changes one gets a fresh plan.
# ---------------------------------------------------------------------------------------------------------------
_FWD_PLANS = plan_cache()
_BWD_PLANS = plan_cache()


def forward(x, residual, weight, bias, mode: int, eps: float, images: bool = False, scalar_weight: bool = False,
            store_stats: bool = True):
    """y (and s = x + residual) for contiguous ``x``; returns (y, s or None, aux, rstd). The statistics are kept only
    when ``store_stats`` and the backward cannot recompute them (``keeps_stats``): else both are None. RMSNorm has
    no ``aux`` (its backward does not read it): ``aux`` is then ``rstd``. (Positional arguments: this runs on every
    call, and keywords cost host time.)"""
    key = (x.shape, x.dtype, x.device, mode, images, scalar_weight, store_stats,
           None if residual is None else residual.dtype, None if weight is None else weight.dtype,
           None if bias is None else bias.dtype, MAX_FUSED_C, MAX_FUSED_C_BWD, MAX_IMAGES_C, WIDE_CHUNK)
    plan = _FWD_PLANS.get(key)
    if plan is not None and plan.lean:  # the common call: planned, one fused launch, no statistics kept
        y = torch.empty_like(x)
        w = weight if weight is not None else x
        b = bias if bias is not None else x
        if residual is None:
            plan.steps[0](x, x, w, b, y, x, x, x, plan.M, plan.C, plan.HW, eps)
            return y, None, None, None
        s = torch.empty_like(x)
        plan.steps[0](x, residual, w, b, y, s, x, x, plan.M, plan.C, plan.HW, eps)
        return y, s, None, None
    if plan is None:
        check_tensor(x)
        if residual is not None:
            check_tensor(residual, "residual")
        M, C, HW = _geometry(x, images)
        if images and next_pow2(C) > MAX_IMAGES_C:
            raise ValueError(f"images kernel takes C <= {MAX_IMAGES_C}; the caller permutes wider inputs to "
                             "channels-last")
        wide = _wide(C, images, MAX_FUSED_C)
        plan = _FWD_PLANS[key] = Plan(M=M, C=C, HW=HW, wide=wide,
                                      keep=wide or (store_stats and keeps_stats(C, images)))
    M = plan.M
    y = torch.empty_like(x)
    s = torch.empty_like(x) if residual is not None else None
    aux = rstd = None
    if plan.keep:
        rstd = torch.empty(M, device=x.device, dtype=torch.float32)
        aux = rstd if mode == RMSNORM else torch.empty(M, device=x.device, dtype=torch.float32)
    if M == 0:
        return y, s, aux, rstd
    w = weight if weight is not None else x
    b = bias if bias is not None else x
    r = residual if residual is not None else x
    steps = plan.steps
    if not plan.wide:
        st = rstd if rstd is not None else x
        args = (x, r, w, b, y, s if s is not None else x, aux if aux is not None else x, st, M, plan.C, plan.HW, eps)
        if steps is not None:
            steps[0](*args)
            return y, s, aux, rstd
        C, HW = plan.C, plan.HW
        meta = _fwd_meta(M, HW, MODE=mode, IMAGES=images, HAS_W=weight is not None and not scalar_weight,
                         HAS_B=bias is not None, SCALAR_W=scalar_weight, HAS_RES=residual is not None,
                         HAS_STATS=False, STORE_STATS=plan.keep, BLOCK_C=next_pow2(C))
        if images:
            N = M // HW
            grid_of = lambda META: (N * cdiv(HW, META["BLOCK_R"]), 1)  # noqa: E731
        else:
            grid_of = lambda META: (cdiv(M, META["BLOCK_R"]), 1)  # noqa: E731
        plan.steps = (first_launch(_row_fwd_tuned, _row_fwd_kernel, grid_of, args, meta, _FWD_HEURISTICS),)
        # later calls take the lean path at the top (the same arguments, with placeholders for the statistics)
        plan.lean = not plan.keep
        return y, s, aux, rstd
    # wide rows: a statistics pass, then the tile kernel column-blocked over the stored statistics
    src = s if s is not None else x
    stats_args = (x, r, src, aux, rstd, plan.C, eps)
    tile_args = (src, src, w, b, y, src, aux, rstd, M, plan.C, plan.HW, eps)
    if steps is not None:
        steps[0](*stats_args)
        steps[1](*tile_args)
        return y, s, aux, rstd
    C = plan.C
    stats = first_launch(None, _row_stats_kernel, lambda META: (M,), stats_args,
                         dict(MODE=mode, HAS_RES=residual is not None, BLOCK_C=WIDE_CHUNK, num_warps=8))
    meta = _fwd_meta(M, plan.HW, MODE=mode, IMAGES=images, HAS_W=weight is not None and not scalar_weight,
                     HAS_B=bias is not None, SCALAR_W=scalar_weight, HAS_RES=False, HAS_STATS=True,
                     STORE_STATS=False, BLOCK_C=WIDE_CHUNK)
    tile = first_launch(_row_fwd_tuned, _row_fwd_kernel, lambda META: (cdiv(M, META["BLOCK_R"]), cdiv(C, WIDE_CHUNK)),
                        tile_args, meta, _FWD_HEURISTICS)
    plan.steps = (stats, tile)
    return y, s, aux, rstd


def _bwd_plan(dy, ds, x, weight, aux, rstd, *, mode, images, scalar_weight, has_bias, need_dw) -> Plan:
    check_tensor(dy, "gradient")
    M, C, HW = _geometry(x, images)
    if rstd is None and keeps_stats(C, images):
        raise RuntimeError(f"the backward of rows of {C} needs the forward's statistics (MAX_FUSED_C_BWD = "
                           f"{MAX_FUSED_C_BWD} changed between the forward and the backward?)")
    has_w = weight is not None and not scalar_weight
    need_dw = need_dw and (weight is not None or has_bias)
    plan = Plan(M=M, C=C, HW=HW, has_w=has_w, need_dw=need_dw, path="empty" if x.numel() == 0 else "tile",
                recompute=rstd is None)
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
        _tile_grid(plan, dy, ds, x, weight, aux, rstd, mode, images, scalar_weight, has_bias)
    # One program (per column block) writes the gradients themselves, in the parameters' dtypes; otherwise one
    # float32 buffer holds every partial sum (``_common.SumParts``), summed by one more launch.
    plan.direct = plan.path == "tile" and plan.P * plan.n_cb == 1
    if need_dw and not plan.direct:
        n_scalar = plan.P * plan.n_cb if scalar_weight else 0
        plan.part_size, plan.sums = plan.P * plan.nv * C + n_scalar, SumParts(plan.P, C, n_scalar)
    return plan


def _tile_grid(plan, dy, ds, x, weight, aux, rstd, mode, images, scalar_weight, has_bias) -> None:
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
                HAS_DS=ds is not None, HAS_COEF=wide, COMPUTE_DW=need_dw, RECOMPUTE=plan.recompute,
                BLOCK_R=block_r, BLOCK_C=block_c)
    ph = aux if aux is not None else x  # placeholder of the pointers a configuration never reads (as in backward())
    probe = (x, weight if weight is not None else x, dy, ds if ds is not None else x, x, ph, ph, ph, ph,
             ph, ph, ph, M, C, HW, n_tiles, C, C, C, 1e-5)
    plan.n_cb, plan.meta, plan.n_tiles = cdiv(C, block_c), meta, n_tiles
    plan.P = max(1, min(n_tiles, cdiv(_bwd_programs_per_sm(probe, meta) * num_sms(dev), plan.n_cb)))


def backward(dy, ds, x, weight, aux, rstd, *, mode: int, eps: float, images: bool = False,
             scalar_weight: bool = False, bias_dtype: torch.dtype | None = None, need_dw: bool = True):
    """dx (+ ds when given) and the parameter gradients (dγ or dg, dβ; None where absent or not needed), each in
    its parameter's dtype (``bias_dtype``: the bias's, None without one). ``aux`` and ``rstd`` are the forward's
    statistics, or None where it kept none (the kernel then computes them again from x, with ``eps``)."""
    has_bias = bias_dtype is not None
    key = (x.shape, x.dtype, x.device, dy.dtype, None if ds is None else ds.dtype,
           None if weight is None else weight.dtype, mode, images, scalar_weight, bias_dtype, need_dw,
           rstd is None, MAX_FUSED_C_BWD, WIDE_CHUNK, WIDE_BWD)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        plan = _BWD_PLANS[key] = _bwd_plan(dy, ds, x, weight, aux, rstd, mode=mode, images=images,
                                           scalar_weight=scalar_weight, has_bias=has_bias, need_dw=need_dw)
    dx = torch.empty_like(x)
    need_dw, has_w, C = plan.need_dw, plan.has_w, plan.C
    if plan.path == "empty":
        db = torch.zeros(C, dtype=bias_dtype, device=x.device) if has_bias else None
        return dx, None if weight is None else torch.zeros_like(weight), db
    P, M, dw, db = plan.P, plan.M, None, None
    # the kernels' gradient pointers and offsets: the gradients themselves (one program), or regions of one buffer
    ph = aux if aux is not None else x  # placeholder of the pointers a configuration never reads
    if aux is None:
        aux = rstd = ph
    dwp = dbp = dswp = ph
    row = b_off = sw_off = 0
    if need_dw:
        dw = torch.empty_like(weight) if weight is not None else None
        db = torch.empty(C, device=x.device, dtype=bias_dtype) if has_bias else None
        if plan.direct:
            dwp, dbp, dswp = dw if has_w else ph, db if has_bias else ph, dw if scalar_weight else ph
        else:
            dwp = dbp = dswp = part = torch.empty(plan.part_size, device=x.device, dtype=torch.float32)
            row, b_off, sw_off = plan.nv * C, C if has_w else 0, P * plan.nv * C
    w, dsx, steps = weight if weight is not None else x, ds if ds is not None else x, plan.steps
    if plan.path == "fused3":
        args = (x, w, dy, dsx, dx, aux, rstd, dwp, dbp, dswp, M, C, row, b_off, sw_off)
        if steps is None:
            plan.steps = (first_launch(None, _row_bwd_wide_kernel, lambda META: (P,), args,
                                       dict(MODE=mode, HAS_W=has_w, HAS_B=has_bias, SCALAR_W=scalar_weight,
                                            HAS_DS=ds is not None, COMPUTE_DW=need_dw, BLOCK_C=WIDE_CHUNK,
                                            num_warps=8)),)
        else:
            steps[0](*args)
    else:
        c1 = c2 = ph
        if plan.wide:
            c1, c2 = torch.empty(M, device=x.device, dtype=torch.float32), torch.empty_like(rstd)
        args = (x, w, dy, dsx, dx, aux, rstd, c1, c2, dwp, dbp, dswp, M, C, plan.HW, plan.n_tiles, row, b_off,
                sw_off, eps)
        coef_args = (x, w, dy, aux, rstd, c1, c2, C)
        if steps is not None:
            if plan.wide:
                steps[1](*coef_args)
            steps[0](*args)
        else:
            coef = None
            if plan.wide:
                coef = first_launch(None, _row_coef_kernel, lambda META: (M,), coef_args,
                                    dict(MODE=mode, HAS_W=has_w, SCALAR_W=scalar_weight, BLOCK_C=WIDE_CHUNK,
                                         num_warps=8))
            meta = plan.meta
            if _row_bwd_tuned is None:
                meta = dict(meta, num_warps=_bwd_warps(meta))
            n_cb = plan.n_cb
            plan.steps = (first_launch(_row_bwd_tuned, _row_bwd_kernel, lambda META: (P, n_cb), args, meta), coef)
    if plan.sums is not None:
        vec = (dw, db) if has_w and has_bias else (dw,) if has_w else (db,) if has_bias else ()
        plan.sums(part, vec, (dw,) if scalar_weight else ())
    return dx, dw, db
