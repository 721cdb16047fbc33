"""``normbench.apply_policy`` / ``restore``: ``normbench best --json``'s selection policy driving a model's norms.

:func:`apply_policy` replaces, in place, each norm module of a model that it recognises (normbench's own; the
transformers RMSNorms of the catalog's families, checked on a probe first) with a :class:`PolicyNorm`: same
parameters, buffers and ``state_dict`` keys, and each call dispatched by its regime (``catalog.regime_for``, the
regimes ``best`` answers for) or exact shape, its dtype and whether autograd is recording (``fwd`` or ``fwd+bwd``)
to the backend the policy names. Safe by construction:

* a policy made on another hardware id, torch version or normbench version is refused (``force=True`` applies it
  anyway and records why on each module, ``PolicyNorm.policy_forced``);
* a backend runs only when it is available here and its norm passed the check gate; anything the policy lacks or
  refuses runs the original module (eager), with one :class:`PolicyFallbackWarning` per (site, reason);
* :func:`restore` puts the original modules back, with the parameters the model has then.

The layer: above ``best`` (it reads best's policy schema) and allowed to use the check gate and backends, which a
reader may not (docs/architecture.md).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from normbench import catalog
from normbench.policy.reading import Choice, Policy, read
from normbench.policy.recognise import Found, find

__all__ = ["apply_policy", "restore", "read", "Policy", "Choice", "PolicyNorm", "PolicyMismatch",
           "PolicyFallbackWarning", "ApplyReport"]

#: The catalog family whose regimes a call is bucketed into (the catalog's norm sites with sequences are LLMs').
FAMILY = "llm"


class PolicyMismatch(ValueError):
    """A policy made on another hardware id, torch version or normbench version (``force=True`` overrides)."""


class PolicyFallbackWarning(UserWarning):
    """A call ran the original (eager) module because the policy lacks or refuses what it needs; once per
    (site, reason)."""


def _versions() -> dict:
    from normbench.versions import __version__, dist_version

    return {"normbench": __version__, "torch": dist_version("torch")}


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


@dataclass
class _Plan:
    """What one apply_policy call decided, shared by the modules it put in: the policy, the backends refused here,
    the hardware ids, the warnings already given."""

    policy: Policy
    refused: dict                      # (norm, backend) -> reason
    forced: tuple[str, ...]
    hw_map: dict                       # local hardware id -> the policy's (itself, or the one forced)
    hw_by_device: dict = field(default_factory=dict)
    warned: set = field(default_factory=set)
    shared: dict = field(default_factory=dict)  # (norm, layout, width, eps, backend) -> (module, slots)

    def hardware(self, device: torch.device) -> str:
        key = str(device)
        if key not in self.hw_by_device:
            local = _hardware_id(device)
            self.hw_by_device[key] = self.hw_map.get(local, local)
        return self.hw_by_device[key]

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


class PolicyNorm(nn.Module):
    """A norm module as :func:`apply_policy` left it: the original's parameters and buffers under their names (so
    ``state_dict`` is unchanged), each call run by the backend the policy names for its shape, dtype and pass, or by
    the original module (eager) when the policy has no usable answer."""

    def __init__(self, found: Found, site: str | None, plan: _Plan):
        super().__init__()
        from normbench.registry import adopt_state

        adopt_state(self, found.module)
        # Kept outside _modules: state_dict keys stay the original's (restore puts it back).
        object.__setattr__(self, "original", found.module)
        object.__setattr__(self, "found", found)
        object.__setattr__(self, "_plan", plan)
        object.__setattr__(self, "_impls", {})
        object.__setattr__(self, "_memo", {})
        self.site = site
        self.label = site or found.path
        self.norm = found.norm
        #: why the policy was applied although it was made elsewhere (``force=True``); empty when it was not forced
        self.policy_forced = plan.forced
        self.train(found.module.training)

    def extra_repr(self) -> str:
        return (f"{self.found.what} -> {self.norm}, site={self.site!r}, width={self.found.width}"
                + (", forced" if self.policy_forced else ""))

    def train(self, mode: bool = True):
        super().train(mode)
        self.original.train(mode)
        for impl, _slots in self._impls.values():
            impl.train(mode)
        return self

    # --- which backend --------------------------------------------------------------------------------------------
    def _choose(self, x: torch.Tensor, recording: bool) -> tuple[str, str | None]:
        """(backend, None) or ("eager", why the policy's backend is not used)."""
        plan, f = self._plan, self.found
        pol = plan.policy
        dtype = str(x.dtype).removeprefix("torch.")
        pass_ = "fwd+bwd" if recording else "fwd"
        hw = plan.hardware(x.device)
        if hw not in pol.hardware_ids:
            return "eager", f"the policy has no answers for this device's hardware ({hw})"
        dims = _dims(x, f.layout)
        choice = pol.by_shape.get((f.norm, f.layout, dims, dtype, pass_, hw))
        regime = None
        if choice is None and self.site is not None and f.layout == "tokens":
            regime = catalog.regime_for(FAMILY, dims[0], x.shape[1] if x.dim() >= 3 else dims[1])
            if regime is not None:
                choice = pol.by_site.get((self.site, regime, dtype, pass_, hw))
        if choice is None:
            return "eager", self._missing(dims, regime, dtype, pass_, hw)
        if choice.backend is None:
            return "eager", f"the policy names no backend at {choice.shape} ({choice.status}) for {dtype} {pass_}"
        if choice.backend != "eager" and (f.norm, choice.backend) in plan.refused:
            return "eager", f"backend {choice.backend} refused: {plan.refused[(f.norm, choice.backend)]}"
        return choice.backend, None

    def _missing(self, dims, regime, dtype, pass_, hw) -> str:
        """Why no answer: the policy's entries for this site or norm, told apart by what differs (one category per
        reason, so each (site, reason) warns once whatever the exact shape)."""
        pol, f = self._plan.policy, self.found
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
    def _impl(self, backend: str):
        """The backend's module and its parameter slots. A transformers module's backend is shared by every module
        of the same (norm, width, eps): one compiled graph for all of a model's layers, where a module each would
        pass Dynamo's recompile limit (8 per code object) and silently run eager past it."""
        impl = self._impls.get(backend)
        if impl is None:
            f = self.found
            key = (f.norm, f.layout, f.width, f.eps, backend)
            impl = self._build(backend) if f.native else self._plan.shared.get(key) or self._build(backend)
            if not f.native:
                self._plan.shared[key] = impl
            self._impls[backend] = impl
        return impl

    def _build(self, backend: str):
        """The backend's module and, per parameter name, the slots in it where that parameter is read."""
        from normbench.discovery import get_norm

        f = self.found
        spec = get_norm(f.norm)
        build = _backend_builder(spec, backend)
        # A native module is its own eager implementation; a transformers one gets a normbench module whose
        # parameter slots are pointed at the calling module's own Parameters at each call (same objects: training
        # updates and .to() are seen).
        eager = f.module if f.native else spec.create(f.width, layout=f.layout, eps=f.eps)
        module = build(eager, spec)
        slots = {k: _slots(module, p) for k, p in eager._parameters.items() if p is not None}
        return module.train(self.training), slots

    def _point(self, slots: dict) -> None:
        """Point the backend's parameter slots at this module's parameters (again, if one was replaced since)."""
        for k, where in slots.items():
            p = self._parameters.get(k)
            if where and p is not None and where[0][0]._parameters[where[0][1]] is not p:
                for m, name in where:
                    m._parameters[name] = p

    def _sync(self) -> None:
        """The original module sees this module's parameters and buffers (``.to()`` replaces buffers here only)."""
        orig = self.original
        for k, p in self._parameters.items():
            if orig._parameters[k] is not p:
                orig._parameters[k] = p
        for k, b in self._buffers.items():
            if orig._buffers[k] is not b:
                orig._buffers[k] = b

    def forward(self, *args, **kwargs):
        x = args[0] if args else next(iter(kwargs.values()))
        recording = torch.is_grad_enabled() and (
            any(p is not None and p.requires_grad for p in self._parameters.values())
            or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
            or any(isinstance(a, torch.Tensor) and a.requires_grad for a in kwargs.values()))
        key = (x.device, x.dtype, x.shape, recording)
        chosen = self._memo.get(key)
        if chosen is None:
            chosen = self._choose(x, recording)
            if len(self._memo) > 4096:  # many prefill lengths: forget rather than grow without bound
                self._memo.clear()
            self._memo[key] = chosen
        backend, why = chosen
        if why is not None:
            self._plan.warn(self.label, why)
        if backend == "eager":
            self._sync()
            return self.original(*args, **kwargs)
        try:
            module, slots = self._impl(backend)
        except Exception as exc:  # a backend that cannot be built here runs nothing: eager, said once
            reason = f"backend {backend} could not be built: {type(exc).__name__}: {exc}"
            self._memo[key] = ("eager", reason)
            self._plan.warn(self.label, reason)
            self._sync()
            return self.original(*args, **kwargs)
        if module.training != self.training:
            module.train(self.training)
        watch = getattr(module, "watch", None)   # the compile backend counts the calls its compiled graphs ran
        ran = getattr(watch, "compiled_calls", None)
        if not self.found.offset:
            self._point(slots)
            y = module(*args, **kwargs)
        else:
            # Gemma: the scale is 1 + weight, computed in float32 (as transformers does) for this call and handed
            # to the backend in its weight's place; the backend's own placeholder goes back afterwards (it would
            # otherwise hold this call's graph).
            scale = 1.0 + self._parameters["weight"].float()
            saved = [(m, k, m._parameters[k]) for m, k in slots["weight"]]
            try:
                for m, k, _ in saved:
                    m._parameters[k] = scale
                y = module(*args, **kwargs)
            finally:
                for m, k, p in saved:
                    m._parameters[k] = p
        if ran is not None and watch.compiled_calls == ran:
            self._plan.warn(self.label, f"backend {backend}: torch.compile ran no compiled graph for this call (it "
                                        "fell back to eager: recompile limit, graph break or failed frame)")
        return y.to(x.dtype) if self.found.cast_to_input else y


@dataclass
class ApplyReport:
    """What :func:`apply_policy` did: modules replaced and left (with why), the policy's sites no module computes,
    backends refused here, and what ``force=True`` overrode."""

    replaced: list = field(default_factory=list)    # {"module", "class", "norm", "site", "width"}
    left: list = field(default_factory=list)        # {"module", "class", "reason"}
    sites_unused: dict = field(default_factory=dict)  # site -> why no module of the model computes it
    refused: dict = field(default_factory=dict)     # "norm/backend" -> reason
    forced: tuple = ()

    def to_dict(self) -> dict:
        return {"replaced": self.replaced, "left": self.left, "sites_unused": self.sites_unused,
                "refused": self.refused, "forced": list(self.forced)}

    def __str__(self) -> str:
        lines = [f"replaced {len(self.replaced)} norm module(s)"
                 + (f" (FORCED: {'; '.join(self.forced)})" if self.forced else "")]
        by: dict = {}
        for r in self.replaced:
            by.setdefault((r["class"], r["site"] or "(by shape)"), []).append(r["module"])
        lines += [f"  {cls} at {site}: {len(mods)} ({mods[0]}{', ...' if len(mods) > 1 else ''})"
                  for (cls, site), mods in by.items()]
        if self.left:
            lines.append(f"left {len(self.left)}:")
            lines += [f"  {r['module']} ({r['class']}): {r['reason']}" for r in self.left]
        lines += [f"policy site {s}: {why}" for s, why in self.sites_unused.items()]
        lines += [f"backend {k} refused here: {why}" for k, why in self.refused.items()]
        return "\n".join(lines)


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def _mismatches(pol: Policy, hw: str) -> list[str]:
    here, made = _versions(), pol.made_with
    out = []
    if not made:
        out.append("it does not say which normbench and torch made it (an older `normbench best`)")
    for k in ("normbench", "torch"):
        if made and made.get(k) != here[k]:
            out.append(f"it was made with {k} {made.get(k)}, this is {k} {here[k]}")
    if hw not in pol.hardware_ids:
        out.append(f"it was measured on {', '.join(pol.hardware_ids) or 'no hardware'}, this model is on {hw}")
    return out


def _site_of(path: str, pol: Policy) -> str | None:
    """The policy's site a module's name is (its last component; ``norm (final)`` is ``norm``)."""
    last = path.rsplit(".", 1)[-1]
    for site in pol.site_norms:
        if site == last or site.split(" (", 1)[0] == last:
            return site
    return None


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


def apply_policy(model: nn.Module, policy, *, force: bool = False) -> ApplyReport:
    """Replace ``model``'s norm modules in place with :class:`PolicyNorm` modules driven by ``policy``
    (``normbench best ... --json``'s document, a path to it, or a :class:`Policy`); returns the :class:`ApplyReport`
    (``print`` it). Raises :class:`PolicyMismatch` for a policy made on another hardware id, torch or normbench
    version unless ``force=True`` (then recorded on each replaced module as ``policy_forced``)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_policy needs a torch.nn.Module, got {type(model).__name__}")
    if any(isinstance(m, PolicyNorm) for m in model.modules()):
        raise ValueError("this model already has a policy applied: call normbench.restore(model) first")
    pol = read(policy)
    device = _model_device(model)
    local = _hardware_id(device)
    problems = _mismatches(pol, local)
    hw_map = {}
    if problems and not force:
        raise PolicyMismatch(f"refusing to apply {pol.source}: " + "; ".join(problems)
                             + ". Make the policy here (`normbench bench --model ...` then `normbench best --model "
                               "... --json`), or pass force=True to apply it anyway (recorded on each module as "
                               "policy_forced)")
    if local not in pol.hardware_ids and force:
        if len(pol.hardware_ids) != 1:
            raise PolicyMismatch(f"{pol.source} answers for {len(pol.hardware_ids)} hardware ids "
                                 f"({', '.join(pol.hardware_ids) or 'none'}) and none is this model's ({local}): "
                                 "pick one with `normbench best ... --device HW --json`")
        hw_map[local] = pol.hardware_ids[0]
    found, left = find(model)
    report = ApplyReport(left=left, forced=tuple(problems) if force else ())
    plan = _Plan(pol, _refusals(pol, {f.norm for f in found}, device), report.forced, hw_map)
    report.refused = {f"{n}/{b}": why for (n, b), why in plan.refused.items()}
    shape_norms = {k[0] for k in pol.by_shape}
    used = set()
    for f in found:
        site = _site_of(f.path, pol)
        if site is not None:
            norm, layout, width = pol.site_norms[site]
            if (norm, layout, width) != (f.norm, f.layout, f.width):
                report.left.append({"module": f.path, "class": f.what, "reason": (
                    f"the policy's site {site} is {norm} {layout} over {width}, this module is {f.norm} {f.layout} "
                    f"over {f.width}: a policy for another model?")})
                continue
            used.add(site)
        elif f.norm not in shape_norms:
            report.left.append({"module": f.path, "class": f.what, "reason": (
                f"the policy has no site named {f.path.rsplit('.', 1)[-1]} and no shape of {f.norm}")})
            continue
        parent_name, _, child = f.path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PolicyNorm(f, site, plan))
        report.replaced.append({"module": f.path, "class": f.what, "norm": f.norm, "site": site, "width": f.width})
    for site, (norm, _layout, _width) in pol.site_norms.items():
        if site not in used:
            report.sites_unused[site] = (f"no module of this model computes it as a {norm} module"
                                         + (" (the residual add is in the block's forward, not a module)"
                                            if site.startswith("residual_add") else ""))
    return report


def restore(model: nn.Module) -> list[str]:
    """Undo :func:`apply_policy`: every :class:`PolicyNorm` in ``model`` replaced by its original module, holding
    the parameters and buffers the model has now (trained or loaded since). Returns the modules' names."""
    done = []
    for path, m in list(model.named_modules()):
        if not isinstance(m, PolicyNorm):
            continue
        orig = m.original
        for k, p in m._parameters.items():
            orig._parameters[k] = p
        for k, b in m._buffers.items():
            orig._buffers[k] = b
        for k, c in m._modules.items():
            orig._modules[k] = c
        orig.train(m.training)
        parent_name, _, child = path.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, orig)
        done.append(path)
    return done
