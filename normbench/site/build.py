"""Building the site: read and validate records, render every page, copy assets and records, swap in atomically."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from normbench.site.layout import SiteInfo
from normbench.site.pages import Site, read_docs
from normbench.site.records import Rejected, load_results

#: A directory holding this file was written by ``normbench site build`` and may be replaced by the next build.
MARKER = ".normbench-site"
ASSETS = ("site.css", "site.js", "favicon.svg")


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


def _version() -> str:
    try:
        from normbench import __version__

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


def build_site(results: str | os.PathLike = "results", out: str | os.PathLike = "site",
               docs: str | os.PathLike | None = None) -> BuildReport:
    """Build the leaderboard from ``results`` into ``out`` (replaced only if a previous build made it)."""
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
    site = Site(loaded, info, read_docs(docs_dir if docs_dir.is_dir() else None))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        n_pages = 0
        for rel, html in site.pages():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(html, encoding="utf-8")
            n_pages += 1
        assets = tmp / "assets"
        assets.mkdir()
        pkg = resources.files("normbench.site") / "assets"
        for name in ASSETS:
            (assets / name).write_bytes((pkg / name).read_bytes())
        # Re-serialised (not copied) so the published file is exactly the JSON that was validated.
        recs = tmp / "records"
        recs.mkdir()
        for e in loaded.entries:
            (recs / f"{e.key}.json").write_text(json.dumps(e.rec, indent=1, ensure_ascii=False, sort_keys=False)
                                                + "\n", encoding="utf-8")
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
