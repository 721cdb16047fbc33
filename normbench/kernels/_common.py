"""Shared Triton plumbing: interpreter detection and its numpy fix, device facts, block-size and autotune helpers,
and the launch plans (one ``Launch`` per kernel, its parameters fixed per shape, dtype and device)."""

from __future__ import annotations

import inspect
import os

import torch
import triton
import triton.language as tl

from . import _env
from ._env import INTERPRET_ENV, interpret_requested

#: Fixed when this module is imported, i.e. before any kernel module decorates its kernels.
INTERPRET = interpret_requested()


def _fix_interpreter_index() -> None:
    """Let loop bounds that are kernel arguments work in Triton's interpreter under numpy >= 2.4.

    Triton 3.6's interpreter turns a scalar into an int with ``int(ndarray_of_shape_1)``, which numpy 2.4 made a
    TypeError, so ``for t in range(pid, n, step)`` fails (triton-lang/triton#9171, fixed upstream with
    ``squeeze()``). We re-register ``__index__`` the fixed way each time the interpreter patches ``tl.tensor``.
    """
    import numpy as np

    try:
        int(np.zeros(1, dtype=np.int32))
        return  # this numpy still converts size-1 arrays: nothing to fix
    except TypeError:
        pass
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_normbench_index_fix", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._normbench_index_fix = True
    interpreter._patch_lang_tensor = patched


if INTERPRET:
    _fix_interpreter_index()


def check_tensor(x: torch.Tensor, what: str = "input") -> None:
    """Raise a clear error when ``x`` cannot go through the kernels in this process (called when a launch plan is
    made, i.e. once per shape, dtype and device: the plan's key holds all this check reads of ``x``)."""
    if interpret_requested() != INTERPRET:
        raise RuntimeError(
            f"{INTERPRET_ENV} changed after normbench's Triton kernels were imported (they were built for "
            f"{'the interpreter' if INTERPRET else 'the GPU'}); set it before the first use of the triton backend")
    if not INTERPRET and x.device.type not in _env.launcher().devices:
        raise RuntimeError(
            f"the triton backend needs CUDA tensors, got a {what} on {x.device}; move the module and inputs to the "
            f"GPU, use backend='eager', or set {INTERPRET_ENV}=1 to run the kernels slowly on the CPU")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"the triton backend computes in float32 and supports float32, float16 and bfloat16 "
                        f"inputs, got {x.dtype}; use backend='eager' for {x.dtype}")


_PROPS = _env.plan_cache()


def device_properties(device: torch.device):
    """The launcher's ``get_device_properties`` of ``device``, asked once per device (and launcher)."""
    props = _PROPS.get(device)
    if props is None:
        index = device.index
        if index is None:
            index = torch.cuda.current_device() if device.type == "cuda" else 0
        props = _PROPS[device] = _env.launcher().device_properties(torch.device(device.type, index))
    return props


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors on ``device``: sizes the persistent grids of the backward kernels.

    The interpreter gets 2 so that the small test shapes still give each program several row tiles; CPU tensors
    outside it (a stub launcher) get the launcher's device properties of device 0.
    """
    if INTERPRET:
        return 2
    return device_properties(device).multi_processor_count


def l2_bytes(device: torch.device) -> int:
    """L2 cache bytes of ``device`` (the interpreter: unbounded, it has no cache to overflow)."""
    if INTERPRET:
        return 1 << 62
    return int(getattr(device_properties(device), "L2_cache_size", 0) or 0)


def next_pow2(n: int) -> int:
    """``triton.next_power_of_2`` in plain Python (Triton 3.6's is a ``ConstexprFunction``, ~3 µs a call)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0

#: Per-SM limits of Hopper (sm_90; Ampere's sm_80 has the same but 164 KiB of shared memory).
SM_MAX_THREADS = 2048
SM_REGISTERS = 65536
SM_MAX_BLOCKS = 32
SM_SHARED_BYTES = 228 * 1024


def programs_per_sm(num_warps: int, regs_per_thread: int, shared_bytes: int = 0, *,
                    max_threads: int = SM_MAX_THREADS, registers: int = SM_REGISTERS,
                    max_blocks: int = SM_MAX_BLOCKS, shared_per_sm: int = SM_SHARED_BYTES) -> int:
    """How many programs of a compiled kernel one SM holds at once (its occupancy), from threads, registers and
    shared memory: the persistent grids launch that many per SM, so every SM is full and none waits for a
    second wave. Registers are allocated per warp in units of 256; ``regs_per_thread`` 0 means unknown (threads
    alone then decide)."""
    threads = 32 * num_warps
    by_threads = max_threads // threads
    if regs_per_thread > 0:
        per_warp = -(-regs_per_thread * 32 // 256) * 256
        by_regs = registers // (per_warp * num_warps)
    else:
        by_regs = by_threads
    by_shared = shared_per_sm // shared_bytes if shared_bytes > 0 else max_blocks
    return max(1, min(by_threads, by_regs, by_shared, max_blocks))


_OCCUPANCY: dict = _env.plan_cache()


def compiled_occupancy(kernel, args, meta: dict, num_warps: int, key) -> int | None:
    """Programs per SM of ``kernel`` compiled for ``args``/``meta`` (compiles it without launching, once per
    ``key``); ``None`` in the interpreter or where the compiled kernel does not report its registers."""
    if INTERPRET:
        return None
    if key in _OCCUPANCY:
        return _OCCUPANCY[key]
    occ = None
    compiled = _env.launcher().compile(kernel, args, dict(meta, num_warps=num_warps))
    try:
        if compiled is not None:
            occ = programs_per_sm(num_warps, int(compiled.n_regs),
                                  int(getattr(compiled.metadata, "shared", 0) or 0))
    except (AttributeError, TypeError, ValueError):  # a Triton whose compiled kernel lacks n_regs: fixed grid
        occ = None
    _OCCUPANCY[key] = occ
    return occ


class Launch:
    """One kernel's launch with everything but its arguments fixed (grid, block sizes, warps: a launch plan's
    part); calling it launches through the current launcher (``_env.Launcher``), the hook tests stub."""

    __slots__ = ("kernel", "grid", "kwargs")

    def __init__(self, kernel, grid: tuple, kwargs: dict):
        self.kernel, self.grid, self.kwargs = kernel, grid, kwargs

    def __call__(self, *args) -> None:
        _env._LAUNCHER.launch(self.kernel, self.grid, args, self.kwargs)

    def __repr__(self) -> str:
        return f"Launch({getattr(self.kernel, '__name__', self.kernel)}, grid={self.grid}, {self.kwargs})"


def first_launch(tuner, kernel, grid_of, args, meta: dict, heuristics: dict | None = None) -> Launch:
    """Launch ``args`` once and return the ``Launch`` that repeats it: through ``tuner`` (a ``triton.autotune``
    launcher, which times its configurations for a new key) when autotuning is on, then directly on ``kernel``
    with the chosen configuration, so later calls pay no autotuner, heuristics or pruning; without a tuner,
    directly with ``meta`` (which then holds the block sizes and warps). ``grid_of(meta)`` gives the grid;
    ``heuristics`` are the tuner's ``triton.heuristics`` (name → function of the named arguments)."""
    if tuner is None:
        step = Launch(kernel, grid_of(meta), meta)
        step(*args)
        return step
    config = _env.launcher().tune(tuner, grid_of, args, meta)
    kwargs = {**meta, **config.all_kwargs()}
    if heuristics:
        named = {**dict(zip(kernel.arg_names, args)), **kwargs}
        for name, rule in heuristics.items():
            kwargs[name] = named[name] = rule(named)
    return Launch(kernel, grid_of(kwargs), kwargs)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------------------------
# The last step of a backward: the per-program partial sums of the parameter gradients, summed and cast to the
# parameters' dtypes by one launch (instead of a sum and a cast per parameter: two ATen ops each, several µs of host
# time apiece on a GPU). All partials of a call live in one float32 buffer: the vector ones as a [P, K] matrix
# (K = NV·C: dγ in columns 0..C-1, dβ in C..2C-1), then the scalar ones (dα, ds, a scalar gain), S of each.
# ---------------------------------------------------------------------------------------------------------------
@triton.jit
def _sum_parts_kernel(PART, OV0, OV1, OS0, OS1, P, C, K, SOFF, S, N_VB,
                      NV: tl.constexpr, NS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """Programs 0..N_VB-1: one column block of the NV vector sums (over the P rows of PART as [P, K]) each;
    program N_VB (when NS > 0): the NS scalar sums of the S values each at PART + SOFF. A fixed order of
    additions (a float32 tile per program, then a tree sum), so the result is the same on every run."""
    pid = tl.program_id(0)
    if pid < N_VB:
        if NV > 0:
            cols = pid * BLOCK_C + tl.arange(0, BLOCK_C)
            cmask = cols < C
            acc0 = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
            acc1 = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
            for p0 in range(0, P, BLOCK_P):
                rows = p0 + tl.arange(0, BLOCK_P)
                mask = (rows < P)[:, None] & cmask[None, :]
                offs = rows.to(tl.int64)[:, None] * K + cols[None, :]
                acc0 += tl.load(PART + offs, mask=mask, other=0.0)
                if NV == 2:
                    acc1 += tl.load(PART + C + offs, mask=mask, other=0.0)
            tl.store(OV0 + cols, tl.sum(acc0, axis=0).to(OV0.dtype.element_ty), mask=cmask)
            if NV == 2:
                tl.store(OV1 + cols, tl.sum(acc1, axis=0).to(OV1.dtype.element_ty), mask=cmask)
    else:
        if NS > 0:
            idx = tl.arange(0, BLOCK_C)
            a0 = tl.zeros([BLOCK_C], dtype=tl.float32)
            a1 = tl.zeros([BLOCK_C], dtype=tl.float32)
            for s0 in range(0, S, BLOCK_C):
                m = s0 + idx < S
                a0 += tl.load(PART + SOFF + s0 + idx, mask=m, other=0.0)
                if NS == 2:
                    a1 += tl.load(PART + SOFF + S + s0 + idx, mask=m, other=0.0)
            tl.store(OS0, tl.sum(a0, axis=0).to(OS0.dtype.element_ty))
            if NS == 2:
                tl.store(OS1, tl.sum(a1, axis=0).to(OS1.dtype.element_ty))


class Plan:
    """A row-wise launch plan (``_rownorm``): what a call decides from its shape, dtypes and device, kept per key."""

    __slots__ = ("M", "C", "HW", "wide", "steps", "need_dw", "has_w", "P", "n_cb", "meta", "n_tiles", "path",
                 "direct", "sums", "nv", "part_size")

    def __init__(self, **kw):
        self.steps = self.sums = None
        self.direct = False
        for k, v in kw.items():
            setattr(self, k, v)


class SumParts:
    """The final sums of one launch plan: ``sums(part, outs_v, outs_s)`` sums the partials in ``part`` (P rows of
    the vector outputs' columns, then S partials per scalar output) into ``outs_v`` (0-2 tensors of C) and
    ``outs_s`` (0-2 one-element tensors), each in its own dtype; one launch, its parameters fixed at the first."""

    __slots__ = ("P", "C", "S", "n_vb", "step")

    def __init__(self, P: int, C: int, S: int):
        self.P, self.C, self.S, self.n_vb, self.step = P, C, S, 0, None

    def __call__(self, part, outs_v, outs_s) -> None:
        P, C = self.P, self.C
        if self.step is not None:
            self.step(*self._args(part, outs_v, outs_s))
            return
        nv, ns = len(outs_v), len(outs_s)
        # about one column block per SM (each reads its P rows), 4096 partials per tile
        block_c = max(16, min(256, next_pow2(cdiv(C, num_sms(part.device))))) if nv else 16
        block_p = max(1, min(next_pow2(max(P, 1)), 4096 // block_c))
        self.n_vb = cdiv(C, block_c) if nv else 0
        grid = (self.n_vb + (1 if ns else 0),)
        meta = dict(NV=nv, NS=ns, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps_for(block_p * block_c, 8, 1, 8))
        self.step = first_launch(None, _sum_parts_kernel, lambda META: grid, self._args(part, outs_v, outs_s), meta)

    def _args(self, part, outs_v, outs_s) -> tuple:
        ov = (*outs_v, part, part)  # an absent output points at ``part``: the kernel never writes it
        os_ = (*outs_s, part, part)
        K = len(outs_v) * self.C
        return (part, ov[0], ov[1], os_[0], os_[1], self.P, self.C, K, self.P * K, self.S, self.n_vb)


def col_block(n: int, largest: int = 1024, smallest: int = 64) -> int:
    """Power-of-two block over a dimension of length ``n``: the largest one that pads by at most 1/16.

    A pointwise kernel is bandwidth-bound; lanes past the end load nothing, so padding costs parallelism, not
    bytes. 3136 (56x56) → 64, 768 → 256, 4096 → 1024.
    """
    if n <= smallest:
        return next_pow2(n)
    b = min(largest, next_pow2(n))
    while b > smallest and cdiv(n, b) * b - n > n / 16:
        b //= 2
    return b


_AUTOTUNE_HAS_CACHE = "cache_results" in inspect.signature(triton.autotune).parameters

#: Set to 0 to launch every kernel with its heuristic block sizes and warps, without timing alternatives.
AUTOTUNE_ENV = "NORMBENCH_TRITON_AUTOTUNE"


def autotune_enabled() -> bool:
    """Autotuning runs on the GPU only: the interpreter has nothing to time, so it uses the heuristics."""
    return not INTERPRET and os.environ.get(AUTOTUNE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def tuned(kernel, configs, key, prune=None, heuristics=None):
    """An autotuned launcher for ``kernel``, or None when autotuning is off (the caller then uses its heuristics).

    Tuned choices are cached per ``key`` (plus argument dtypes) and, where Triton supports it, on disk, so a
    benchmark sweep that restarts pays for each shape once.
    """
    if not autotune_enabled():
        return None
    fn = triton.heuristics(heuristics)(kernel) if heuristics else kernel
    kwargs = {"prune_configs_by": {"early_config_prune": prune}} if prune is not None else {}
    if _AUTOTUNE_HAS_CACHE:
        kwargs["cache_results"] = True
    return triton.autotune(configs=configs, key=key, **kwargs)(fn)


def warps_for(elements: int, per_thread: int, lo: int = 1, hi: int = 32) -> int:
    """Power-of-two warp count giving each thread about ``per_thread`` of ``elements``."""
    w = max(lo, min(hi, elements // (32 * per_thread)))
    return 1 << (w.bit_length() - 1)


def prune_by_elements_per_thread(tile_of, lo: int = 4, hi: int = 32):
    """An ``early_config_prune`` keeping configs whose tile gives each thread ``lo``..``hi`` elements.

    ``tile_of(config, args)`` returns the elements one program holds per live tensor. Fewer than ``lo`` per thread
    wastes threads; more than ``hi`` spills registers. Duplicates (same effective tile and warps) are dropped so
    autotuning times each real choice once.
    """

    def prune(configs, named_args, **kwargs):
        args = {**named_args, **kwargs}
        seen, keep = set(), []
        for cfg in configs:
            tile = tile_of(cfg, args)
            per_thread = tile / (32 * cfg.num_warps)
            sig = (tile, cfg.num_warps)
            if lo <= per_thread <= hi and sig not in seen:
                seen.add(sig)
                keep.append(cfg)
        if not keep:  # tiny tiles: fewest warps
            keep = [min(configs, key=lambda c: c.num_warps)]
        return keep

    return prune
