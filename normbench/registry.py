"""The types a norm is declared with (NormSpec, Backend, Paper) and the implementation hash of their code.

Discovery (finding the specs through the ``normbench.norms`` entry-point group) is ``normbench.discovery``; this
module keeps the name ``registry`` because norm, kernel and model modules whose bytes are the identity of committed
records import ``NormSpec``, ``Backend``, ``Paper`` and ``adopt_state`` from here."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import nn

ENTRY_POINT_GROUP = "normbench.norms"
#: Set to 1 to load only normbench's own norms (third-party plugins are skipped).
DISABLE_PLUGINS_ENV = "NORMBENCH_DISABLE_PLUGINS"

LAYOUTS = ("tokens", "images")
#: The kinds of device a backend can run on (``torch.device(...).type``); the check gate keeps a verdict per kind.
DEVICE_KINDS = ("cpu", "cuda")
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
    ``devices``: the device kinds (:data:`DEVICE_KINDS`) it runs on, where the check gate checks it against eager;
    a tuple, or a callable (or ``"package.module:attr"`` string) returning one, read when asked (a Triton backend
    runs on the CPU only under ``TRITON_INTERPRET=1``: :func:`triton_devices`).
    """

    name: str
    build: Callable[..., nn.Module] | str
    available: Callable[[], str | None] | str | None = None
    #: Modules (dotted names) whose source, besides the builder's own module, makes this backend's numbers: its
    #: kernels and the helpers they use. Together with the norm's own modules and the torch/Triton versions they are
    #: the backend's implementation hash (``NormSpec.impl_hash``). ``None`` (a plugin that does not say): every
    #: ``.py`` beside the builder and the availability probe.
    sources: tuple[str, ...] | None = None
    devices: tuple[str, ...] | Callable[[], tuple[str, ...]] | str = DEVICE_KINDS


def triton_devices() -> tuple[str, ...]:
    """Where a Triton backend runs: CUDA, and the CPU too under ``TRITON_INTERPRET=1`` (Triton's interpreter; read
    live, as the kernels' own availability probe reads it)."""
    interpret = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")
    return ("cpu", "cuda") if interpret else ("cuda",)


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
        from normbench.versions import triton_version

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
    #: Whether the norm subtracts a mean (LayerNorm, GroupNorm, BatchNorm: it keeps two float32 statistics per row
    #: for its backward, mean and rstd) or not (RMSNorm: one). The bytes model reads it (``measure.bytes_model``).
    #: ``None``: not declared; the built-ins that predate the field are named in ``bytes_model.CENTRING`` (their
    #: specs are not edited: a new norm declares it here instead), and any other norm counts one statistic.
    centring: bool | None = None

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
        if self.centring is not None and not isinstance(self.centring, bool):
            problems.append(f"centring {self.centring!r} must be True, False or None")
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

    def backend_devices(self, backend: str) -> tuple[str, ...]:
        """The device kinds ``backend`` runs on (eager and compile: every kind); raises ``ValueError`` for a
        declaration that names an unknown kind."""
        if backend == "eager":
            return DEVICE_KINDS
        declared = self._backend(backend).devices
        kinds = declared if isinstance(declared, tuple) else tuple(_resolve(declared)())
        bad = [k for k in kinds if k not in DEVICE_KINDS]
        if bad or not kinds:
            raise ValueError(f"backend {backend!r} of norm {self.name!r} declares devices {kinds!r}; each must be "
                             f"one of {DEVICE_KINDS}")
        return tuple(kinds)

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
