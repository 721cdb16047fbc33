"""Memory of one pass: peak bytes allocated above what existed before it, and bytes saved for backward.

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus ``memory_allocated`` just
  before the pass (inputs, parameters and, for ``bwd``, the forward's graph are already there).
* A rehearsal's simulated GPU: None (no GPU allocator; the CPU's would be no GPU number).
* CPU: the PyTorch profiler's allocation timeline (``profile_memory=True``): the largest running sum of the
  allocations minus frees made during the pass. It sees eager ops and ``torch.compile``'s buffers alike.
  ``None`` if this torch's profiler cannot produce a timeline.
* Saved for backward: the forward runs under ``torch.autograd.graph.saved_tensors_hooks``; the bytes of the
  distinct storages it saves, parameters excluded (they are alive anyway), inputs included (saving them is
  what keeps them alive in a network).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Callable, Iterable

import torch


@contextlib.contextmanager
def _quiet_fds():
    """Silence the profiler's C++ start/stop chatter on fds 1 and 2 (it would break progress bars)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = []
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        for fd in (1, 2):
            saved.append((fd, os.dup(fd)))
            os.dup2(devnull, fd)
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def cuda_peak_above(fn: Callable[[], object], device) -> int:
    device = torch.device(device)  # a real GPU only: a rehearsal measures none (``peak_above``)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del out
    return max(0, int(peak - base))


def cpu_peak_above(fn: Callable[[], object]) -> int | None:
    try:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler._memory_profiler import Action
    except ImportError:
        return None
    try:
        with warnings.catch_warnings(), _quiet_fds():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                         with_stack=True) as prof:
                out = fn()
                del out
            timeline = prof._memory_profile().timeline
    except Exception:  # private API: a torch without it gets no CPU memory number rather than a crash
        return None
    cur = peak = 0
    for _, action, _, size in timeline:
        if action == Action.CREATE:
            cur += size
        elif action == Action.DESTROY:
            cur -= size
        peak = max(peak, cur)
    return int(peak)


def peak_above(fn: Callable[[], object], device) -> int | None:
    """Peak bytes allocated by ``fn`` above what was allocated before it (see the module docstring); None in a
    rehearsal (``normbench.device``'s simulated GPU): it has no GPU allocator to read, and its CPU allocator's peak
    is no GPU number (the ``rehearsal`` flag's reason says so; ``fn`` is not run)."""
    from normbench import device as seam

    if seam.is_cuda(device):
        return None if seam.get().simulated else cuda_peak_above(fn, device)
    return cpu_peak_above(fn)


def saved_bytes(forward: Callable[[], object], params: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct non-parameter storages ``forward`` saves for backward."""
    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr not in skip:
                seen[ptr] = max(seen.get(ptr, 0), st.nbytes())
        except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. some subclasses)
            seen[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return int(sum(seen.values()))


# --- before allocating: will a case fit? ------------------------------------------------------------------------------

def estimate_case_bytes(numel: int, inputs: int, elem_bytes: int, backward: bool) -> int:
    """Bytes a case allocates at its peak, estimated before anything is allocated (a free-form ``--shape`` is
    refused when this exceeds the free memory).

    The measured module holds its ``inputs`` tensors and their outputs, and with a backward pass the upstream
    gradients and the input gradients (4 tensors per input, of ``elem_bytes`` each). The error figures
    (``Prepared.errors``) then run the float64 reference on copies of the inputs with a backward pass: again
    4 tensors per input, of 8 bytes each, plus 2 float64 temporaries of the comparison. The float64 reference is
    the largest single allocation (8 bytes per element whatever the measured dtype). The error check always runs a
    backward when the norm has one, so ``backward`` only adds the timed pass's own gradients.
    """
    measured = inputs * (4 if backward else 2) * elem_bytes
    reference = inputs * 4 * 8 + 2 * 8
    return int(numel * (measured + reference))


def free_bytes(device) -> int | None:
    """Memory free for a new allocation on ``device``: the CUDA driver's free figure, or the kernel's
    ``MemAvailable`` on Linux; ``None`` where neither can be read."""
    from normbench import device as seam

    if seam.is_cuda(device):
        return seam.get().free_bytes(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
