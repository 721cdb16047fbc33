"""Find a real task's parquet files (``--data-dir`` or the Hugging Face hub), and say exactly what is wrong when not.

Every real task reads parquet files laid out as its hub repository serves them (:class:`HubSource` names the
repository, revision, folder and split names). Resolution order:

1. ``--data-dir D`` given: ``D/<task>`` written by ``DatasetDict.save_to_disk`` (has ``dataset_dict.json``),
   else the hub's parquet files under ``D/<owner>/<name>``, ``D/<name>`` or ``D/<task>`` (for example
   ``D/uoft-cs/cifar10/plain_text/train-00000-of-00001.parquet``, as ``hf download ... --local-dir`` writes them).
2. No ``--data-dir``: :func:`download` fetches the same files with ``huggingface_hub.snapshot_download`` (the one
   network call), which reuses the Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``); with ``HF_HUB_OFFLINE=1``
   it reads the cache only and fails at once when the files are not there.

Either way the files are read by the same code, so the tests that run it on local files in the hub's layout run
what a user runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PARQUET = "*.parquet"


class DatasetUnavailable(RuntimeError):
    """A real task's dataset cannot be read: not in ``--data-dir`` or the cache, not downloadable, or malformed."""


@dataclass(frozen=True)
class HubSource:
    """Where a task's files are on the hub and how they are laid out there."""

    repo: str
    #: Folder of the wanted configuration in the repository (``plain_text``); ``None``: files anywhere.
    folder: str | None
    #: Logical split -> the split's name on the hub (file-name prefix or folder name), e.g. {"test": "valid"}.
    splits: dict
    #: Columns every split must have.
    columns: tuple
    #: Git revision; the parquet conversion of a script-based repository is ``refs/convert/parquet``.
    revision: str | None = None
    #: How the split files are named inside ``folder``: "prefix" (``train-00000-of-00001.parquet``) or "folder"
    #: (``train/0000.parquet``, the layout of the hub's parquet conversion).
    naming: str = "prefix"
    #: Other names a local copy may give a split (read by earlier versions), e.g. {"test": ("validation",)}.
    aliases: tuple = ()

    def names(self, logical: str) -> tuple[str, ...]:
        """The names the ``logical`` split is accepted under, the hub's first."""
        return (self.splits[logical], *dict(self.aliases).get(logical, ()))

    @property
    def patterns(self) -> list[str]:
        """``allow_patterns`` for ``snapshot_download`` (fnmatch: ``*`` also matches ``/``)."""
        return [f"{self.folder}/{PARQUET}"] if self.folder else [PARQUET]

    def example_paths(self) -> list[str]:
        """The split files as the hub names them, relative to the repository root."""
        base = f"{self.folder}/" if self.folder else "data/"
        if self.naming == "folder":
            return [f"{base}{name}/0000.parquet" for name in self.splits.values()]
        return [f"{base}{name}-00000-of-00001.parquet" for name in self.splits.values()]

    def describe(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"{self.repo}{rev}" + (f" ({self.folder})" if self.folder else "")


def how_to_provide(task: str, src: HubSource) -> str:
    rev = f" --revision {src.revision}" if src.revision else ""
    include = " ".join(f'--include "{p}"' for p in src.patterns)
    files = ", ".join(f"DATA/{src.repo}/{p}" for p in src.example_paths())
    return (
        f"To make {task} available, on a machine with network run\n"
        f"    hf download {src.repo} --repo-type dataset{rev} {include} --local-dir DATA/{src.repo}\n"
        f"  and pass --data-dir DATA (files as on the hub: {files});\n"
        f"  or run it without --local-dir to fill the Hugging Face cache (~/.cache/huggingface/hub, or $HF_HUB_CACHE"
        f" / $HF_HOME), copy that cache here and set HF_HUB_OFFLINE=1.\n"
        f"  A DatasetDict saved with save_to_disk at DATA/{task} works too. Offline tasks need no download: see "
        f"`normbench tasks`."
    )


def _split_of(path: Path, root: Path, src: HubSource) -> str | None:
    """Which logical split a parquet file belongs to, from its file name or its folder (the hub's layouts)."""
    parts = [p.lower() for p in path.relative_to(root).parts]
    stem = parts[-1]
    for logical in src.splits:
        for n in (name.lower() for name in src.names(logical)):
            if stem == f"{n}.parquet" or stem.startswith(f"{n}-") or stem.startswith(f"{n}_") or n in parts[:-1]:
                return logical
    return None


def parquet_files(root: Path, src: HubSource) -> dict[str, list[str]]:
    """``{logical split: [files]}`` for the parquet files under ``root`` (the configuration's folder preferred)."""
    files = sorted(root.rglob(PARQUET))
    if src.folder:
        # A repository with several configurations keeps each in its own folder: take the one asked for.
        in_config = [f for f in files if src.folder in f.relative_to(root).parts[:-1]]
        if in_config:
            files = in_config
    found: dict[str, list[str]] = {}
    for f in files:
        split = _split_of(f, root, src)
        if split is not None:
            found.setdefault(split, []).append(str(f))
    return found


def _candidates(data_dir: Path, task: str, src: HubSource) -> list[Path]:
    owner_name = Path(*src.repo.split("/"))
    out = []
    for c in (data_dir / owner_name, data_dir / src.repo.split("/")[-1], data_dir / task):
        if c not in out:
            out.append(c)
    return out


def _expected(task: str, src: HubSource, data_dir: Path) -> str:
    files = " and ".join(str(data_dir / src.repo / p) for p in src.example_paths())
    splits = ", ".join(f"{name!r}" for name in src.splits.values())
    return (f"expected the layout of {src.describe()} on the hub: {files} (several shards per split are fine), "
            f"or a DatasetDict saved with save_to_disk at {data_dir / task} with splits {splits}")


def _load_parquet(task: str, files: dict[str, list[str]], where: str):
    import datasets

    try:
        return datasets.load_dataset("parquet", data_files=files)
    except Exception as exc:  # an unreadable or truncated file: name it, not the network
        raise DatasetUnavailable(
            f"{task}: the parquet files in {where} could not be read ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); are they complete and in the hub's format?") from exc


def _from_data_dir(task: str, src: HubSource, data_dir: Path) -> dict:
    import datasets

    help_text = how_to_provide(task, src)
    if not data_dir.is_dir():
        raise DatasetUnavailable(f"--data-dir {data_dir} is not a directory.\n{help_text}")
    looked = []
    for root in _candidates(data_dir, task, src):
        if (root / "dataset_dict.json").is_file():
            dd = datasets.load_from_disk(str(root))
            result = {}
            for logical, name in src.splits.items():
                found = next((n for n in src.names(logical) if n in dd), None)
                if found is None:
                    raise DatasetUnavailable(
                        f"{task}: {root} (saved with save_to_disk) has splits {list(dd)}; {task} needs "
                        f"{list(src.splits.values())} ({name!r} is the {logical} split).\n{help_text}")
                result[logical] = dd[found]
            return result
        if not root.is_dir():
            continue
        looked.append(str(root))
        files = parquet_files(root, src)
        if files:
            return _read_splits(task, src, root, files, lambda missing: (
                f"the parquet files under {root} cover the splits {sorted(src.splits[s] for s in files)} but not "
                f"{missing}; {_expected(task, src, data_dir)}"))
    where = f"the folders {', '.join(looked)} have no parquet files of its splits" if looked else \
        f"none of {', '.join(str(c) for c in _candidates(data_dir, task, src))} exists"
    hint = ""
    if src.folder and (data_dir / src.folder).is_dir() or any(data_dir.glob(PARQUET)):
        hint = (f" {data_dir} itself looks like the dataset's folder: pass its parent, so that "
                f"{data_dir.parent / src.repo} holds the files.")
    raise DatasetUnavailable(
        f"{task} ({src.describe()}) was not found under --data-dir {data_dir}: {where}; "
        f"{_expected(task, src, data_dir)}.{hint}\n{help_text}")


def download(src: HubSource) -> Path:
    """Fetch ``src``'s parquet files with ``huggingface_hub.snapshot_download`` (the cache first); the snapshot."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(src.repo, repo_type="dataset", revision=src.revision,
                                  allow_patterns=src.patterns))


def _from_hub(task: str, src: HubSource) -> dict:
    help_text = how_to_provide(task, src)
    _sync_offline_mode()
    try:
        root = download(src)
    except Exception as exc:
        raise DatasetUnavailable(f"{task}: {_why_download_failed(src, exc)}.\n{help_text}") from exc
    return _read_splits(task, src, root, parquet_files(root, src), lambda missing: (
        f"the hub snapshot of {src.describe()} in {root} has no parquet files for the splits {missing} "
        f"(expected {', '.join(src.example_paths())}); the repository's layout may have changed"))


def _read_splits(task: str, src: HubSource, root: Path, files: dict, why_missing) -> dict:
    """The task's splits read from ``files`` (by split); when some are missing, an error whose middle part is
    ``why_missing(names of the missing splits)``."""
    missing = [src.splits[s] for s in src.splits if s not in files]
    if missing:
        raise DatasetUnavailable(f"{task}: {why_missing(missing)}.\n{how_to_provide(task, src)}")
    loaded = _load_parquet(task, files, str(root))
    return {s: loaded[s] for s in src.splits}


def _why_download_failed(src: HubSource, exc: Exception) -> str:
    from huggingface_hub import utils as errors  # the error classes, exported there by every version

    first = str(exc).splitlines()[0] if str(exc) else ""
    name = src.describe()
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"the hub has no revision {src.revision or 'main'!r} of {src.repo} ({first})"
    if isinstance(exc, errors.GatedRepoError):
        return f"{src.repo} is gated on the hub: log in (hf auth login) with an account that has access ({first})"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return f"the hub has no dataset repository {src.repo} (or it is private) ({first})"
    if isinstance(exc, errors.LocalEntryNotFoundError):
        if _offline():
            return (f"{name} is not in the Hugging Face cache and offline mode is on (HF_HUB_OFFLINE / "
                    f"HF_DATASETS_OFFLINE), so it was not downloaded")
        return (f"{name} is not in the Hugging Face cache and the hub could not be reached "
                f"({type(exc.__cause__ or exc).__name__}); check the network or set HF_HUB_OFFLINE=1 to use the "
                f"cache only")
    return f"downloading {name} from the hub failed: {type(exc).__name__}: {first}"


def _offline() -> bool:
    flags = (os.environ.get("HF_DATASETS_OFFLINE"), os.environ.get("HF_HUB_OFFLINE"))
    return any(f and f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def _sync_offline_mode() -> None:
    """Honour HF_DATASETS_OFFLINE / HF_HUB_OFFLINE set after the libraries were imported.

    Both read these variables once, at import; without this a late setting is ignored and the download waits for
    network time-outs instead of failing at once from the cache.
    """
    if not _offline():
        return
    try:
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True
    except ImportError:
        pass
    try:
        import datasets

        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    except ImportError:
        pass


def load_splits(task: str, src: HubSource, data_dir: str | os.PathLike | None = None,
                label_names: dict | None = None) -> dict:
    """``{logical split: datasets.Dataset}`` for ``src.splits``, from ``data_dir`` or the hub.

    ``label_names`` maps a label column to the class names (in order) the hub's ClassLabel has; a dataset whose
    labels are named otherwise is refused, since its integer labels would mean other classes. Anything missing or
    malformed raises :class:`DatasetUnavailable` naming the dataset, what is wrong and how to provide it.
    """
    try:
        import datasets  # noqa: F401
    except ImportError as exc:
        raise DatasetUnavailable(f"{task} needs the Hugging Face `datasets` package: pip install -e '.[data]'") \
            from exc
    if data_dir is not None:
        result = _from_data_dir(task, src, Path(data_dir).expanduser())
    else:
        result = _from_hub(task, src)
    for logical, ds in result.items():
        missing = [c for c in src.columns if c not in ds.column_names]
        if missing:
            raise DatasetUnavailable(
                f"{task}: the {src.splits[logical]!r} split has columns {ds.column_names}, but {src.repo} has "
                f"{list(src.columns)} (missing {missing}); is this the right dataset?")
        for col, names in (label_names or {}).items():
            feat = ds.features.get(col)
            have = getattr(feat, "names", None)
            if have is not None and list(have) != list(names):
                diff = next(i for i in range(max(len(have), len(names)))
                            if i >= len(have) or i >= len(names) or have[i] != names[i])
                raise DatasetUnavailable(
                    f"{task}: the {src.splits[logical]!r} split's {col!r} classes are not {src.repo}'s: "
                    f"{len(have)} names, first difference at label {diff} "
                    f"({have[diff] if diff < len(have) else None!r} here, "
                    f"{names[diff] if diff < len(names) else None!r} on the hub); integer labels would mean "
                    f"other classes.")
    return result
