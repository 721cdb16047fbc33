"""Host synchronisations in a timed call: one probe call of the callable under a ``TorchDispatchMode`` that records the
operators which make the host wait for the device (a tensor read as a Python number, a data-dependent output size, a
copy to the host), so a GPU record whose call synchronises is flagged ``host_sync`` (never ranked): its events time
the host's wait, and keep-ahead cannot hold the queue ahead of it.

The operators are caught on any device, so the probe finds the same syncs on CPU tensors (a rehearsal, the tests)
that a GPU would pay; a copy to the host is caught where its source is on a GPU. The probe call runs compiled
functions as their Python (``torch.compiler.set_stance("force_eager")``): Dynamo does not run under a dispatch mode
(a ``fullgraph`` function refuses), and a sync in compiled code is where Dynamo breaks the graph to run it eagerly.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _ops(*names: str) -> frozenset:
    out = set()
    for name in names:
        packet = getattr(aten, name, None)
        if packet is not None:
            out.update(getattr(packet, o) for o in packet.overloads())
    return frozenset(out)


#: Operators whose result the host needs before it can go on: a scalar read (``.item()``, ``bool(t)``, ``int(t)``,
#: ``float(t)``), a data-dependent output size, a comparison returning a Python bool.
SYNC_OPS = _ops("_local_scalar_dense", "item", "is_nonzero", "nonzero", "masked_select", "unique_dim", "_unique",
                "_unique2", "unique_consecutive", "equal", "repeat_interleave")
_COPIES = _ops("_to_copy", "copy_")
#: Indexing with a boolean mask: its output size is the mask's count (a ``nonzero`` inside the kernel).
_INDEXING = _ops("index", "index_put", "index_put_", "_index_put_impl_")


def _mask_index(func, args) -> bool:
    if func not in _INDEXING or len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


def _to_host(func, args, kwargs) -> bool:
    """A copy from a GPU tensor to the host (``.cpu()``, ``.tolist()``, ``.to("cpu")``)."""
    if func not in _COPIES:
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if func in _ops("_to_copy"):
        dev = (kwargs or {}).get("device")
        return bool(tensors) and tensors[0].is_cuda and dev is not None and torch.device(dev).type == "cpu"
    return len(tensors) >= 2 and not tensors[0].is_cuda and tensors[1].is_cuda


class SyncWatch(TorchDispatchMode):
    """Counts the synchronising operators dispatched while it is active (``found``: name -> calls)."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNC_OPS or _to_host(func, args, kwargs) or _mask_index(func, args):
            name = str(func.overloadpacket.__name__)
            self.found[name] = self.found.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _eager():
    stance = getattr(torch.compiler, "set_stance", None)
    if stance is not None:
        return stance("force_eager")
    from torch._dynamo import config  # torch < 2.6

    return config.patch(disable=True)


def probe(fn: Callable[[], object], pre: Callable[[], object] | None = None) -> dict[str, int] | None:
    """Run ``pre`` (untimed, outside the watch), then one call of ``fn`` under :class:`SyncWatch`; the synchronising
    operators it dispatched, with their counts (empty: none; None: the probe call failed, so nothing is known)."""
    if pre is not None:
        pre()
    try:
        with _eager(), SyncWatch() as watch:
            out = fn()
        del out
    except Exception:  # the timing that follows meets the same error and reports it; the probe only looks
        return None
    return dict(sorted(watch.found.items()))


def host_sync_reason(found: dict[str, int]) -> str | None:
    """The ``host_sync`` flag's reason for a probe's ``found``, or None."""
    if not found:  # none, or not known (a failed probe)
        return None
    ops = ", ".join(f"aten.{name} x{n}" for name, n in found.items())
    return (f"the timed call synchronises the host with the device ({ops} in one call, caught by a dispatch-mode "
            "probe): its events include the host's wait, and the queue cannot be kept ahead of it")
