"""Building the site: read and validate records, render every page, copy assets and records, swap in atomically."""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from normbench.site import fmt
from normbench.site.pages import NAV, Site, SiteInfo, norm_file, read_docs
from normbench.site.records import Rejected, load_results

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

    @property
    def index(self) -> Path:
        return self.out / "index.html"

    def summary(self) -> str:
        s = (f"site: {self.pages} pages from {self.records} records ({self.kernel} kernel, {self.accuracy} accuracy) "
             f"in {self.files} file(s); {len(self.rejected)} rejected")
        if self.superseded:
            s += f"; {self.superseded} superseded by newer records with the same id"
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


def record_frame(entries):
    """One row per record, config and metrics flattened (``config.*``, ``metrics.*``), for the downloads."""
    import pandas as pd

    rows = []
    for e in entries:
        rec = e.rec
        row = {"id": rec["id"], "kind": rec["kind"], "norm": rec["norm"]["name"],
               "hardware_id": rec["provenance"]["hardware_id"], "timestamp": rec["provenance"].get("timestamp"),
               "schema_version": rec.get("schema_version"), "impl_hash": rec.get("impl_hash"),
               "flags": ",".join(map(str, rec.get("flags") or [])),
               "check": (rec.get("check") or {}).get("status") if isinstance(rec.get("check"), dict) else None,
               "file": e.path}
        for part in ("config", "metrics"):
            for k, v in rec[part].items():
                if k == "curve":
                    continue
                # Scalars stay typed; anything nested is kept as its JSON text so every column has one type.
                row[f"{part}.{k}"] = v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(
                    v, sort_keys=True, default=str)
        rows.append(row)
    df = pd.DataFrame.from_records(rows)
    for col in df.columns:
        # A column mixing numbers and text (a hostile or plugin record) is text in Parquet.
        kinds = {type(v) for v in df[col] if v is not None and v == v}
        if len(kinds) > 1 and not kinds <= {int, float}:
            df[col] = df[col].map(lambda v: None if v is None or v != v else str(v))
    return df


def write_downloads(entries, dest: Path) -> None:
    """All records as gzip-compressed CSV and Parquet (each record's full JSON is in
    records/<norm>--<device>.json.gz)."""
    dest.mkdir(parents=True, exist_ok=True)
    df = record_frame(entries)
    # gzip-compressed (pandas, R, DuckDB and Polars read it as is): the plain CSV of 100k records is ~100 MB, a
    # size GitHub refuses in a push.
    df.to_csv(dest / "records.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    df.to_parquet(dest / "records.parquet", index=False)


def _version() -> str:
    try:
        from normbench.versions import __version__

        return __version__
    except Exception:  # pragma: no cover - only when the package is half-installed
        return "?"


def _taken(entries) -> str:
    ts = sorted(t[:10] for e in entries if isinstance(t := e.rec["provenance"].get("timestamp"), str) and len(t) >= 10)
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


def _write_pages(site, env, common, tmp: Path, job) -> tuple[int, dict[str, str]]:
    """Render the pages of one job into ``tmp``: (pages written, data files its tables made)."""
    site.data_files = {}
    n = 0
    for page in site.run(job):
        path = tmp / page.path
        path.parent.mkdir(parents=True, exist_ok=True)
        ctx = {**common, **page.ctx, "title": page.title, "up": page.up, "active": page.active,
               "lead": page.lead, "crumbs": page.crumbs, "charts": page.charts}
        path.write_text(env.get_template(page.template).render(ctx), encoding="utf-8")
        n += 1
    return n, site.data_files


def _work(i: int) -> tuple[int, dict[str, str]]:
    site, env, common, tmp, jobs = _WORK
    return _write_pages(site, env, common, tmp, jobs[i])


def _can_fork() -> bool:
    """Whether pages may render in forked processes: where fork exists and this process has not loaded vl-convert
    (a forked copy of its started JavaScript runtime hangs on its first figure). A process that drew figures before
    (a test session, a second build in one process) builds serially, with the same bytes."""
    import multiprocessing
    import sys

    return "fork" in multiprocessing.get_all_start_methods() and "vl_convert" not in sys.modules


def _render_all(site, env, common, tmp: Path, n_jobs: int) -> int:
    """Every page, in ``n_jobs`` processes (forked, so they share the loaded records); the pages and data files are
    the same bytes whatever the number (each job depends on the site's data alone; tests compare)."""
    global _WORK
    jobs = site.jobs()
    data: dict[str, str] = {}
    n_pages = 0
    if n_jobs > 1 and len(jobs) > 1 and _can_fork():
        import multiprocessing

        # Longest first (a norm's pages draw its figures), so no worker is left with a big job at the end.
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0] != "norm", jobs[i][0] != "compare_page", i))
        _WORK = (site, env, common, tmp, jobs)
        try:
            with multiprocessing.get_context("fork").Pool(min(n_jobs, len(jobs))) as pool:
                for n, files in pool.imap_unordered(_work, order, chunksize=1):
                    n_pages += n
                    data.update(files)
        finally:
            _WORK = None
    else:
        for job in jobs:
            n, files = _write_pages(site, env, common, tmp, job)
            n_pages += n
            data.update(files)
    for rel in sorted(data):
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[rel], encoding="utf-8")
    site.data_files = data
    return n_pages


def build_site(results: str | os.PathLike = "results", out: str | os.PathLike = "site",
               docs: str | os.PathLike | None = None, charts: bool = True, jobs: int | None = None) -> BuildReport:
    """Build the leaderboard from ``results`` into ``out`` (replaced only if a previous build made it); without
    ``charts`` the figures are left out (a quick build: the pages say where a figure would be). Pages render in
    ``jobs`` processes (default: one per CPU; ``NORMBENCH_SITE_JOBS``), with the same bytes as one."""
    results, out = Path(results), Path(out)
    loaded = load_results(results)
    _check_out(out, results)
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
    site = Site(loaded, info, read_docs(docs_dir if docs_dir.is_dir() else None), charts=charts)
    env = environment()
    common = {"info": info, "nav": NAV, "csp": CSP, "schema_file": SCHEMA_FILE,
              "chart_scripts": getattr(charts, "SCRIPTS", ()), "chart_styles": getattr(charts, "STYLES", ())}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        n_pages = _render_all(site, env, common, tmp, _jobs(jobs))
        _copy_tree(resources.files("normbench.site") / "assets", tmp / "assets")
        # Re-serialised (not copied) so the published file is exactly the JSON that was validated.
        recs = tmp / "records"
        recs.mkdir(exist_ok=True)
        from normbench.site.records import pages_of

        for page, entries in pages_of(loaded.entries).items():
            # gzip (no name, no time: the same records give the same bytes): a page's records repeat their run's
            # provenance and config keys, so they compress ~10x; at 100k records this keeps the site under 1 GB.
            text = "[\n" + ",\n".join(json.dumps(e.rec, ensure_ascii=False, separators=(",", ":")) for e in entries)
            (tmp / entries[0].json_file).write_bytes(gzip.compress((text + "\n]\n").encode("utf-8"), mtime=0))
        write_downloads(loaded.entries, tmp / "downloads")
        from normbench.records.schema import json_schema

        (tmp / SCHEMA_FILE).write_text(json.dumps(json_schema(), indent=1) + "\n", encoding="utf-8")
        (tmp / ".nojekyll").write_text("", encoding="utf-8")  # GitHub Pages: serve files as they are
        (tmp / MARKER).write_text("built by `normbench site build`; this directory is replaced on every build\n",
                                  encoding="utf-8")
        tmp.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    kinds = [e.kind for e in loaded.entries]
    return BuildReport(out, n_pages, len(loaded.entries), kinds.count("kernel"), kinds.count("accuracy"),
                       loaded.files, loaded.rejected, len(loaded.superseded))
