"""Triton softmax and log-softmax kernels, forward and backward: three-pass, online two-pass and the paper's two-pass.

A row that fits on chip (C ≤ ``MAX_FUSED_C``) is loaded once into registers by one kernel shared by every
algorithm: max, sum and output from the same registers, one read and one write. Wider rows (vocabulary widths) are
read in ``BLOCK`` chunks by one program per row, and there the algorithms differ in how often the row is read:

* ``THREE_PASS``: max; Σ exp(x − max); write exp(x − max)/Σ. Three reads of x.
* ``ONLINE``: one read keeping a running max m and sum s per lane (s ← s·e^(m−m') + e^(x−m')), lanes combined at
  the end (Milakov & Gimelshein 2018); then the write pass. Two reads.
* ``TWO_PASS``: Dukhan & Ablavatski 2020 (arXiv 2001.04438), Algorithm "Two-Pass": each x is split as
  x = n·ln2 + t with n = round(x·log2 e) and the mantissa m = e^t ∈ [√½, √2]; the sum is kept as a pair
  (m_sum, n_sum) rescaled by exact powers of two (no max pass, no overflow). The write pass recomputes (m, n) and
  outputs m·2^(n−n_sum)/m_sum. Two reads. The split x − n·ln2 uses a three-part Cody–Waite ln2 whose parts have 12
  significant bits, so n·C₁ and n·C₂ are exact for |n| < 2¹² (|x| ≤ ``TWO_PASS_LIMIT``) without relying on FMA. A
  row with a finite |x| above that limit (found in the first pass at no extra read) is finished with max-subtracted
  passes instead, so every input gets the float32-rounded answer; such rows cost a third and fourth read.

Backward (all algorithms): softmax dx = y·(dy − Σ dy·y); log-softmax dx = dy − e^y·Σ dy. From the saved y: fused
rows read y and dy once; wide rows read them twice (the row sum, then dx).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import INTERPRET, Launch, check_tensor, next_pow2, warps_for
from ._env import plan_cache

THREE_PASS, ONLINE, TWO_PASS = 0, 1, 2
ALGORITHMS = {"three_pass": THREE_PASS, "online": ONLINE, "two_pass": TWO_PASS}
#: Widest row (power-of-two block) the forward holds in registers; wider rows loop over ``BLOCK`` chunks.
MAX_FUSED_C = 16384
#: The same for the backward, which holds two row tiles (y and dy).
MAX_FUSED_C_BWD = 8192
#: Chunk of the looped kernels (elements per iteration). Small in the interpreter so tests walk several chunks.
BLOCK = 64 if INTERPRET else 4096
#: Largest |x| the two-pass split handles exactly (|round(x·log2 e)| < 2¹²); rows beyond take max-subtracted passes.
TWO_PASS_LIMIT = 2048.0

LOG2E = 1.4426950408889634
# ln2 = C1 + C2 + C3 with 12 significant bits in C1 and C2 (Cody–Waite): n·C1, n·C2 exact for |n| < 4096.
LN2_C1 = 2839.0 / 4096.0
LN2_C2 = 2144.0 / 67108864.0
LN2_C3 = 0.6931471805599453 - LN2_C1 - LN2_C2


@triton.jit
def _split(x):
    """(m, n) with x = n·ln2 + log m, n = round(x·log2 e); entries equal to −inf get (0, −inf)."""
    n = tl.floor(x * 1.4426950408889634 + 0.5)
    t = x - n * 0.693115234375
    t = t - n * 3.1948089599609375e-05
    t = t - n * -1.904654323148236e-09
    ninf = x == -float("inf")
    m = tl.where(ninf, 0.0, tl.exp(t))
    n = tl.where(ninf, -float("inf"), n)
    return m, n


@triton.jit
def _scale(a, b):
    """2^(a − b) for an exponent a ≤ b, with 2^(−inf − (−inf)) taken as 0 (an empty accumulator)."""
    return tl.where(a == -float("inf"), 0.0, tl.exp2(a - b))


@triton.jit
def _fused_fwd_kernel(X, Y, C, LOG: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    cols = tl.arange(0, BLOCK_C)
    mask = cols < C
    x = tl.load(X + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
    mx = tl.max(x, axis=0)
    e = tl.exp(x - mx)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=0)
    if LOG:
        y = (x - mx) - tl.log(s)
    else:
        y = e / s
    tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _max_sum(X, base, C, BLOCK_C: tl.constexpr):
    """Three-pass statistics: the row max (pass 1), then Σ exp(x − max) (pass 2)."""
    acc = tl.full([BLOCK_C], -float("inf"), tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        x = tl.load(X + base + cols, mask=cols < C, other=-float("inf")).to(tl.float32)
        acc = tl.maximum(acc, x)
    mx = tl.max(acc, axis=0)
    sacc = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        x = tl.load(X + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
        sacc += tl.where(mask, tl.exp(x - mx), 0.0)
    return mx, tl.sum(sacc, axis=0)


@triton.jit
def _write_shifted(X, Y, base, C, mx, s, LOG: tl.constexpr, BLOCK_C: tl.constexpr):
    """The output pass from (max, Σ exp(x − max))."""
    inv = 1.0 / s
    lse = tl.log(s)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        x = tl.load(X + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
        if LOG:
            y = (x - mx) - lse
        else:
            y = tl.exp(x - mx) * inv
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _looped_fwd_kernel(X, Y, C, ALGO: tl.constexpr, LOG: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    if ALGO == 0:
        mx, s = _max_sum(X, base, C, BLOCK_C)
        _write_shifted(X, Y, base, C, mx, s, LOG, BLOCK_C)
    elif ALGO == 1:
        m_acc = tl.full([BLOCK_C], -float("inf"), tl.float32)
        s_acc = tl.zeros([BLOCK_C], tl.float32)
        for c0 in range(0, C, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            x = tl.load(X + base + cols, mask=cols < C, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m_acc, x)
            # A lane that has seen only −inf keeps s = 0 (its e^(−inf − (−inf)) would be NaN).
            alive = m_new > -float("inf")
            s_acc = tl.where(alive, s_acc * tl.exp(m_acc - m_new) + tl.exp(x - m_new), 0.0)
            m_acc = m_new
        mx = tl.max(m_acc, axis=0)
        s = tl.sum(tl.where(m_acc > -float("inf"), s_acc * tl.exp(m_acc - mx), 0.0), axis=0)
        if mx == -float("inf"):
            s = s * float("nan")  # an all −inf row: 0/0, as the reference gives
        _write_shifted(X, Y, base, C, mx, s, LOG, BLOCK_C)
    else:
        n_acc = tl.full([BLOCK_C], -float("inf"), tl.float32)
        m_acc = tl.zeros([BLOCK_C], tl.float32)
        big = tl.zeros([BLOCK_C], tl.float32)
        for c0 in range(0, C, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            x = tl.load(X + base + cols, mask=cols < C, other=-float("inf")).to(tl.float32)
            m, n = _split(x)
            n_new = tl.maximum(n_acc, n)
            m_acc = m_acc * _scale(n_acc, n_new) + m * _scale(n, n_new)
            n_acc = n_new
            ax = tl.abs(x)
            big = tl.maximum(big, tl.where(ax < float("inf"), ax, 0.0))
        n_sum = tl.max(n_acc, axis=0)
        m_sum = tl.sum(m_acc * _scale(n_acc, n_sum), axis=0)
        if tl.max(big, axis=0) > 2048.0:
            # Outside the exact split's range: finish this row with max-subtracted passes.
            mx, s = _max_sum(X, base, C, BLOCK_C)
            _write_shifted(X, Y, base, C, mx, s, LOG, BLOCK_C)
        else:
            if n_sum == -float("inf"):
                m_sum = m_sum * float("nan")  # an all −inf row: 0/0, as the reference gives
            inv = 1.0 / m_sum
            lse = tl.log(m_sum)
            for c0 in range(0, C, BLOCK_C):
                cols = c0 + tl.arange(0, BLOCK_C)
                mask = cols < C
                x = tl.load(X + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
                if LOG:
                    # x − n_sum·ln2 with the exact split, then − log m_sum.
                    y = x - n_sum * 0.693115234375
                    y = y - n_sum * 3.1948089599609375e-05
                    y = y - n_sum * -1.904654323148236e-09
                    y = y - lse
                else:
                    m, n = _split(x)
                    y = m * _scale(n, n_sum) * inv
                tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _fused_bwd_kernel(Yp, DY, DX, C, LOG: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    cols = tl.arange(0, BLOCK_C)
    mask = cols < C
    dy = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
    if LOG:
        y = tl.load(Yp + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
        dx = dy - tl.exp(y) * tl.sum(dy, axis=0)
    else:
        y = tl.load(Yp + base + cols, mask=mask, other=0.0).to(tl.float32)
        dx = y * (dy - tl.sum(dy * y, axis=0))
    tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _looped_bwd_kernel(Yp, DY, DX, C, LOG: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * C
    acc = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        dy = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            acc += dy
        else:
            acc += dy * tl.load(Yp + base + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.sum(acc, axis=0)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = cols < C
        dy = tl.load(DY + base + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = tl.load(Yp + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
            dx = dy - tl.exp(y) * r
        else:
            y = tl.load(Yp + base + cols, mask=mask, other=0.0).to(tl.float32)
            dx = y * (dy - r)
        tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=mask)


def fused(C: int, backward: bool = False, limit: int | None = None) -> bool:
    """Whether a row of C fits the single-read kernel (``limit`` overrides the on-chip width, for tests)."""
    lim = limit if limit is not None else (MAX_FUSED_C_BWD if backward else MAX_FUSED_C)
    return next_pow2(C) <= lim


def row_passes(algo: str, C: int, backward: bool = False, limit: int | None = None) -> int:
    """Reads of each input row the kernels make for a row of C (two-pass rows beyond ``TWO_PASS_LIMIT`` excepted)."""
    if fused(C, backward, limit):
        return 1
    if backward:
        return 2
    return 3 if ALGORITHMS[algo] == THREE_PASS else 2


# Launch plans (as in ``_rownorm``): the kernel, grid and block size are chosen once per shape, dtype, device and
# settings (the module limits included, so a test that changes one gets a fresh plan); a later call allocates its
# output and launches through the launcher (``_env.Launcher``), the hook the host-path tests stub.
_FWD_PLANS = plan_cache()
_BWD_PLANS = plan_cache()
_EMPTY = object()  # the plan of an empty input: nothing to launch


def forward(x: torch.Tensor, algo: str, log: bool, limit: int | None = None, block: int | None = None):
    """y = softmax (or log_softmax) of contiguous ``x`` over its last axis. (Positional arguments: this runs on every
    call, and keywords cost host time.)"""
    key = (x.shape, x.dtype, x.device, algo, log, limit, block, MAX_FUSED_C, BLOCK)
    step = _FWD_PLANS.get(key)
    y = torch.empty_like(x)
    C = x.shape[-1]
    if step is None:
        check_tensor(x)
        M = x.numel() // max(1, C)
        if x.numel() == 0:
            step = _EMPTY
        elif fused(C, False, limit):
            bc = next_pow2(C)
            step = Launch(_fused_fwd_kernel, (M,), dict(LOG=log, BLOCK_C=bc, num_warps=warps_for(bc, 8, 1, 16)))
        else:
            bc = block or BLOCK
            step = Launch(_looped_fwd_kernel, (M,), dict(ALGO=ALGORITHMS[algo], LOG=log, BLOCK_C=bc,
                                                         num_warps=warps_for(bc, 8, 1, 16)))
        _FWD_PLANS[key] = step
    if step is not _EMPTY:
        step(x, y, C)
    return y


def backward(y: torch.Tensor, dy: torch.Tensor, log: bool, *, limit: int | None = None, block: int | None = None):
    """dx from the saved output ``y`` and the output gradient ``dy`` (both contiguous, same shape)."""
    key = (y.shape, y.dtype, y.device, dy.dtype, log, limit, block, MAX_FUSED_C_BWD, BLOCK)
    step = _BWD_PLANS.get(key)
    dx = torch.empty_like(y)
    C = y.shape[-1]
    if step is None:
        check_tensor(dy, "gradient")
        M = y.numel() // max(1, C)
        if y.numel() == 0:
            step = _EMPTY
        else:
            bc = next_pow2(C) if fused(C, True, limit) else (block or BLOCK)
            kernel = _fused_bwd_kernel if fused(C, True, limit) else _looped_bwd_kernel
            step = Launch(kernel, (M,), dict(LOG=log, BLOCK_C=bc, num_warps=warps_for(bc, 8, 1, 16)))
        _BWD_PLANS[key] = step
    if step is not _EMPTY:
        step(y, dy, dx, C)
    return dx
