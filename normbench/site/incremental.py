"""The site's build cache: what an incremental build reuses, and the keys that make reuse safe.

A build is a list of jobs (``pages.Site.jobs``); each writes some files (pages, their data files, a record page's
JSON). A job's files are a function of (1) the code (``code_key``: the judging code's ``results.readcache.judge_key``,
``normbench/site``'s own sources, templates and assets, and the versions of the libraries that draw and write) and
(2) the data the job reads. The cache stores each job's files under a hash of both (its *digest*) and hard-links
them into the next site when the digest comes again, so an unchanged page is neither rendered nor written.

The data part of a digest is either

* **the job's inputs** (``input_digest``), for the jobs that show every record of their scope in full: a record
  page (its records: file, bytes' hash, position, anchor and page; the JSON it publishes is these records) and a
  norm's figure page on one device (the kernel rows of that norm on that device with everything derived from other
  records: speed-up, cache residency; the device's name; whether the norm's figures are inline), a device's page
  (its records and rows, and for each of its norms whether that norm has many machines) and a model's page on one
  device (that device's records), both in a site with a norm on many machines (``pages.MANY_MACHINES``), and a
  rendered document (its text): any edit to one of these records changes the
  page, and a job whose inputs are unchanged is neither built nor rendered (a changed machine costs its own pages);
  or
* **the job's pages as built, before drawing** (``context_digest``): the context each template gets, every table
  row, every figure's data and options (figures are drawn lazily, ``LazyFigure``, only when a page is rendered):
  for the pages that summarise (overview, leaderboard, devices, a norm's page, accuracy, claims, ...), which are
  cheap to build and are rebuilt from all records on every build, then rendered only when what they show changed.

A record is never shown from another record's bytes: a digest covers the bytes of every record a job reads and the
cross-file facts (id deduplication picks the records; anchors and page buckets are part of each record's print).

Layout of the cache directory (default ``.<out>.cache`` beside the output; ``--cache DIR``; ``--no-cache``):
``records/`` (judged record files, ``results.readcache``), ``blobs/`` (each file once, by SHA-256, hard-linked into
the site and read-only), ``figures/`` (drawn figures by the hash of their inputs), ``rows/`` (each record file's
kernel rows by the hash of its bytes, ``aggregate.kernel_rows``), ``machines/`` (aggregates of one machine's records
that a summary page assembles, by the print of that machine's records: ``pages.Site.per_machine``) and
``manifest.json`` (digest -> files, for the last build). Deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1


def _h(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


_CODE_KEY: str | None = None


def code_key() -> str:
    """Everything a page is a function of besides its data: the judging code, the site's sources, templates and
    assets, and the versions of the libraries that render (Jinja2, Altair, vl-convert, pandas, pyarrow, ...)."""
    global _CODE_KEY
    if _CODE_KEY is None:
        from normbench.results.readcache import _dist_versions, _tree_digest, judge_key

        here = Path(__file__).resolve().parent
        _CODE_KEY = _h(f"site cache {FORMAT}", judge_key(), _tree_digest(here),
                       *_dist_versions("jinja2", "markupsafe", "markdown-it-py", "altair", "vl-convert-python",
                                       "pandas", "pyarrow", "numpy"))
    return _CODE_KEY


# --- fingerprints --------------------------------------------------------------------------------------------------

def entry_print(e) -> str:
    """A record as the pages know it: where it was read (file, its bytes' hash, position) and its anchor and page."""
    return f"{e.path}\x1f{e.digest}\x1f{e.index}\x1f{e.key}\x1f{e.page}"


def row_print(r: dict) -> str:
    """A kernel row: its record and what was derived from other records (speed-up, cache residency)."""
    return (f"{entry_print(r['entry'])}\x1f{r.get('speedup')!r}\x1f{r.get('cache')!r}\x1f{r.get('cache_how')!r}"
            f"\x1f{r.get('dram')!r}")


def _json(obj) -> bytes:
    """Plain data (dicts, lists, text, numbers) as one hashable text: JSON keeps the types a template can tell apart
    (``1``, ``1.0``, ``true``, ``"1"``) and dicts' order; anything else by its repr."""
    return json.dumps(obj, ensure_ascii=False, default=repr, separators=(",", ":")).encode("utf-8", "surrogatepass")


class _Hasher:
    """A stable hash of a page context: dicts, lists, strings, numbers, tables, figures (their inputs), entries."""

    def __init__(self):
        from markupsafe import Markup

        from normbench.site.records import Entry
        from normbench.site.tables import Table

        self.h = hashlib.sha256()
        self._types = (Markup, Entry, Table)

    def add(self, obj) -> None:
        Markup, Entry, Table = self._types
        u = self.h.update
        if obj is None or isinstance(obj, (bool, int, float)):
            u(f"{type(obj).__name__}:{obj!r}\0".encode())
        elif isinstance(obj, Markup):
            u(b"M:" + str(obj).encode("utf-8", "surrogatepass") + b"\0")
        elif isinstance(obj, str):
            u(b"S:" + obj.encode("utf-8", "surrogatepass") + b"\0")
        elif isinstance(obj, dict):
            u(b"{")
            for k, v in obj.items():   # insertion order is part of what a template shows
                self.add(k)
                self.add(v)
            u(b"}")
        elif isinstance(obj, (list, tuple)):
            u(b"[")
            for v in obj:
                self.add(v)
            u(b"]")
        elif isinstance(obj, (set, frozenset)):
            u(b"<")
            for v in sorted(map(repr, obj)):
                self.add(v)
            u(b">")
        elif isinstance(obj, Entry):
            # What a template can read of it: where it is, its anchor and page, the record as judged (not the
            # hash of its file, which changes with the file's other records).
            u(f"E:{obj.path}\x1f{obj.index}\x1f{obj.key}\x1f{obj.page}\x1f".encode("utf-8", "surrogatepass"))
            u(json.dumps(obj.rec, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        elif isinstance(obj, Table):
            # A table's rows are plain data (cells of text, numbers and links): hashed as JSON in one call (the
            # leaderboard's thousands of rows, cell by cell through ``add``, were a second of every build).
            u(b"T:" + _json([obj.id, [(c.label, c.num, c.title, c.sorted) for c in obj.cols], obj.rows,
                             obj.filters, obj.search, obj.page, obj.cls, obj.src, obj.n_total, obj.all_options,
                             obj.preview, obj.only])
              + b"\0")
        elif hasattr(obj, "fingerprint"):
            u(b"F:" + obj.fingerprint().encode() + b"\0")
        elif callable(obj):
            u(f"callable:{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}\0".encode())
        else:
            u(b"R:" + repr(obj).encode("utf-8", "surrogatepass") + b"\0")

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def context_digest(pages, data_files: dict, extra_files: dict) -> str:
    """The hash of a job's pages as built (before drawing or rendering) and of the data files they made."""
    h = _Hasher()
    for p in pages:
        h.add([p.path, p.template, p.title, p.active, p.lead, p.crumbs, p.charts])
        h.add(p.ctx)
    for path in sorted(data_files):
        h.add(path)
        h.add(data_files[path])
    for path in sorted(extra_files):
        h.add(path)
        h.add(hashlib.sha256(extra_files[path]).hexdigest())
    return h.hexdigest()


def input_digest(site, job: tuple) -> str | None:
    """The hash of what a job that shows every record of its scope reads (see the module docstring); None for the
    jobs digested by their pages as built."""
    what = job[0]
    if what == "record_page":
        entries = site._record_groups()[job[1]]
        return _h("record_page", job[1], *(entry_print(e) for e in entries))
    if what == "download_part":
        return _h("download_part", job[1], *(entry_print(e) for e in site.hw_records(job[1])))
    if what in ("device_page", "model_page") and not any(site.many(n) for n in site.by_norm):
        # A few machines: digested as built (cheap), so a page whose records changed where it does not show them is
        # not rendered again.
        return None
    if what == "kernels_part":
        # A machine's leaderboard rows: its best per case, each row a function of its record and what was derived
        # from the machine's other records (``row_print``: speed-up, cache residency).
        hw = job[1]
        return _h("kernels_part", hw, site.rows_print(hw))
    if what == "machine_figures_page":
        # A machine's figures: the points of its rows of each norm on many machines (their speed-ups and cache
        # residency are in each row's print), so a changed machine draws its own page alone.
        hw = job[1]
        return _h("machine_figures_page", hw, site.hw_name(hw), site.charts is not None,
                  *(f"{n}\x1f{site.many(n)}" for n in site.machine_norms(hw)), site.rows_print(hw))
    if what == "device_page":
        # A machine's page shows its own records alone (facts from their provenance, its kernel rows, its accuracy
        # count) and, per norm it measured, where that norm's machine view lives (``many``): a changed machine
        # builds its own page, the others are not even built (issue #38: a rebuild in proportion). With many
        # machines its table is every record of the machine (``data/km-*``), which any change to them changes.
        hw = job[1]
        norms = sorted({r["norm"] for r in site.by_hw.get(hw, [])})
        return _h("device_page", hw, site.hw_name(hw), site.machine_print(hw),
                  *(f"{n}\x1f{site.many(n)}" for n in norms), site.rows_print(hw))
    if what == "model_page":
        # ``normbench best``'s answer for one model on one machine reads that machine's records alone.
        key, hw = job[1], job[2]
        # the machine's print, memoised per build: computed once for its device page and all its model pages
        return _h("model_page", key, hw, site.hw_name(hw), site.machine_print(hw))
    if what == "doc_page":
        return _h("doc_page", *job[1:], site.docs.get(job[2]))
    if what == "norm_device":
        name, hw = job[1], job[2]
        rows = site.by_norm_hw.get((name, hw), [])
        return _h("norm_device", name, hw, site.hw_name(hw), site.norm_inline(name), site.norm_shared(name),
                  *(row_print(r) for r in rows))
    return None


# --- the store -----------------------------------------------------------------------------------------------------

def _link(src: Path, dest: Path) -> None:
    """``dest`` becomes ``src``'s file (a hard link where the file system allows, else a copy); an existing ``dest``
    is replaced atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


class SiteCache:
    """The cache directory of one site (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike):
        from normbench.results.readcache import PickleDir, ReadCache

        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "README").write_text(
            "normbench site build cache (normbench/site/incremental.py): safe to delete at any time; the next build "
            "is then a full one.\n", encoding="utf-8")
        self.key = code_key()
        self.reads = ReadCache(self.dir / "records")
        self.blobs = self.dir / "blobs"
        self.blobs.mkdir(exist_ok=True)
        self.manifest: dict[str, list] = {}
        try:
            data = json.loads((self.dir / MANIFEST).read_text(encoding="utf-8"))
            if data.get("key") == self.key:
                self.manifest = data.get("jobs") or {}
        except (OSError, ValueError, AttributeError):
            self.manifest = {}
        self.figures = self.dir / "figures"
        # Each record file's kernel rows (``aggregate.kernel_rows``) under its bytes' hash, for this code.
        self.rows = PickleDir(self.dir / "rows", self.key)
        # Before the downloads were one pair of files per device (a job like the pages), their parts were kept here.
        shutil.rmtree(self.dir / "frames", ignore_errors=True)

    def digest(self, globals_: str, job: tuple, data: str) -> str:
        return _h(self.key, globals_, repr(job), data)

    def _blob(self, sha: str) -> Path:
        return self.blobs / sha[:2] / sha

    def materialize(self, digest: str, out: Path) -> list | None:
        """Link the files of ``digest`` into ``out``; their list, or None when any is missing (then nothing is
        reused: the job renders)."""
        files = self.manifest.get(digest)
        if not files:
            return None
        for rel, sha, size in files:
            try:
                if self._blob(sha).stat().st_size != size:
                    return None
            except OSError:
                return None
        for rel, sha, _size in files:
            _link(self._blob(sha), out / rel)
        return files

    def store(self, out: Path, rels: list[str]) -> list:
        """Put the files ``rels`` just written under ``out`` into the blob store; their (path, sha256, size)."""
        files = []
        for rel in rels:
            path = out / rel
            data = path.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            blob = self._blob(sha)
            if not blob.exists():
                blob.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(path, blob)
                except FileExistsError:
                    pass
                except OSError:
                    shutil.copyfile(path, blob)
            try:
                os.chmod(blob, 0o444)   # the site's copy is the same file: an edit in place must not change the cache
            except OSError:
                pass
            files.append([rel, sha, len(data)])
        return files

    def finish(self, jobs: dict[str, list]) -> None:
        """Record this build's jobs (only these: the cache holds one site) and drop what no job uses."""
        from normbench.records.store import atomic_write_text

        # an interruption mid-write leaves no partial file behind (the temporary file is named before it is made)
        atomic_write_text(self.dir / MANIFEST, json.dumps({"key": self.key, "jobs": jobs}, separators=(",", ":")))
        used = {sha for files in jobs.values() for _rel, sha, _size in files}
        for sub in self.blobs.iterdir() if self.blobs.is_dir() else ():
            for blob in sub.iterdir():
                if blob.name not in used:
                    blob.unlink(missing_ok=True)
        self.reads.prune()
        self.rows.prune()
