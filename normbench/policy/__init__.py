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

from dataclasses import dataclass, field

import torch
from torch import nn

from normbench.policy.dispatch import (  # noqa: F401  (re-exported: tests and scripts reach them here)
    FAMILY,
    PolicyFallbackWarning,
    PolicyNorm,
    _CachedOffset,
    _dims,
    _hardware_id,
    _OffsetCall,
    _Plan,
    _refusals,
    _StepAside,
)
from normbench.policy.reading import Choice, Policy, read
from normbench.policy.recognise import Found, find

__all__ = ["apply_policy", "restore", "read", "Policy", "Choice", "PolicyNorm", "PolicyMismatch",
           "PolicyFallbackWarning", "ApplyReport"]

class PolicyMismatch(ValueError):
    """A policy made on another hardware id, torch version or normbench version (``force=True`` overrides)."""


def _versions() -> dict:
    from normbench.versions import __version__, dist_version

    return {"normbench": __version__, "torch": dist_version("torch")}


@dataclass
class ApplyReport:
    """What :func:`apply_policy` did: modules replaced and left (with why), the policy's sites no module computes,
    backends refused here, and what ``force=True`` overrode."""

    replaced: list = field(default_factory=list)    # {"module", "class", "norm", "site", "width"}
    left: list = field(default_factory=list)        # {"module", "class", "reason"}
    sites_unused: dict = field(default_factory=dict)  # site -> why no module of the model computes it
    refused: dict = field(default_factory=dict)     # "norm/backend" -> reason
    forced: tuple = ()
    probe: str | None = None                        # why the apply-time probe forward found no shapes, if it did not

    def to_dict(self) -> dict:
        return {"replaced": self.replaced, "left": self.left, "sites_unused": self.sites_unused,
                "refused": self.refused, "forced": list(self.forced), "probe": self.probe}

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
        pins = [r for r in self.replaced if r.get("pinned")]
        if pins:
            lines.append(f"pinned to {pins[0]['pinned']['regime']}:")
            lines += [f"  {r['module']}: {r['pinned']['backend']} ({r['pinned']['dtype']})"
                      + (f": {r['pinned']['why']}" if r['pinned']['why'] else "") for r in pins]
        lines += [f"policy site {s}: {why}" for s, why in self.sites_unused.items()]
        lines += [f"backend {k} refused here: {why}" for k, why in self.refused.items()]
        if self.probe:
            lines.append(f"no sequence axes read ({self.probe}): regimes read on axis 1, as for (batch, seq, C)")
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


#: the default probe input of a causal LM: ``input_ids`` of shape (1, PROBE_LEN); 7 positions, so no site's sequence
#: length is mistaken for a head count (heads are rarely 7) and a sequence axis of size 1 is never ambiguous.
PROBE_LEN = 7


def _default_example(model: nn.Module, device: torch.device):
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if vocab is None and hasattr(config, "get_text_config"):
        vocab = getattr(config.get_text_config(), "vocab_size", None)
    if not isinstance(vocab, int):
        return None
    return {"input_ids": torch.zeros((1, PROBE_LEN), dtype=torch.long, device=device)}


def _example_len(example) -> int | None:
    t = example.get("input_ids") if isinstance(example, dict) else example
    if isinstance(t, (tuple, list)) and t:
        t = t[0]
    if isinstance(t, torch.Tensor) and t.dim() >= 2 and not t.is_floating_point():
        return int(t.shape[-1])
    return None


def _probe_shapes(model: nn.Module, found: list[Found], example) -> tuple[dict, str | None]:
    """path -> the input shape each found module saw in one forward of ``example`` (eval mode, no autograd; the
    modules' training flags and the RNG state restored), and why not, when the forward failed."""
    shapes: dict = {}
    hooks = []
    for f in found:
        def hook(_m, args, kwargs, path=f.path):
            x = args[0] if args else next(iter(kwargs.values()), None)
            if isinstance(x, torch.Tensor):
                shapes.setdefault(path, tuple(x.shape))
        hooks.append(f.module.register_forward_pre_hook(hook, with_kwargs=True))
    modes = [(m, m.training) for m in model.modules()]
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            model.eval()
            if isinstance(example, dict):
                model(**example)
            elif isinstance(example, (tuple, list)):
                model(*example)
            else:
                model(example)
    except Exception as exc:
        return shapes, f"the probe forward failed: {type(exc).__name__}: {exc}"
    finally:
        for h in hooks:
            h.remove()
        for m, mode in modes:
            m.training = mode
    return shapes, None


def _seq_axis(shape: tuple | None, length: int | None) -> int | None:
    """The one axis (not the last: the normalised one) of the probe's input whose size is the probe's sequence
    length; None when none or several are."""
    if shape is None or length is None:
        return None
    axes = [i for i, n in enumerate(shape[:-1]) if n == length]
    return axes[0] if len(axes) == 1 else None


def apply_policy(model: nn.Module, policy, *, force: bool = False, example=None, warmup=True,
                 pin: str | None = None) -> ApplyReport:
    """Replace ``model``'s norm modules in place with :class:`PolicyNorm` modules driven by ``policy``
    (``normbench best ... --json``'s document, a path to it, or a :class:`Policy`); returns the :class:`ApplyReport`
    (``print`` it). Raises :class:`PolicyMismatch` for a policy made on another hardware id, torch or normbench
    version unless ``force=True`` (then recorded on each replaced module as ``policy_forced``).

    ``example``: an input of one forward (a tensor, a tuple of arguments or a dict of keyword arguments) whose
    integer ``input_ids`` (its last axis the sequence length) the probe runs to find each site's sequence axis;
    default ``input_ids`` of shape (1, :data:`PROBE_LEN`) for a model with a ``config.vocab_size``. ``warmup``: True
    runs each chosen implementation once at the policy's regimes (compiles and autotunes here, not in a call),
    False none, or a list of (batch, seq) to run instead. ``pin``: a regime the policy answers for (``decode-8``,
    ``prefill-1x2048``, ...): each site runs that regime's answer at the model's dtype for every call, with no
    per-call dispatch (a call costs what the implementation called bare costs); every implementation computes the
    same function, so other shapes stay correct, only their speed is the pinned regime's."""
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
    if pin is not None:
        regimes = sorted({k[1] for k in pol.by_site})
        if pin not in regimes:
            raise ValueError(f"pin={pin!r}: the policy answers for the regimes {', '.join(regimes) or 'none'} "
                             "(a policy for a model's sites: `normbench best --model ... --json`)")
    found, left = find(model)
    report = ApplyReport(left=left, forced=tuple(problems) if force else ())
    refused = _refusals(pol, {f.norm for f in found}, device)
    plan = _Plan(pol, {device.type: refused}, report.forced, hw_map, warmup=warmup, pin=pin)
    plan.hw_by_device[str(device)] = hw_map.get(local, local)
    plan.warned |= {(device.type, f.norm) for f in found}
    report.refused = {f"{n}/{b}": why for (n, b), why in refused.items()}
    if example is None:
        example = _default_example(model, device)
    shapes, report.probe = ({}, "no example input (pass example=...)") if example is None else \
        _probe_shapes(model, found, example)
    length = _example_len(example) if example is not None else None
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
            answers = {c.backend for k, c in pol.by_site.items() if k[0] == site}
            if answers == {"eager"}:
                report.left.append({"module": f.path, "class": f.what, "reason": (
                    f"the policy's answer for site {site} is eager in every regime, dtype and pass")})
                continue
        elif f.norm not in shape_norms:
            report.left.append({"module": f.path, "class": f.what, "reason": (
                f"the policy has no site named {f.path.rsplit('.', 1)[-1]} and no shape of {f.norm}")})
            continue
        shape = shapes.get(f.path)
        axis = _seq_axis(shape, length)
        parent_name, _, child = f.path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = PolicyNorm(f, site, plan, shape, axis)
        setattr(parent, child, new)
        report.replaced.append({"module": f.path, "class": f.what, "norm": f.norm, "site": site, "width": f.width,
                                "probe_shape": list(shape) if shape else None, "seq_axis": axis,
                                **({"pinned": new.pinned} if pin is not None else {})})
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
