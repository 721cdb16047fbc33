"""Building the site: read and validate records, render every page, copy assets and records, swap in atomically."""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from normbench.processes import Pool, can_fork, held, phase
from normbench.results.readcache import PickleDir, sweep_orphans
from normbench.site import fmt
from normbench.site.pages import NAV, Site, SiteInfo, norm_file, read_docs
from normbench.site.records import Rejected, load_results
from normbench.site.tables import data_script

#: A directory holding this file was written by ``normbench site build`` and may be replaced by the next build.
MARKER = ".normbench-site"
#: The record schema as published on the site (``normbench.records.schema.json_schema``).
SCHEMA_FILE = "normbench-record.schema.json"
# No inline script or style anywhere: scripts and styles come only from assets/ next to the pages (the only inline
# scripts are type=application/json data blocks, which never run).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "base-uri 'none'; form-action 'none'")


@dataclass
class BuildReport:
    out: Path
    pages: int
    records: int
    kernel: int
    accuracy: int
    files: int
    rejected: list[Rejected]
    superseded: int
    rendered: list[str] = None     # pages rendered by this build (the others came from the cache unchanged)
    reused: int = 0                # pages taken from the cache


    @property
    def index(self) -> Path:
        return self.out / "index.html"

    def summary(self) -> str:
        s = (f"site: {self.pages} pages from {self.records} records ({self.kernel} kernel, {self.accuracy} accuracy) "
             f"in {self.files} file(s); {len(self.rejected)} rejected")
        if self.superseded:
            s += f"; {self.superseded} superseded by newer records with the same id"
        if self.reused:
            s += f"; {len(self.rendered or ())} page(s) rendered, {self.reused} unchanged from the cache"
        return s + f" -> {self.out}"


def environment():
    """The Jinja environment of the site: templates from the package, every value autoescaped."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("normbench.site", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
    env.filters["safe_url"] = fmt.safe_url
    env.filters["metric"] = fmt.fmt_metric
    env.globals["norm_file"] = norm_file
    return env


def _charts():
    """The chart builders (``normbench.site.charts``: Altair + vl-convert), or None where they are not installed:
    the pages then say so instead of drawing."""
    try:
        from normbench.site import charts
    except ImportError:
        return None
    return charts


def _copy_tree(src, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name.startswith((".", "__")):
            continue
        if item.is_dir():
            _copy_tree(item, dest / item.name)
        else:
            (dest / item.name).write_bytes(item.read_bytes())


def _version() -> str:
    try:
        from normbench.versions import __version__

        return __version__
    except Exception:  # pragma: no cover - only when the package is half-installed
        return "?"


def _taken(entries) -> str:
    ts = sorted(e.timestamp[:10] for e in entries if len(e.timestamp) >= 10)
    if not ts:
        return "no data yet"
    return ts[0] if ts[0] == ts[-1] else f"{ts[0]} – {ts[-1]}"


def _check_out(out: Path, results: Path) -> None:
    out_r, res_r = out.resolve(), results.resolve()
    if out_r == res_r or out_r in res_r.parents:
        raise ValueError(f"--out {out} would replace the results at {results}; choose another output directory")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory; choose another output directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(f"--out {out} is a non-empty directory that normbench did not build (no {MARKER} file); "
                         "refusing to replace it: pass an empty or new directory")


def _jobs(jobs: int | None) -> int:
    """Processes to render pages in: ``jobs``, else ``NORMBENCH_SITE_JOBS``, else the CPUs this process may use."""
    if jobs is None:
        env = os.environ.get("NORMBENCH_SITE_JOBS", "")
        jobs = int(env) if env.isdigit() else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                               else os.cpu_count() or 1)
    return max(1, int(jobs))


# The pool's workers are forked from the building process and find the site here (set just before the fork).
_WORK: tuple | None = None


def _write_text(path: Path, text: str | bytes) -> None:
    """Write atomically (two jobs may write the same data file: the same bytes, never a torn file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _write_pages(site, env, common, tmp: Path, job, cache=None, glob: str = "") -> tuple:
    """Render the pages of one job into ``tmp``, or link them from ``cache`` where its digest is there:
    (digest or None, its files [(path, sha256, size)] or None, pages rendered, pages reused, figures drawn)."""
    from normbench.site import incremental

    site.data_files, site.extra_files = {}, {}
    pages = None
    digest = None
    if cache is not None:
        data = incremental.input_digest(site, job)
        if data is None:
            pages = list(site.run(job))
            data = incremental.context_digest(pages, site.data_files, site.extra_files)
            if job == ("overview",):
                data += f"|{common['info'].built}|{common['info'].n_records}|{common['info'].taken}"
        digest = cache.digest(glob, job, data)
        files = cache.materialize(digest, tmp)
        if files is not None:
            n = sum(1 for f in files if f[0].endswith(".html"))
            return digest, files, [], n
        if pages is None:
            site.data_files, site.extra_files = {}, {}
    if pages is None:
        pages = list(site.run(job))
    written, rendered = [], []
    for page in pages:
        ctx = {**common, **page.ctx, "title": page.title, "up": page.up, "active": page.active,
               "lead": page.lead, "crumbs": page.crumbs, "charts": page.charts}
        text = env.get_template(page.template).render(ctx)
        _write_text(tmp / page.path, data_script("nbPart", (page.part,), text) if page.part else text)
        written.append(page.path)
        rendered.append(page.path)
    for rel, value in sorted(site.data_files.items()):
        _write_text(tmp / rel, value.data_text() if hasattr(value, "data_text") else value)
        written.append(rel)
    for rel, value in sorted(site.extra_files.items()):
        _write_text(tmp / rel, value)
        written.append(rel)
    files = cache.store(tmp, written) if cache is not None else None
    return digest, files, rendered, 0


def _work(i: int) -> tuple:
    site, env, common, tmp, jobs, cache, glob = _WORK
    phase("render")
    out = _write_pages(site, env, common, tmp, jobs[i], cache, glob)
    used = sorted(site.fig_store.used) if site.fig_store is not None else []
    return (*out, used)


def _can_fork() -> bool:
    """Whether pages may render in forked processes: where fork exists and this process has not loaded vl-convert
    (a forked copy of its started JavaScript runtime hangs on its first figure). A process that drew figures before
    (a test session, a second build in one process) builds serially, with the same bytes."""
    import sys

    return can_fork() and "vl_convert" not in sys.modules


def _render_all(site, env, common, tmp: Path, n_jobs: int, cache=None, glob: str = "") -> tuple:
    """Every page, in ``n_jobs`` processes (forked, so they share the loaded records); the pages and data files are
    the same bytes whatever the number (each job depends on the site's data alone; tests compare). With ``cache``,
    a job whose digest is there is linked from it instead (``incremental``). (pages, rendered paths, reused pages,
    the manifest of this build's jobs)."""
    global _WORK
    jobs = site.jobs()
    manifest: dict[str, list] = {}
    rendered: list[str] = []
    n_pages = n_reused = 0
    used_figs: set[str] = set()

    def take(res):
        nonlocal n_pages, n_reused
        digest, files, ren, reused, figs = res
        if digest is not None and files is not None:
            manifest[digest] = files
        rendered.extend(ren)
        n_pages += len(ren) + reused
        n_reused += reused
        used_figs.update(figs)

    if n_jobs > 1 and len(jobs) > 1 and _can_fork():
        # Longest first, so no worker is left with a big job at the end: the claims and softmax job (one job, the
        # longest of a rebuild: the claims' statistics and softmax's every-machine table), then a norm's pages (they
        # draw its figures). Started among the last, it left one worker alone for its 2 s at 100 machines.
        first = ("claims_page", "norm_device", "norm", "compare_page")
        order = sorted(range(len(jobs)), key=lambda i: (first.index(jobs[i][0]) if jobs[i][0] in first else 3, i))
        _WORK = (site, env, common, tmp, jobs, cache, glob)
        try:
            with Pool(_work, min(n_jobs, len(jobs)), what="page pool") as pool:
                for _, res in pool.results(order):
                    take(res)
        finally:
            _WORK = None
            if cache is not None:   # a worker killed mid-write (an interruption) leaves its temporary file
                sweep_orphans()
    else:
        for job in jobs:
            phase("render")
            take((*_write_pages(site, env, common, tmp, job, cache, glob),
                  sorted(site.fig_store.used) if site.fig_store is not None else []))
    return n_pages, sorted(rendered), n_reused, manifest, used_figs


@contextlib.contextmanager
def _gc_quiet():
    """Python's cyclic garbage collector held off while the records are read and the site is set up; the caller then
    calls the function this yields, which freezes what was made (every record and row: millions of objects that live
    to the end of the build; ``gc.freeze``) and lets the collector run again over what the pages make, in this process
    and in the page workers forked from it. Reading 100k records otherwise ran ~15 full collections over the growing
    heap (a quarter of a 100k rebuild's CPU time); reading and setting up form no cycles that wait to be collected.
    The frozen objects are handed back to the collector at the end (``gc.unfreeze``)."""
    was = gc.isenabled()
    gc.disable()

    def settled() -> None:
        gc.freeze()
        if was:
            gc.enable()

    try:
        yield settled
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def _swap(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out``: at every instant ``out`` is the old site or the new one. Two renames (a directory
    cannot replace a non-empty one in one), with interruptions held between them, and the old site put back if the
    second fails; the old one is removed last (an interruption there removes it on the way out)."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    try:
        with held():   # an interruption here is raised when the block ends, after both renames
            if out.exists():
                os.replace(out, old)
                try:
                    phase("swap")
                    os.replace(tmp, out)
                except BaseException:
                    if not out.exists():
                        os.replace(old, out)
                    raise
            else:
                os.replace(tmp, out)
    finally:
        if out.exists():
            try:
                shutil.rmtree(old, ignore_errors=True)
            except BaseException:  # interrupted while removing it (outside a command): finish, then stop
                shutil.rmtree(old, ignore_errors=True)
                raise


def default_cache(out: Path) -> Path:
    """Where a site's build cache lives unless told: beside it, ``.<name>.cache`` (hard links need one file system)."""
    return out.parent / f".{out.name}.cache"


def build_site(results: str | os.PathLike = "results", out: str | os.PathLike = "site",
               docs: str | os.PathLike | None = None, charts: bool = True, jobs: int | None = None,
               cache: str | os.PathLike | bool | None = True) -> BuildReport:
    """Build the leaderboard from ``results`` into ``out`` (replaced only if a previous build made it); without
    ``charts`` the figures are left out (a quick build: the pages say where a figure would be). Pages render in
    ``jobs`` processes (default: one per CPU; ``NORMBENCH_SITE_JOBS``), with the same bytes as one. ``cache``: the
    build cache directory (``True``: ``.<out>.cache`` beside ``out``; ``False``/None: none), from which unchanged
    pages are reused (``incremental``); the site is the same bytes with or without it."""
    results, out = Path(results), Path(out)
    _check_out(out, results)
    with _gc_quiet() as settled:
        return _build(results, out, docs, charts, jobs, cache, settled)


def _build(results: Path, out: Path, docs, charts: bool, jobs: int | None, cache, settled) -> BuildReport:
    from normbench.site import incremental, pages, records, tables

    store = None
    if cache:
        cache_dir = default_cache(out) if cache is True else Path(cache)
        store = incremental.SiteCache(cache_dir)
    n_jobs = _jobs(jobs)
    try:
        loaded = load_results(results, cache=store.reads if store is not None else None, jobs=n_jobs)
    finally:
        if store is not None:   # a judging worker killed mid-write (an interruption) leaves its temporary file
            sweep_orphans()
    docs_dir = Path(docs) if docs is not None else (results.resolve().parent / "docs")
    if docs is not None and not docs_dir.is_dir():
        raise FileNotFoundError(f"--docs {docs}: no such directory")
    info = SiteInfo(
        built=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=_version(),
        n_records=len(loaded.entries),
        n_rejected=len(loaded.rejected),
        taken=_taken(loaded.entries),
    )
    charts = _charts() if charts else None
    site = Site(loaded, info, read_docs(docs_dir if docs_dir.is_dir() else None), charts=charts,
                rows=store.rows if store is not None else None,
                machine_store=PickleDir(store.dir / "machines", store.key) if store is not None else None)
    env = environment()
    common = {"info": info, "nav": NAV, "csp": CSP, "schema_file": SCHEMA_FILE,
              "chart_scripts": getattr(charts, "SCRIPTS", ()), "chart_styles": getattr(charts, "STYLES", ())}
    # What every page shows beyond its own data: a change here renders every page again.
    glob = incremental._h(info.version, info.n_rejected, charts is not None, CSP, NAV, SCHEMA_FILE,
                          common["chart_scripts"], common["chart_styles"], tables.INLINE_MAX, tables.PREVIEW,
                          tables.DEEP_PREVIEW, tables.PAGE_ROWS, pages.INLINE_POINTS, pages.COMPARE_POINTS,
                          records.PAGE_RECORDS, pages.MANY_MACHINES)
    if store is not None:
        site.fig_store = PickleDir(store.figures, store.key)
    settled()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        n_pages, rendered, reused, manifest, used_figs = _render_all(site, env, common, tmp, n_jobs, store, glob)
        _copy_tree(resources.files("normbench.site") / "assets", tmp / "assets")
        from normbench.records.schema import json_schema

        (tmp / SCHEMA_FILE).write_text(json.dumps(json_schema(), indent=1) + "\n", encoding="utf-8")
        (tmp / ".nojekyll").write_text("", encoding="utf-8")  # GitHub Pages: serve files as they are
        (tmp / MARKER).write_text("built by `normbench site build`; this directory is replaced on every build\n",
                                  encoding="utf-8")
        tmp.chmod(0o755)
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if store is not None:
        store.finish(manifest)
        site.fig_store.prune(used_figs)
        # Read in the page workers too (whose reads this process does not see): kept by what this site reads.
        site.machine_store.prune({site.machine_store._name(k) for k in site.machine_keys()})
    kinds = [e.kind for e in loaded.entries]
    return BuildReport(out, n_pages, len(loaded.entries), kinds.count("kernel"), kinds.count("accuracy"),
                       loaded.files, loaded.rejected, len(loaded.superseded), rendered, reused)
