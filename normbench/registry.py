"""NormSpec and the discovery of norms through the ``normbench.norms`` entry-point group."""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import threading
import time
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
    #: Modules (dotted names) whose source, besides the builder's own module, makes this backend's numbers: its
    #: kernels and the helpers they use. Together with the norm's own modules and the torch/Triton versions they are
    #: the backend's implementation hash (``NormSpec.impl_hash``). ``None`` (a plugin that does not say): every
    #: ``.py`` beside the builder and the availability probe.
    sources: tuple[str, ...] | None = None


def resolve(obj):
    """The object a ``"package.module:attr.path"`` string names (its module imported now), or ``obj`` itself.

    Specs, backends and executor tasks name callables this way so they import only when used (and pickle by name)."""
    if isinstance(obj, str):
        mod, _, attr = obj.partition(":")
        target = importlib.import_module(mod)
        for part in attr.split("."):
            target = getattr(target, part)
        return target
    return obj


_resolve = resolve


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


#: ``torch.compile`` of the eager module behind a fallback watch (``normbench.kernels.compile_watch``); its hash covers
#: that module alone (plus the norm's own sources and the torch/Triton versions, as for every backend).
COMPILE_BACKEND = Backend("compile", "normbench.kernels.compile_watch:build",
                          "normbench.kernels.compile_watch:unavailable", sources=())

# --- implementation hash --------------------------------------------------------------------------------------------

_FILE_HASHES: dict[tuple, str] = {}


def _file_digest(path: str) -> str:
    """sha256 of a source file's bytes, cached by (path, mtime, size) so an edited file is hashed again."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _FILE_HASHES:
        with open(path, "rb") as f:
            _FILE_HASHES[key] = hashlib.sha256(f.read()).hexdigest()
    return _FILE_HASHES[key]


def _module_file(module) -> str | None:
    path = getattr(module, "__file__", None)
    if not path:
        return None
    if path.endswith((".pyc", ".pyo")):
        src = path[:-1]
        return src if os.path.exists(src) else path
    return path


def _top(name: str) -> str:
    return name.partition(".")[0]


def _eager_modules(spec: "NormSpec") -> set[str]:
    """Modules holding the eager implementation: the factory's, those of the classes it builds (with their
    non-torch bases), and the same-package modules whose functions and classes those modules use."""
    names: set[str] = set()
    factory = _resolve(spec.factory)
    if getattr(factory, "__module__", None):
        names.add(factory.__module__)
    try:
        layout = spec.layouts[0] if spec.layouts else "tokens"
        built = factory(8, layout=layout, **dict(spec.default_kwargs))
        classes = {type(m) for m in built.modules()} if isinstance(built, nn.Module) else {type(built)}
    except Exception:  # a factory that cannot build at width 8: its module's source still names it
        classes = set()
    for cls in classes:
        for base in cls.__mro__:
            if base.__module__ and _top(base.__module__) not in ("torch", "builtins"):
                names.add(base.__module__)
    # one level of same-package helpers (e.g. normbench.norms._base used by normbench.norms.features)
    for name in list(names):
        try:  # import, not sys.modules: the hash must not depend on what happens to be imported (or purged) now
            mod = importlib.import_module(name)
        except Exception:
            mod = None
        for key, obj in vars(mod).items() if mod is not None else ():
            if key.startswith("__"):  # torch.compile adds __compiled_fn_N / __resume_at_N to the globals it traces
                continue
            owner = getattr(obj, "__module__", None) if (inspect.isfunction(obj) or inspect.isclass(obj)) else None
            if isinstance(owner, str) and owner != name and _top(owner) == _top(name):
                names.add(owner)
            elif inspect.ismodule(obj) and _top(obj.__name__) == _top(name) and obj.__name__ != _top(name):
                names.add(obj.__name__)
    return names


def _source_file(module_name: str) -> str | None:
    """A module's source file, found without importing it (a Triton kernel module imports Triton when imported)."""
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return origin if origin and os.path.isfile(origin) else None


def _builder_module(fn) -> str | None:
    return fn.partition(":")[0] if isinstance(fn, str) else getattr(fn, "__module__", None)


def source_lines(module_names) -> list[str]:
    """Implementation-hash lines of these modules (sorted, each once): name and sha256 of the source file, found
    without importing the module; ``missing`` when it has no source here."""
    lines = []
    for name in sorted({n for n in module_names if n}):
        path = _source_file(name)
        lines.append(f"source {name} {_file_digest(path) if path else 'missing'}")
    return lines


def _backend_files(backend: "Backend") -> list[str]:
    """Source files of a backend that does not declare ``sources``: every ``.py`` beside the module defining its
    builder (its kernels live there), or only that module's file when it is a top-level module or the core
    ``normbench`` package itself."""
    files: set[str] = set()
    for fn in (backend.build, backend.available):
        if fn is None:
            continue
        mod_name = _builder_module(fn)
        if not mod_name:
            continue
        module = importlib.import_module(mod_name)
        path = _module_file(module)
        if path is None:
            continue
        package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
        if package and package != "normbench":
            folder = os.path.dirname(path)
            files.update(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))
        else:
            files.add(path)
    return sorted(files)


def _library_versions(libraries: dict | None = None) -> list[str]:
    """The library lines of an implementation hash: this process's torch and Triton (as provenance reports them),
    or ``libraries`` (``{"torch": ..., "triton": ...}``, a record's provenance) to recompute the hash that today's
    sources would have had on the machine that made the record."""
    if libraries is None:
        from normbench.results.provenance import triton_version

        libraries = {"torch": torch.__version__, "triton": triton_version()}
    return [f"torch={libraries.get('torch')}", f"triton={libraries.get('triton')}"]



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

    def impl_hash(self, backend: str = "eager", libraries: dict | None = None) -> str:
        """16 hex digits naming this implementation: a sha256 of the norm's module sources (the factory's module,
        the modules of the classes it builds and the same-package helpers they use), ``backend``'s sources (its
        builder's module and the modules it declares in ``Backend.sources``: its kernels; for a backend declaring
        none, every ``.py`` beside its builder) and the torch and Triton versions: this process's, or those given
        as ``libraries={"torch": ..., "triton": ...}`` (a record's provenance: is its code still today's code?).

        Stable across processes and machines for the same code; any edit to those sources changes it, so a record
        id that includes it is re-measured after the code changes. The ``.py`` paths are hashed relative to nothing
        (only module names and file contents), so the same code installed elsewhere hashes the same.
        """
        if backend not in self.backends:
            raise KeyError(f"norm {self.name!r} has no backend {backend!r}; it has {', '.join(self.backends)}")
        h = hashlib.sha256()
        for name in sorted(_eager_modules(self)):
            module = sys.modules.get(name) or importlib.import_module(name)
            path = _module_file(module)
            h.update(f"module {name} {_file_digest(path) if path else 'no-source'}\n".encode())
        if backend != "eager":
            h.update(f"backend {backend}\n".encode())
            b = self._backend(backend)
            if b.sources is not None:
                for line in source_lines((_builder_module(b.build), *b.sources)):
                    h.update(f"{line}\n".encode())
            else:
                for path in _backend_files(b):
                    h.update(f"file {os.path.basename(path)} {_file_digest(path)}\n".encode())
        for line in _library_versions(libraries):
            h.update(f"{line}\n".encode())
        return h.hexdigest()[:16]

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
    #: The distribution that declared the entry point ("?" when unknown).
    package: str = "?"


@dataclass
class LoadInfo:
    """Where a registered norm came from and what loading it cost."""

    name: str
    package: str
    version: str
    source: str           # the entry point's value, e.g. "my_pkg.norms:SPEC"
    builtin: bool
    load_s: float         # seconds spent importing and building the spec


#: A plugin entry point whose import takes longer than this (seconds) is reported on stderr by every command, with
#: its time; ``NORMBENCH_SLOW_IMPORT_S`` overrides it.
SLOW_IMPORT_S = 2.0
SLOW_IMPORT_ENV = "NORMBENCH_SLOW_IMPORT_S"
BUILTIN_DIST = "normbench"


def _canonical_dist(name: str | None) -> str:
    return re.sub(r"[-_.]+", "-", (name or "").strip()).lower()


def _plugins_disabled() -> bool:
    return os.environ.get(DISABLE_PLUGINS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _slow_threshold() -> float:
    try:
        return float(os.environ.get(SLOW_IMPORT_ENV, SLOW_IMPORT_S))
    except ValueError:
        return SLOW_IMPORT_S


def _normbench_version() -> str:
    from normbench import __version__

    return __version__


class Registry:
    """Lazily discovered norms; broken or clashing plugins are recorded in ``errors`` and skipped.

    Built-in norms are the entry points whose distribution is normbench itself (not whatever the entry point's value
    text says), and they always win: a plugin that declares a built-in's name, or a name another plugin also
    declares, is rejected without being imported. Whatever a plugin prints while it is imported goes to stderr, so
    machine-readable stdout stays clean.
    """

    def __init__(self) -> None:
        self._specs: dict[str, NormSpec] | None = None
        self.errors: list[PluginError] = []
        self.info: dict[str, LoadInfo] = {}
        self._lock = threading.Lock()

    def _load_one(self, ep, builtin: bool) -> NormSpec:
        with contextlib.redirect_stdout(sys.stderr):
            spec = ep.load()
            if callable(spec) and not isinstance(spec, NormSpec):
                spec = spec()
        if not isinstance(spec, NormSpec):
            raise TypeError(f"entry point must name a normbench.NormSpec, got {type(spec).__name__}")
        if spec.name != ep.name:
            raise ValueError(f"entry point name {ep.name!r} differs from spec name {spec.name!r}")
        spec.validate()
        return spec

    def _discover(self) -> dict[str, NormSpec]:
        specs: dict[str, NormSpec] = {}
        info: dict[str, LoadInfo] = {}
        errors: list[PluginError] = []
        no_plugins = _plugins_disabled()
        version = _normbench_version()
        builtin_eps, plugin_eps = [], []
        for ep in metadata.entry_points().select(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            is_builtin = _canonical_dist(dist_name) == BUILTIN_DIST
            (builtin_eps if is_builtin else plugin_eps).append((ep, dist_name or "?", dist.version if dist else ""))
        # Built-ins first: their names are taken before any plugin is looked at.
        for ep, dist_name, _ in sorted(builtin_eps, key=lambda t: t[0].name):
            source = f"{ep.value} ({dist_name} {version})"
            t0 = time.perf_counter()
            try:
                spec = self._load_one(ep, builtin=True)
                spec = _with_package(spec, BUILTIN_DIST, version)
                specs[spec.name] = spec
                info[spec.name] = LoadInfo(spec.name, BUILTIN_DIST, version, ep.value, True, time.perf_counter() - t0)
            except Exception as exc:
                errors.append(PluginError(ep.name, source, f"{type(exc).__name__}: {exc}", BUILTIN_DIST))
        builtin_names = set(specs) | {e.name for e in errors}
        if not builtin_eps:
            # Running from a source tree that was never installed: no entry points of normbench are visible.
            from normbench.norms import specs as builtin_specs

            for spec in builtin_specs.ALL:
                specs.setdefault(spec.name, _with_package(spec, BUILTIN_DIST, version))
                info.setdefault(spec.name, LoadInfo(spec.name, BUILTIN_DIST, version,
                                                    f"normbench.norms.specs ({spec.name})", True, 0.0))
            builtin_names = set(specs)
        if not no_plugins:
            claimants: dict[str, list[str]] = {}
            for ep, dist_name, _ in plugin_eps:
                claimants.setdefault(ep.name, []).append(dist_name)
            for ep, dist_name, dist_version in sorted(plugin_eps, key=lambda t: (t[0].name, t[1])):
                source = f"{ep.value} ({dist_name} {dist_version})".strip()
                if ep.name in builtin_names:
                    errors.append(PluginError(ep.name, source, (
                        f"NameClash: plugin distribution {dist_name!r} declares the norm name {ep.name!r}, which is a "
                        f"built-in norm of normbench; built-in names cannot be replaced. Rename the entry point (and "
                        f"the spec's name) in {dist_name}'s pyproject.toml, e.g. "
                        f"'{_suggest(ep.name, dist_name)}'."), dist_name))
                    continue
                others = sorted({d for d in claimants[ep.name] if d != dist_name})
                if others:
                    errors.append(PluginError(ep.name, source, (
                        f"NameClash: plugin distributions {dist_name!r} and {', '.join(map(repr, others))} both "
                        f"declare the norm name {ep.name!r}; neither is loaded, so no result is ever recorded under "
                        f"a name that means two things. Rename the entry point (and the spec's name) in "
                        f"{dist_name}'s pyproject.toml, e.g. '{_suggest(ep.name, dist_name)}', or uninstall one."),
                        dist_name))
                    continue
                t0 = time.perf_counter()
                try:
                    spec = self._load_one(ep, builtin=False)
                    spec = _with_package(spec, dist_name, dist_version)
                    specs[spec.name] = spec
                    info[spec.name] = LoadInfo(spec.name, dist_name, dist_version, ep.value, False,
                                               time.perf_counter() - t0)
                except Exception as exc:
                    errors.append(PluginError(ep.name, source, f"{type(exc).__name__}: {exc}", dist_name))
        self.errors = errors
        self.info = info
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

    def loaded_plugins(self) -> dict[str, str]:
        """{distribution: version} of the plugin distributions whose norms are loaded (normbench excluded)."""
        self.specs
        return dict(sorted({i.package: i.version for i in self.info.values() if not i.builtin}.items()))

    def slow_imports(self, threshold: float | None = None) -> list[LoadInfo]:
        """Plugin entry points whose import took longer than ``threshold`` seconds (default ``SLOW_IMPORT_S``)."""
        self.specs
        limit = _slow_threshold() if threshold is None else threshold
        return [i for i in self.info.values() if not i.builtin and i.load_s > limit]

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


def _suggest(name: str, dist: str) -> str:
    prefix = re.sub(r"[^a-z0-9]+", "_", dist.lower()).strip("_")
    prefix = prefix[len("normbench_"):] if prefix.startswith("normbench_") else prefix
    return f"{prefix}_{name}" if prefix else f"my_{name}"


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
