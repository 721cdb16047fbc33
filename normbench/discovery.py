"""Discovery of norms: the ``normbench.norms`` entry-point group (built-ins and plugins), checked and de-clashed."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata

from normbench.registry import DISABLE_PLUGINS_ENV, ENTRY_POINT_GROUP, NormSpec
from normbench.versions import __version__


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


def report_plugin_problems(file=None, errors: bool = True) -> None:
    """Print plugin load errors and slow plugin imports to stderr (before any work, so they are seen first)."""
    file = file or sys.stderr
    for e in REGISTRY.errors if errors else ():
        print(f"normbench: plugin {e.name!r} from {e.source} was skipped (not loaded): {e.error}", file=file)
    for i in REGISTRY.slow_imports():
        print(f"normbench: plugin {i.name!r} from {i.package} {i.version} took {i.load_s:.1f}s to import "
              f"(more than {_slow_threshold():g}s, {SLOW_IMPORT_ENV}); every normbench command pays this. "
              f"NORMBENCH_DISABLE_PLUGINS=1 skips plugins", file=file)
