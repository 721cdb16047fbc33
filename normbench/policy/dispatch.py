"""``PolicyNorm``: a norm module run by a policy, everything decided when it resolves (at apply time, again on
``.to()``, ``train()``/``eval()``, ``load_state_dict`` and parameter assignment), nothing in a call but a dtype and
pass look-up and a comparison per regime boundary (the small modules it runs a backend through are in
``policy/wrappers.py``). :func:`normbench.apply_policy` builds them.
"""

from __future__ import annotations

import copy
import copyreg
import math
import os
import sys
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from normbench import catalog
from normbench.policy.lean import lean_forward, lean_pinned
from normbench.policy.ops import traceable
from normbench.policy.reading import Policy
from normbench.policy.recognise import Found
from normbench.policy.wrappers import _CachedOffset, _OffsetCall, _PinnedOffset, _StepAside

#: The catalog family whose regimes a call is bucketed into (the catalog's norm sites with sequences are LLMs').
FAMILY = "llm"


class PolicyFallbackWarning(UserWarning):
    """A call ran the original (eager) module because the policy lacks or refuses what it needs; once per
    (site, reason)."""


def _hardware_id(device: torch.device) -> str:
    from normbench.records.provenance import hardware, hardware_id

    return hardware_id(hardware("cpu" if device.type == "cpu" else str(device)))


def _gate(spec, backend: str, device: torch.device) -> str | None:
    """None when ``backend`` of ``spec`` passed the check gate on ``device``'s kind, else why not."""
    from normbench import check

    kind = device.type
    status = check.ensure_checked([(spec.name, backend, kind)], log=lambda _msg: None)[spec.name]
    v = status.verdict(backend, kind)
    if v.passed:
        return None
    return (f"backend {backend} of {spec.name} has not passed the check gate on {kind} ({v.status}"
            + (f": {v.detail}" if v.detail else "") + f"); run `normbench check {spec.name} --device {kind}`")


def _backend_builder(spec, backend: str):
    """The registry's builder of ``backend`` (``Backend.build``) of ``spec``: what ``spec.create`` calls."""
    from normbench.registry import COMPILE_BACKEND, resolve

    if backend == "compile":
        return resolve(COMPILE_BACKEND.build)
    for b in spec.extra_backends:
        if b.name == backend:
            return resolve(b.build)
    raise KeyError(backend)


def _slots(module: nn.Module, param: torch.Tensor) -> list[tuple[nn.Module, str]]:
    """Every (module, name) whose ``_parameters[name]`` is ``param``, through registered children and the
    unregistered modules backends keep beside them (a compiled module's ``inner``, a Triton module's ``eager``)."""
    out, seen, todo = [], set(), [module]
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out += [(m, k) for k, p in m._parameters.items() if p is param]
        todo += list(m._modules.values()) + [v for v in vars(m).values() if isinstance(v, nn.Module)]
    return [s for s in out if s[0] is not None]


def _callers_level() -> int:
    """``warnings.warn``'s stacklevel, for a warning raised by the function calling this one, that names the first
    frame outside normbench, torch and transformers (whose models override ``.to()``): the user's ``.to()``, however
    deep ``nn.Module._apply`` recursed to get here."""
    packages = [torch, sys.modules[__name__.split(".")[0]], sys.modules.get("transformers")]
    inside = tuple(os.path.dirname(p.__file__) + os.sep for p in packages if getattr(p, "__file__", None))
    f, level = sys._getframe(2), 2
    while f is not None and f.f_code.co_filename.startswith(inside):
        f, level = f.f_back, level + 1
    return level


@dataclass
class _Plan:
    """What one apply_policy call decided, shared by the modules it put in: the policy, the hardware ids, the
    backends refused per device kind, the warnings already given. Read when a module resolves (at apply time, on
    ``.to()``, ``train()``/``eval()`` and ``load_state_dict``), never in a forward."""

    policy: Policy
    refused: dict                      # device kind -> {(norm, backend): reason}
    forced: tuple[str, ...]
    hw_map: dict                       # local hardware id -> the policy's (itself, or the one forced)
    warmup: object = True              # True: the policy's own shapes; False/None: none; or [(batch, seq), ...]
    hw_by_device: dict = field(default_factory=dict)
    warned: set = field(default_factory=set)
    warmed: set = field(default_factory=set)
    shared: dict = field(default_factory=dict)  # (norm, layout, width, eps) -> the compile backend's module
    pin: str | None = None             # a regime name: each site's call goes straight to that regime's answer

    def hardware(self, device: torch.device) -> str:
        key = str(device)
        if key not in self.hw_by_device:
            local = _hardware_id(device)
            self.hw_by_device[key] = self.hw_map.get(local, local)
        return self.hw_by_device[key]

    def refusals(self, norm: str, device: torch.device) -> dict:
        kind = device.type
        if kind not in self.refused:
            self.refused[kind] = {}
        if not any(k[0] == norm for k in self.refused[kind]) and (kind, norm) not in self.warned:
            self.warned.add((kind, norm))
            self.refused[kind].update(_refusals(self.policy, {norm}, device))
        return self.refused[kind]

    def warn(self, site: str, reason: str) -> None:
        if (site, reason) in self.warned:
            return
        self.warned.add((site, reason))
        warnings.warn(f"normbench policy: {site} runs eager: {reason}", PolicyFallbackWarning, stacklevel=4)


def _dims(x: torch.Tensor, layout: str) -> tuple[int, ...]:
    """A call's shape as records hold it (``catalog.site_shapes``): tokens ``(batch, rows, C)``, rows being every
    position (and head) of a sequence; images ``(N, C, H, W)``."""
    if layout != "tokens":
        return tuple(x.shape)
    if x.dim() <= 2:
        return (1, math.prod(x.shape[:-1]) if x.dim() == 2 else 1, x.shape[-1])
    return (x.shape[0], math.prod(x.shape[1:-1]), x.shape[-1])


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float64": torch.float64}
_PASSES = {"fwd": False, "fwd+bwd": True}


def _regime_limits() -> tuple[list, list]:
    """The family's regimes as (positions, name), smallest first: decode (one position per sequence), prefill."""
    dec, pre = [], []
    for name, b, s, _q in catalog.REGIMES[FAMILY]:
        if s is not None:
            (dec if s == 1 else pre).append((b * s, name, b, s))
    return sorted(dec), sorted(pre)


def _casting(impl):
    """``impl`` whose output is cast to the input's dtype, as the original module returns it."""
    def forward(*args, **kwargs):
        y = impl(*args, **kwargs)
        x = args[0] if args else next(iter(kwargs.values()))
        return y if y.dtype == x.dtype else y.to(x.dtype)
    return forward


class PolicyNorm(nn.Module):
    """A norm module as :func:`apply_policy` left it: the original's parameters and buffers under their names (so
    ``state_dict`` is unchanged), each call run by the implementation the policy names for its regime, dtype and
    pass, or by the original module (eager) when the policy has no usable answer.

    Everything is decided when the module resolves (at apply time, again on ``.to()``/``.half()``,
    ``train()``/``eval()``, ``load_state_dict`` and parameter assignment): hardware id, gate verdicts, backends built
    and warmed, and per (dtype, pass) a short ordered list of position-count thresholds per kind (decode, prefill),
    one per regime boundary where the policy's answers differ. A call reads its dtype and pass, compares its
    positions (batch x sequence length, read on the sequence axis the apply-time probe found) against that list and
    calls the implementation: no memo, no hardware id, no gate, nothing built."""

    def __init__(self, found: Found, site: str | None, plan: _Plan, shape: tuple | None = None,
                 seq_axis: int | None = None):
        super().__init__()
        from normbench.registry import adopt_state

        adopt_state(self, found.module)
        # Kept outside _modules: state_dict keys stay the original's (restore puts it back).
        d = self.__dict__
        d["original"], d["found"], d["_plan"] = found.module, found, plan
        d["_impls"], d["_tables"], d["_scales"] = {}, {}, []
        #: the input shape the apply-time probe saw (None: no probe) and the sequence axis read from it
        d["probe_shape"], d["seq_axis"] = shape, seq_axis
        d["_ndim"] = len(shape) if shape is not None and seq_axis is not None else -1
        d["_bfirst"] = seq_axis is not None and seq_axis != 0
        d["_sax"] = seq_axis if seq_axis is not None else 0
        d["_cast"] = found.cast_to_input
        d["_offset"] = bool(found.offset)
        d["_resolving"] = True
        self.site = site
        self.label = site or found.path
        self.norm = found.norm
        #: why the policy was applied although it was made elsewhere (``force=True``); empty when it was not forced
        self.policy_forced = plan.forced
        self.training = found.module.training
        d["_resolving"] = False
        self.register_load_state_dict_post_hook(lambda module, _keys: module._resync())
        self._resolve()

    def extra_repr(self) -> str:
        return (f"{self.found.what} -> {self.norm}, site={self.site!r}, width={self.found.width}"
                + (f", seq_axis={self.seq_axis}" if self.seq_axis is not None else "")
                + (", forced" if self.policy_forced else "")
                + (f", pinned={self.pinned['regime']}:{self.pinned['backend']}" if self.__dict__.get("pinned") else ""))

    # --- resolving: everything a call needs, decided before any call ----------------------------------------------
    def train(self, mode: bool = True):
        super().train(mode)
        self.original.train(mode)
        for impl in self._impls.values():
            impl.train(mode)
        pinned = getattr(self.__dict__.get("forward"), "__self__", None)
        if isinstance(pinned, nn.Module):
            pinned.train(mode)
        return self

    def __setstate__(self, state):   # a copy (copy.deepcopy) resolves again: its implementations hold its parameters
        super().__setstate__(state)
        if "_tables" in state:
            self._resolve()

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new

    def __reduce_ex__(self, protocol):
        """Pickled (``torch.save(model)``, a process pool, a Ray task) as the original module, with this module's
        parameters and buffers: what loads computes the same function without the policy, whose backends and tables
        belong to this process (compiled code, Triton launchers, generated calls); ``apply_policy`` again there."""
        # one text for every site of a class: Python shows it once, not once per site (a 32-layer Llama has 65)
        warnings.warn(f"normbench policy: its {type(self.original).__name__} sites pickle as the original modules (the "
                      "policy's backends do not pickle); after loading, call normbench.apply_policy on the model again",
                      PolicyFallbackWarning, stacklevel=_callers_level())
        self._resync()
        orig = self.original   # (copyreg.__newobj__ would be refused: the pickler checks it against this object)
        return copyreg._reconstructor, (type(orig), object, None), orig.__getstate__()

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        if "_tables" in self.__dict__:
            self._resolve()
        return out

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "forward" and type(self) is not PolicyNorm:   # set from outside (accelerate's hooks): called
            object.__setattr__(self, "__class__", PolicyNorm)
        if isinstance(value, (nn.Parameter, torch.Tensor)) and not self.__dict__.get("_resolving", True):
            self._resync()

    def _device(self) -> torch.device:
        for t in list(self._parameters.values()) + list(self._buffers.values()):
            if t is not None:
                return t.device
        return torch.device("cpu")

    def _resync(self) -> None:
        """The original module and every backend see this module's parameters and buffers (``.to()`` replaces
        buffers here only; ``load_state_dict(assign=True)`` replaces parameters); Gemma's cached scales refreshed."""
        orig = self.original
        for k, p in self._parameters.items():
            orig._parameters[k] = p
        for k, b in self._buffers.items():
            orig._buffers[k] = b
        for impl in self._impls.values():
            slots = getattr(impl, "_policy_slots", None)
            if slots:
                for k, where in slots.items():
                    p = self._parameters.get(k)
                    if p is not None:
                        for m, name in where:
                            m._parameters[name] = p
        self._refresh_scales()

    def _refresh_scales(self) -> None:
        """Gemma without autograd recording: the scale ``1 + weight`` (float32) computed once, held in the backend's
        weight slots, recomputed when the weight changes (its version counter)."""
        if not self._offset:
            return
        w = self._parameters["weight"]
        with torch.no_grad():
            scale = 1.0 + w.detach().float()
        self.__dict__["_scale_ver"] = w._version
        self.__dict__["_scale"] = scale
        for where in self._scales:
            for m, name in where:
                m._parameters[name] = scale

    def _build(self, backend: str, recording: bool) -> nn.Module:
        """The backend's module, its parameter slots pointed at this module's parameters (``_policy_slots``)."""
        from normbench.discovery import get_norm

        f = self.found
        spec = get_norm(f.norm)
        build = _backend_builder(spec, backend)
        if backend == "compile":
            if f.native:
                return _StepAside(build(f.module, spec), f.module, {}, None).train(self.training)
            key = (f.norm, f.layout, f.width, f.eps)
            if key not in self._plan.shared:
                eager = spec.create(f.width, layout=f.layout, eps=f.eps, **f.create)
                self._plan.shared[key] = (build(eager, spec), eager)
            compiled, eager = self._plan.shared[key]
            slots = {k: _slots(compiled, p) for k, p in eager._parameters.items() if p is not None}
            if self._offset and recording:
                return _OffsetCall(_StepAside(compiled, eager, {}, None), slots["weight"], self).train(self.training)
            if self._offset:
                return _CachedOffset(_StepAside(compiled, eager, {}, None), slots["weight"], self,
                                     point=True).train(self.training)
            return _StepAside(compiled, eager, slots, self).train(self.training)
        # A native module is its own eager implementation; a transformers one gets a normbench module whose
        # parameter slots hold the calling module's own Parameters (same objects: training updates are seen).
        eager = f.module if f.native else spec.create(f.width, layout=f.layout, eps=f.eps, **f.create)
        # a Triton backend's module: its own forward eagerly, its torch.library op when an outer compile traces it
        module = traceable(build(eager, spec)).train(self.training)
        slots = {k: _slots(module, p) for k, p in eager._parameters.items() if p is not None}
        if self._offset:
            return self._wrap_offset(module, slots, recording)
        object.__setattr__(module, "_policy_slots", slots)
        return module

    def _wrap_offset(self, module: nn.Module, slots: dict, recording: bool) -> nn.Module:
        if recording:
            return _OffsetCall(module, slots["weight"], self).train(self.training)
        self._scales.append(slots["weight"])
        return _CachedOffset(module, slots["weight"], self).train(self.training)

    def _impl(self, backend: str, recording: bool):
        key = (backend, recording and self._offset)
        if key not in self._impls:
            self._impls[key] = self._build(backend, recording)
            self._resync()
        return self._impls[key]

    def _resolve(self) -> None:
        """Hardware id, gate verdicts, backends built and warmed, and the per (dtype, pass) threshold lists."""
        plan, f = self._plan, self.found
        device = self._device()
        d = self.__dict__
        d["_impls"], d["_scales"], d["_tables"] = {}, [], {}
        d["_hw"] = hw = plan.hardware(device)
        if self.site is None or f.layout != "tokens":
            d["_tables"] = None   # a policy by exact shape: looked up per call (not the serving path)
            refused = plan.refusals(f.norm, device)
            for k, c in plan.policy.by_shape.items():   # its backends built here, not in a call
                if (k[0], k[1], k[5]) == (f.norm, f.layout, hw) and c.backend not in (None, "eager"):
                    self._entry(c, None, k[3], k[4], hw, refused, k[4] == "fwd+bwd")
            self._resync()
            self.train(self.training)
            self._pin()
            return
        pol = plan.policy
        refused = plan.refusals(f.norm, device)
        dec, pre = _regime_limits()
        keys = {(k[2], k[3]) for k in pol.by_site if k[0] == self.site and k[4] == hw}
        for dtype_name, pass_ in sorted(keys):
            dtype, rec = _DTYPES.get(dtype_name), _PASSES.get(pass_)
            if dtype is None or rec is None:
                continue
            lists = []
            for kind in (dec, pre):
                entries = []
                for n, regime, _b, _s in kind:
                    entries.append((n, *self._entry(pol.by_site.get((self.site, regime, dtype_name, pass_, hw)),
                                                    regime, dtype_name, pass_, hw, refused, rec)))
                entries.append((math.inf, None, "the call's shape is beyond the largest regime the policy measured"))
                merged = []
                for e in entries:   # one comparison per boundary where the answers differ
                    if merged and merged[-1][1] == e[1] and merged[-1][2] == e[2]:
                        merged[-1] = (e[0], e[1], e[2])
                    else:
                        merged.append(e)
                lists.append(tuple(merged))
            self._tables[(dtype, rec)] = tuple(lists)
        self._resync()
        self.train(self.training)
        self._warm(dec, pre)
        self._pin()

    def _pin(self) -> None:
        """This site's ``forward`` and ``__call__`` made again (:meth:`_choose_forward`); one set from outside kept."""
        d = self.__dict__
        outside, mine = d.pop("forward", None), d.pop("_own_forward", None)
        d["pinned"] = None
        if type(self) is not PolicyNorm:
            object.__setattr__(self, "__class__", PolicyNorm)
        self._choose_forward()
        if outside is not None and outside is not mine:
            self._keep_outside(outside, mine)

    def _choose_forward(self) -> None:
        """The policy's tables written out as this site's ``forward`` and ``__call__``; or, with
        ``apply_policy(..., pin=REGIME)``, the implementation the policy names for that regime at the module's dtype
        (pass ``fwd``), so a call costs what that implementation called bare costs (vLLM's CustomOp: chosen once,
        nothing checked per call). Every implementation computes the same function (the check gate), so a call of
        another shape, dtype or with autograd recording is still right; only its speed is the pinned regime's. No
        usable answer: the original module, and ``pinned`` says why."""
        d = self.__dict__
        regime = self._plan.pin
        if regime is None:   # the tables written out as this site's own forward and __call__ (policy/lean.py)
            self._install(lean_forward(self))
            return
        f = self.found
        params = [p for p in self._parameters.values() if p is not None]
        dtype = params[0].dtype if params else torch.float32
        dtype_name = str(dtype).removeprefix("torch.")
        if self.site is None:
            impl, why = None, "pin needs a policy for a model's sites (this policy answers by exact shape)"
        else:
            choice = self._plan.policy.by_site.get((self.site, regime, dtype_name, "fwd", self._hw))
            impl, why = self._entry(choice, regime, dtype_name, "fwd", self._hw,
                                    self._plan.refusals(f.norm, self._device()), False)
        if impl is None or impl is self.original:
            d["forward"] = d["_own_forward"] = self.original
            d["pinned"] = {"regime": regime, "backend": "eager", "dtype": dtype_name, "why": why}
            return
        owner = getattr(impl, "__self__", None)
        if isinstance(owner, _CachedOffset):
            impl = _PinnedOffset(owner.module, owner.slots, self, owner.point).train(self.training).forward
        d["pinned"] = {"regime": regime, "backend": choice.backend, "dtype": dtype_name, "why": None}
        if not self._install(lean_pinned(self, impl)):
            d["forward"] = d["_own_forward"] = _casting(impl) if self._cast else impl

    def _keep_outside(self, outside, mine) -> None:
        """A ``forward`` set on this site from outside (accelerate's hooks: a wrapper of the one it found, kept as
        ``_old_forward``) stays across a re-resolve: the generated function it wraps takes the new one's code and
        constants, so the wrapper runs the new dispatch. Where either is not a generated function, the wrapper
        still runs, but may call what this site ran before: said."""
        d = self.__dict__
        new = d.get("_own_forward")
        if hasattr(mine, "__call_fn__") and hasattr(new, "__call_fn__"):
            mine.__code__ = new.__code__
            mine.__globals__.clear()
            mine.__globals__.update(new.__globals__)
            mine.__source__, d["_own_forward"] = new.__source__, mine
        elif mine is not new:
            warnings.warn(f"normbench policy: {self.label}: the forward set on it from outside is kept, but what it "
                          "wraps was not made again when the site resolved again; set it after .to()/.half()",
                          PolicyFallbackWarning, stacklevel=_callers_level())
        d["forward"] = outside
        if type(self) is not PolicyNorm:
            object.__setattr__(self, "__class__", PolicyNorm)

    def _install(self, fn) -> bool:
        """``fn`` (policy/lean.py) as ``forward``, its ``__call__`` on this module's own subclass of PolicyNorm."""
        if fn is None:
            return False
        self.__dict__["forward"] = self.__dict__["_own_forward"] = fn
        object.__setattr__(self, "__class__", type("PolicyNorm", (PolicyNorm,), {
            "__call__": fn.__call_fn__, "__module__": __name__, "__qualname__": "PolicyNorm"}))
        return True

    def _entry(self, choice, regime, dtype, pass_, hw, refused, recording):
        """(implementation, None) or (None, why the original module runs instead) for one regime."""
        f = self.found
        if choice is None:
            return None, self._missing(None, regime, dtype, pass_, hw)
        if choice.backend is None:
            return None, f"the policy names no backend at {choice.shape} ({choice.status}) for {dtype} {pass_}"
        if choice.backend == "eager":
            return self.original, None
        if (f.norm, choice.backend) in refused:
            return None, f"backend {choice.backend} refused: {refused[(f.norm, choice.backend)]}"
        try:
            # its forward, called directly: a backend module of the policy's own has no hooks, and nn.Module's
            # __call__ would double the module-call cost of the site (the site's own call is the one that counts)
            return self._impl(choice.backend, recording).forward, None
        except Exception as exc:  # a backend that cannot be built here runs nothing: eager, said once
            return None, f"backend {choice.backend} could not be built: {type(exc).__name__}: {exc}"

    def _warm(self, dec, pre) -> None:
        """Each implementation run once (no autograd) at the shapes it will see: the policy's regimes (the largest
        position count of each boundary) or ``warmup=[(batch, seq), ...]``; autotuning and compiling happen here."""
        warm = self._plan.warmup
        if not warm or self.probe_shape is None or not self._tables:
            return
        shapes = list(warm) if warm is not True else [(b, s) for _n, _r, b, s in dec + pre]
        device = self._device()
        for (dtype, rec), lists in self._tables.items():
            if rec:
                continue
            for b, s in shapes:
                entries = lists[0] if s == 1 else lists[1]
                impl = next((e[1] for e in entries if b * s <= e[0]), None)
                if impl is None or impl is self.original:
                    continue
                shape = list(self.probe_shape)
                shape[self._sax] = s
                if self._bfirst:
                    shape[0] = b
                # once per implementation kind, width and shape (a kernel's autotuning and plan caches are shared by
                # modules; a compiled module is not, unless the sites share it)
                mod = getattr(impl, "__self__", impl)
                compiled = getattr(getattr(mod, "module", mod), "compiled", None)
                key = (self.found.norm, self.found.width, self.found.eps, type(mod).__name__, id(compiled), dtype,
                       tuple(shape))
                if key in self._plan.warmed:
                    continue
                self._plan.warmed.add(key)
                with torch.no_grad():
                    impl(torch.zeros(shape, dtype=dtype, device=device))

    def _missing(self, dims, regime, dtype, pass_, hw) -> str:
        """Why no answer: the policy's entries for this site or norm, told apart by what differs (one category per
        reason, so each (site, reason) warns once whatever the exact shape)."""
        pol, f = self._plan.policy, self.found
        if hw not in pol.hardware_ids:
            return f"the policy has no answers for this device's hardware ({hw})"
        if self.site is not None:
            keys = [k for k in pol.by_site if k[0] == self.site and k[4] == hw]
            have = {(k[2], k[3]) for k in keys}
        else:
            keys = [k for k in pol.by_shape if k[0] == f.norm and k[1] == f.layout and k[5] == hw]
            have = {(k[3], k[4]) for k in keys}
        if not any(d == dtype for d, _p in have):
            return f"the policy has no answer in {dtype}"
        if (dtype, pass_) not in have:
            why = " (autograd is recording, so the backward runs too)" if pass_ == "fwd+bwd" else ""
            return f"the policy has no {pass_} answer in {dtype}{why}"
        if self.site is None:
            return "the policy has no answer at this shape (it answers for exact shapes only)"
        if regime is None:
            return "the call's shape is beyond the largest regime the policy measured"
        return f"the policy has no answer for regime {regime}"

    # --- running ----------------------------------------------------------------------------------------------------
    def _eager(self, why: str, args, kwargs):
        if not torch.compiler.is_compiling():   # (a compiled graph warns nothing: said at trace time it would lie)
            self._plan.warn(self.label, why)
        return self.original(*args, **kwargs)

    def _other(self, x: torch.Tensor, rec: bool, args, kwargs):
        """A call off the tables: a dtype or pass the policy has no answer for, an input of another rank than the
        probe saw, or a policy by exact shape."""
        plan, f = self._plan, self.found
        dtype = str(x.dtype).removeprefix("torch.")
        pass_ = "fwd+bwd" if rec else "fwd"
        hw = self._hw
        dims = _dims(x, f.layout)
        if self._tables is None:
            choice = plan.policy.by_shape.get((f.norm, f.layout, dims, dtype, pass_, hw))
            if choice is None:
                return self._eager(self._missing(dims, None, dtype, pass_, hw), args, kwargs)
            impl, why = self._entry(choice, None, dtype, pass_, hw, plan.refusals(f.norm, x.device), rec)
            if why is not None:
                return self._eager(why, args, kwargs)
            y = impl(*args, **kwargs)
            return y.to(x.dtype) if self._cast else y
        lists = self._tables.get((x.dtype, rec))
        if lists is None:
            return self._eager(self._missing(dims, None, dtype, pass_, hw), args, kwargs)
        seq = x.shape[1] if x.dim() >= 3 else dims[1]
        n = dims[0] * seq
        for lim, impl, why in (lists[0] if seq == 1 else lists[1]):
            if n <= lim:
                break
        if why is not None:
            return self._eager(why, args, kwargs)
        y = impl(*args, **kwargs)
        return y.to(x.dtype) if self._cast and y.dtype != x.dtype else y

    def forward(self, *args, **kwargs):
        # Kept free of Python calls on the way to the implementation (tests count them): attribute reads from
        # __dict__, one dict look-up, a comparison per regime boundary.
        x = args[0] if args else next(iter(kwargs.values()))
        if torch.is_grad_enabled():
            rec = x.requires_grad
            if not rec:
                for p in self._parameters.values():
                    if p is not None and p.requires_grad:
                        rec = True
                        break
                for a in args:
                    if isinstance(a, torch.Tensor) and a.requires_grad:
                        rec = True
        else:
            rec = False
        tables = self._tables
        lists = tables.get((x.dtype, rec)) if tables is not None and x.dim() == self._ndim else None
        if lists is None:
            return self._other(x, rec, args, kwargs)
        shape = x.shape
        seq = shape[self._sax]
        n = seq * shape[0] if self._bfirst else seq
        for lim, impl, why in (lists[0] if seq == 1 else lists[1]):
            if n <= lim:
                break
        if why is not None:
            return self._eager(why, args, kwargs)
        y = impl(*args, **kwargs)
        if self._cast and y.dtype != x.dtype:
            return y.to(x.dtype)
        return y


def _refusals(pol: Policy, norms: set[str], device: torch.device) -> dict:
    from normbench.discovery import get_norm

    out = {}
    named = {(c.norm, c.backend) for c in pol.by_shape.values() if c.backend not in (None, "eager")}
    for norm, backend in sorted(named):
        if norm not in norms:
            continue
        try:
            spec = get_norm(norm)
        except KeyError as exc:
            out[(norm, backend)] = f"norm {norm} is not installed here ({exc.args[0]})"
            continue
        if backend not in spec.backends:
            out[(norm, backend)] = (f"{backend} is not a backend of {norm} here ({', '.join(spec.backends)}; "
                                    "external baselines are not applied)")
            continue
        why = spec.backend_unavailable(backend) or _gate(spec, backend, device)
        if why:
            out[(norm, backend)] = why
    return out
