"""NormSpec and the discovery of norms through the ``normbench.norms`` entry-point group."""

from __future__ import annotations

import difflib
import importlib
import os
import re
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Mapping

import torch
from torch import nn

ENTRY_POINT_GROUP = "normbench.norms"
#: Set to 1 to load only normbench's own norms (third-party plugins are skipped).
DISABLE_PLUGINS_ENV = "NORMBENCH_DISABLE_PLUGINS"

LAYOUTS = ("tokens", "images")
KINDS = ("activation", "weight", "attention", "residual", "softmax")
FAMILIES = ("features", "batch", "groups", "pointwise", "weight", "attention", "baseline", "softmax")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class BackendUnavailable(RuntimeError):
    """A backend exists for a norm but cannot run here (no GPU, missing package, ...)."""


@dataclass(frozen=True)
class Paper:
    """The paper a norm comes from."""

    title: str
    authors: str
    year: int
    url: str

    def to_dict(self) -> dict:
        return {"title": self.title, "authors": self.authors, "year": self.year, "url": self.url}


@dataclass(frozen=True)
class Backend:
    """One implementation of a norm besides eager PyTorch.

    ``build(eager_module, spec) -> nn.Module`` must return a module with the same parameters and
    ``state_dict`` keys as ``eager_module`` (usually by sharing them: see ``adopt_state``).
    ``available() -> str | None`` returns ``None`` when the backend can run here, else the reason it cannot.
    Either may be a ``"package.module:attr"`` string, imported only when first used.
    """

    name: str
    build: Callable[..., nn.Module] | str
    available: Callable[[], str | None] | str | None = None


def _resolve(obj):
    if isinstance(obj, str):
        mod, _, attr = obj.partition(":")
        target = importlib.import_module(mod)
        for part in attr.split("."):
            target = getattr(target, part)
        return target
    return obj


def adopt_state(wrapper: nn.Module, module: nn.Module) -> None:
    """Register ``module``'s children, parameters (``None`` slots too) and buffers on ``wrapper`` under their names.

    A backend module built this way shares the eager module's parameters and has exactly its ``state_dict`` keys.
    """
    for name, child in module.named_children():
        wrapper.add_module(name, child)
    for name, p in module._parameters.items():
        wrapper.register_parameter(name, p)
    for name, b in module.named_buffers(recurse=False):
        wrapper.register_buffer(name, b, persistent=name not in module._non_persistent_buffers_set)


def _compile_available() -> str | None:
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0 or newer"
    return None


class _Compiled(nn.Module):
    """Eager module whose forward goes through ``torch.compile``; parameters and state_dict unchanged."""

    def __init__(self, module: nn.Module, **compile_kwargs):
        super().__init__()
        # Stored outside _modules so state_dict keys stay those of the eager module.
        object.__setattr__(self, "inner", module)
        adopt_state(self, module)
        object.__setattr__(self, "_compiled", torch.compile(module, **compile_kwargs))

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def train(self, mode: bool = True):
        super().train(mode)
        self.inner.train(mode)
        return self

    def extra_repr(self) -> str:
        return f"compiled={type(self.inner).__name__}"


def _compile_build(module: nn.Module, spec: "NormSpec") -> nn.Module:
    return _Compiled(module)


COMPILE_BACKEND = Backend("compile", _compile_build, _compile_available)


@dataclass(frozen=True)
class NormSpec:
    """Everything normbench knows about one normalization: metadata, formula and how to build it.

    ``factory(num_features, layout=..., **kwargs) -> nn.Module`` builds the eager module.
    For ``kind == "weight"`` the module is a reparameterized ``Linear`` (tokens) or ``Conv2d``
    (images) mapping C to C features; pass ``layer=`` to wrap an existing one.
    For ``kind == "attention"`` the module maps ``(q, k)`` to ``(q', k')`` over ``[..., head_dim]``.
    For ``kind == "residual"`` the module maps ``(x, residual)`` to ``(norm(x + residual), x + residual)``.
    For ``kind == "softmax"`` the module maps scores ``[..., C]`` to a distribution over C (no parameters); such
    norms are benchmarked on their own shape set and never trained as a model's layer norm.
    """

    name: str
    title: str
    paper: Paper
    family: str
    kind: str
    layouts: tuple[str, ...]
    formula: str
    factory: Callable[..., nn.Module] | str
    batch_dependent: bool = False
    running_state: bool = False
    notes: str = ""
    extra_backends: tuple[Backend, ...] = ()
    #: Keyword arguments the factory needs for a given use (for example ``depth`` for LayerNorm Scaling).
    default_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Filled in by discovery: the distribution that provided the spec and its version.
    package: str = "normbench"
    package_version: str = ""

    def validate(self) -> None:
        """Raise ``ValueError`` naming every problem with this spec's declared metadata."""
        problems = []
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            problems.append(f"name {self.name!r} must match {NAME_RE.pattern}")
        if not isinstance(self.paper, Paper):
            problems.append("paper must be a normbench.Paper(title, authors, year, url)")
        elif not (self.paper.url.startswith("https://") or self.paper.url.startswith("http://")):
            problems.append(f"paper url {self.paper.url!r} must be an http(s) link")
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} must be one of {KINDS}")
        if self.family not in FAMILIES:
            problems.append(f"family {self.family!r} must be one of {FAMILIES}")
        if not self.layouts or any(lay not in LAYOUTS for lay in self.layouts):
            problems.append(f"layouts {self.layouts!r} must be a non-empty subset of {LAYOUTS}")
        if not self.formula:
            problems.append("formula must be given in plain text")
        if not (callable(self.factory) or isinstance(self.factory, str)):
            problems.append("factory must be callable or a 'module:attr' string")
        names = [b.name for b in self.extra_backends]
        if len(set(names)) != len(names) or {"eager", "compile"} & set(names):
            problems.append(f"extra backends {names} must be unique and not 'eager' or 'compile'")
        if problems:
            raise ValueError(f"invalid NormSpec {self.name!r}: " + "; ".join(problems))

    @property
    def backends(self) -> tuple[str, ...]:
        return ("eager", "compile") + tuple(b.name for b in self.extra_backends)

    def _backend(self, name: str) -> Backend | None:
        if name == "compile":
            return COMPILE_BACKEND
        for b in self.extra_backends:
            if b.name == name:
                return b
        raise KeyError(f"norm {self.name!r} has no backend {name!r}; it has {', '.join(self.backends)}")

    def backend_unavailable(self, backend: str) -> str | None:
        """``None`` if ``backend`` can run on this machine, else the reason it cannot."""
        if backend == "eager":
            return None
        b = self._backend(backend)
        if b.available is None:
            return None
        try:
            return _resolve(b.available)()
        except Exception as exc:  # a broken availability probe means unavailable, not a crash
            return f"{type(exc).__name__}: {exc}"

    def create(self, num_features: int, layout: str = "tokens", backend: str = "eager", **kwargs) -> nn.Module:
        """Build the norm over ``num_features`` channels in ``layout``, implemented by ``backend``."""
        if layout not in self.layouts:
            raise ValueError(
                f"norm {self.name!r} supports layouts {self.layouts}, not {layout!r}"
            )
        if backend not in self.backends:
            raise KeyError(f"norm {self.name!r} has no backend {backend!r}; it has {', '.join(self.backends)}")
        reason = self.backend_unavailable(backend)
        if reason is not None:
            raise BackendUnavailable(f"backend {backend!r} of norm {self.name!r} is unavailable here: {reason}")
        args = {**self.default_kwargs, **kwargs}
        module = _resolve(self.factory)(num_features, layout=layout, **args)
        if backend == "eager":
            return module
        return _resolve(self._backend(backend).build)(module, self)

    def to_dict(self) -> dict:
        """JSON-ready metadata; result records embed it so they stay readable without the plugin."""
        return {
            "name": self.name,
            "title": self.title,
            "paper": self.paper.to_dict() if isinstance(self.paper, Paper) else None,
            "family": self.family,
            "kind": self.kind,
            "layouts": list(self.layouts),
            "formula": self.formula,
            "batch_dependent": self.batch_dependent,
            "running_state": self.running_state,
            "backends": list(self.backends),
            "package": self.package,
            "package_version": self.package_version,
            "notes": self.notes,
        }


@dataclass
class PluginError:
    """A norm entry point that could not be loaded, with the reason."""

    name: str
    source: str
    error: str


class Registry:
    """Lazily discovered norms; broken plugins are recorded in ``errors`` and skipped."""

    def __init__(self) -> None:
        self._specs: dict[str, NormSpec] | None = None
        self.errors: list[PluginError] = []
        self._lock = threading.Lock()

    def _discover(self) -> dict[str, NormSpec]:
        specs: dict[str, NormSpec] = {}
        errors: list[PluginError] = []
        no_plugins = os.environ.get(DISABLE_PLUGINS_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        eps = sorted(metadata.entry_points().select(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        for ep in eps:
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            dist_version = dist.version if dist is not None else ""
            builtin = ep.value.startswith("normbench.")
            if no_plugins and not builtin:
                continue
            source = f"{ep.value} ({dist_name} {dist_version})".strip()
            try:
                spec = ep.load()
                if callable(spec) and not isinstance(spec, NormSpec):
                    spec = spec()
                if not isinstance(spec, NormSpec):
                    raise TypeError(f"entry point must name a normbench.NormSpec, got {type(spec).__name__}")
                if spec.name != ep.name:
                    raise ValueError(f"entry point name {ep.name!r} differs from spec name {spec.name!r}")
                spec.validate()
                if not builtin:
                    spec = _with_package(spec, dist_name, dist_version)
                if spec.name in specs:
                    raise ValueError(f"norm {spec.name!r} is already provided by {specs[spec.name].package}")
                specs[spec.name] = spec
            except Exception as exc:
                errors.append(PluginError(ep.name, source, f"{type(exc).__name__}: {exc}"))
        if not any(s.package == "normbench" for s in specs.values()) and not any(
            e.source.startswith("normbench.") for e in errors
        ):
            # Running from a source tree that was never installed: no entry points are visible.
            from normbench.norms import specs as builtin_specs

            for spec in builtin_specs.ALL:
                specs.setdefault(spec.name, spec)
        self.errors = errors
        return specs

    @property
    def specs(self) -> dict[str, NormSpec]:
        with self._lock:
            if self._specs is None:
                self._specs = self._discover()
            return self._specs

    def reload(self) -> None:
        with self._lock:
            self._specs = None

    def names(self) -> list[str]:
        return sorted(self.specs)

    def get(self, name: str) -> NormSpec:
        specs = self.specs
        if name in specs:
            return specs[name]
        key = name.lower().replace("-", "_")
        if key in specs:
            return specs[key]
        close = difflib.get_close_matches(key, list(specs), n=5, cutoff=0.5)
        broken = [e for e in self.errors if e.name == key]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known norms: {', '.join(sorted(specs))}"
        if broken:
            hint = f"; plugin {key!r} failed to load: {broken[0].error}"
        raise KeyError(f"unknown norm {name!r}{hint}")


def _with_package(spec: NormSpec, package: str, version: str) -> NormSpec:
    from dataclasses import replace

    return replace(spec, package=package, package_version=version)


REGISTRY = Registry()


def list_norms() -> list[str]:
    """Names of every registered norm, built-in and plugin, sorted."""
    return REGISTRY.names()


def get_norm(name: str) -> NormSpec:
    """The ``NormSpec`` called ``name``; an unknown name raises ``KeyError`` listing close matches."""
    return REGISTRY.get(name)


def plugin_errors() -> list[PluginError]:
    """Entry points that failed to load in the last discovery."""
    REGISTRY.specs
    return list(REGISTRY.errors)
