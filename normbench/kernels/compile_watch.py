"""Whether a ``torch.compile``'d module stayed compiled: graphs built, recompiles, graph breaks, eager fallbacks.

``torch.compile`` falls back to eager without raising: when a code object hits ``recompile_limit`` (8 by default,
shared by every instance of one module class), on a graph break, or when a frame fails to compile. A benchmark
that times such a module reports eager's time under the name "compile". :class:`CompileWatch` makes that visible:

* it is the ``backend`` handed to ``torch.compile``: it compiles with Inductor (exactly as ``backend="inductor"``)
  and wraps each compiled graph so every call of compiled code is counted;
* the compiled module counts its own ``forward`` calls; a window in which ``forward`` ran more often than
  compiled code ran is a fallback (some calls executed eagerly);
* Dynamo's own counters (``torch._dynamo.utils.counters``: graphs, frames compiled/failed, graph-break reasons)
  are read as deltas over the same window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


def _dynamo_counters():
    try:
        from torch._dynamo.utils import counters
    except (ImportError, AttributeError):  # pragma: no cover - torch without dynamo
        return None
    return counters


def dynamo_snapshot() -> dict:
    """The Dynamo counters this module reads, as plain numbers (missing ones are 0)."""
    c = _dynamo_counters()
    if c is None:
        return {"recompiles": 0, "graphs": 0, "frames_total": 0, "frames_ok": 0, "graph_breaks": 0, "break_reasons": {}}
    breaks = dict(c.get("graph_break", {}))
    try:  # the reasons of every recompile so far, per code object
        from torch._dynamo.convert_frame import guard_failures

        recompiles = sum(len(v) for v in guard_failures.values())
    except (ImportError, AttributeError):  # pragma: no cover
        recompiles = 0
    return {
        "recompiles": int(recompiles),
        "graphs": int(c["stats"].get("unique_graphs", 0)),
        "frames_total": int(c["frames"].get("total", 0)),
        "frames_ok": int(c["frames"].get("ok", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "break_reasons": breaks,
    }


@dataclass
class CompileReport:
    """What happened to one compiled module over one window of calls (see :meth:`CompileWatch.report`)."""

    forward_calls: int
    compiled_calls: int
    graphs: int
    frames_failed: int
    graph_breaks: int
    break_reasons: list = field(default_factory=list)
    recompiles: int = 0

    @property
    def stayed_compiled(self) -> bool:
        return (self.forward_calls > 0 and self.compiled_calls >= self.forward_calls and self.frames_failed == 0
                and self.graph_breaks == 0)

    def reason(self) -> str | None:
        """Why this window did not stay compiled, or ``None`` when it did."""
        if self.stayed_compiled:
            return None
        parts = []
        if self.forward_calls and self.compiled_calls < self.forward_calls:
            parts.append(f"{self.forward_calls - self.compiled_calls} of {self.forward_calls} forward calls ran "
                         "eagerly (no compiled graph was called)")
        if self.frames_failed:
            parts.append(f"{self.frames_failed} frame(s) failed to compile (recompile limit hit or unsupported code)")
        if self.graph_breaks:
            reasons = "; ".join(self.break_reasons[:3])
            parts.append(f"{self.graph_breaks} graph break(s)" + (f": {reasons}" if reasons else ""))
        if not self.forward_calls:
            parts.append("the compiled module was never called")
        return "torch.compile fell back to eager: " + ", ".join(parts)

    def to_dict(self) -> dict:
        return {"stayed_compiled": self.stayed_compiled, "forward_calls": self.forward_calls,
                "compiled_calls": self.compiled_calls, "graphs": self.graphs, "recompiles": self.recompiles,
                "frames_failed": self.frames_failed, "graph_breaks": self.graph_breaks,
                "break_reasons": list(self.break_reasons[:5])}


class CompileWatch:
    """A ``torch.compile`` backend that compiles with Inductor and counts calls of the compiled graphs."""

    def __init__(self, inner=None):
        self._inner = inner
        self.graphs_built = 0
        self.compiled_calls = 0
        self.forward_calls = 0
        self._mark: tuple | None = None

    def _compiler(self):
        if self._inner is None:
            wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
            if wrapper is not None:
                self._inner = wrapper(None, None, None)
            else:  # pragma: no cover - very old torch
                from torch._inductor.compile_fx import compile_fx

                self._inner = compile_fx
        return self._inner

    def __call__(self, gm, example_inputs):
        compiled = self._compiler()(gm, example_inputs)
        self.graphs_built += 1
        watch = self

        def counted(*args, **kwargs):
            watch.compiled_calls += 1
            return compiled(*args, **kwargs)

        # Keep the calling convention Dynamo reads off Inductor's output (boxed: one list argument).
        if hasattr(compiled, "_boxed_call"):
            counted._boxed_call = compiled._boxed_call
        return counted

    def __getattr__(self, name):
        # torch.compile asks its backend for get_compiler_config(), reset(), ...: answer as Inductor would.
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._compiler(), name)

    # windows of calls
    def mark(self) -> None:
        """Start a window: :meth:`report` then describes only the calls made after this."""
        self._mark = (self.forward_calls, self.compiled_calls, self.graphs_built, dynamo_snapshot())

    def report(self) -> CompileReport:
        fwd0, calls0, built0, snap0 = self._mark if self._mark else (0, 0, 0, dynamo_snapshot_zero())
        snap = dynamo_snapshot()
        failed = (snap["frames_total"] - snap0["frames_total"]) - (snap["frames_ok"] - snap0["frames_ok"])
        # Dynamo's reasons are paragraphs; the first line names the cause.
        new_reasons = [str(k).strip().splitlines()[0] for k, v in snap["break_reasons"].items()
                       if v > snap0["break_reasons"].get(k, 0)]
        built = self.graphs_built - built0
        return CompileReport(
            forward_calls=self.forward_calls - fwd0,
            compiled_calls=self.compiled_calls - calls0,
            graphs=built,
            frames_failed=max(0, failed),
            graph_breaks=max(0, snap["graph_breaks"] - snap0["graph_breaks"]),
            break_reasons=new_reasons,
            recompiles=max(0, snap["recompiles"] - snap0["recompiles"]),
        )


def dynamo_snapshot_zero() -> dict:
    return {"recompiles": 0, "graphs": 0, "frames_total": 0, "frames_ok": 0, "graph_breaks": 0, "break_reasons": {}}


def fresh_compile_state() -> None:
    """Forget every compiled graph (``torch._dynamo.reset``), so the next compile starts with an empty cache.

    Why: Dynamo keys its cache on the code object (``forward`` of a module class), so every width and dtype of a
    sweep adds an entry to one shared list until ``recompile_limit`` is hit and the rest runs eagerly. Measured on a
    2-core CPU (docs/measurement.md): RMSNorm over 9 widths × 2 dtypes hit the limit at width 4096 with the defaults
    and with ``dynamic=True`` (dtype changes recompile either way); a reset per case kept all 18 compiled.
    """
    try:
        torch._dynamo.reset()
    except AttributeError:  # pragma: no cover - torch without dynamo
        pass


# --- the ``compile`` backend ----------------------------------------------------------------------------------------
# It lives here, not in the registry, so its implementation hash covers this module only (the registry's discovery
# code is not part of what a compiled record measured).

class CompiledNorm(nn.Module):
    """Eager module whose forward goes through ``torch.compile``; parameters and state_dict unchanged."""

    def __init__(self, module: nn.Module, **compile_kwargs):
        super().__init__()
        from normbench.registry import adopt_state

        # Stored outside _modules so state_dict keys stay those of the eager module.
        object.__setattr__(self, "inner", module)
        adopt_state(self, module)
        # Inductor behind a counting shim, so a silent fallback to eager shows.
        watch = compile_kwargs.pop("backend", None) or CompileWatch()
        object.__setattr__(self, "watch", watch)
        object.__setattr__(self, "_compiled", torch.compile(module, backend=watch, **compile_kwargs))

    def forward(self, *args, **kwargs):
        watch = self.watch
        if hasattr(watch, "forward_calls"):
            watch.forward_calls += 1
        return self._compiled(*args, **kwargs)

    def train(self, mode: bool = True):
        super().train(mode)
        self.inner.train(mode)
        return self

    def extra_repr(self) -> str:
        return f"compiled={type(self.inner).__name__}"


def build(module: nn.Module, spec=None) -> nn.Module:
    """The ``compile`` backend of any norm: a :class:`CompiledNorm` sharing ``module``'s parameters."""
    return CompiledNorm(module)


def unavailable() -> str | None:
    """``None`` when ``torch.compile`` exists here, else the reason."""
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0 or newer"
    return None
