"""Find a Hugging Face dataset locally or in the ``datasets`` cache, and say exactly how to provide it when missing.

Resolution order for a task's dataset (first hit wins):

1. ``--data-dir D`` given: ``D/<task>`` written by ``DatasetDict.save_to_disk`` (has ``dataset_dict.json``);
   else parquet files in the hub layout under ``D/<task>``, ``D/<owner>/<name>`` or ``D/<name>``
   (for example ``D/uoft-cs/cifar10/plain_text/train-00000-of-00001.parquet``, ``D/cifar10/test-*.parquet``).
2. No ``--data-dir``: ``datasets.load_dataset(hub_id, config)``, which uses the local ``datasets`` cache
   (``HF_HOME`` / ``HF_DATASETS_CACHE``; set ``HF_DATASETS_OFFLINE=1`` to never touch the network).
"""

from __future__ import annotations

import os
from pathlib import Path

PARQUET = "*.parquet"


class DatasetUnavailable(RuntimeError):
    """A real task's dataset is neither in ``--data-dir`` nor in the ``datasets`` cache (and cannot be downloaded)."""


def how_to_provide(task: str, hub_id: str, config: str | None) -> str:
    cfg = f", {config!r}" if config else ""
    return (
        f"To make {task} available: on a machine with network run\n"
        f"    python -c \"import datasets; datasets.load_dataset({hub_id!r}{cfg})\"\n"
        f"  which fills the datasets cache (~/.cache/huggingface/datasets, or $HF_DATASETS_CACHE / $HF_HOME);\n"
        f"  copy that cache here and set HF_DATASETS_OFFLINE=1. Or save it with\n"
        f"    datasets.load_dataset({hub_id!r}{cfg}).save_to_disk('DATA/{task}')\n"
        f"  (or copy the repository's parquet files to DATA/{hub_id}/...) and pass --data-dir DATA.\n"
        f"  Offline tasks need no download: see `normbench tasks`."
    )


def _split_of(path: Path, root: Path, splits: dict[str, tuple[str, ...]]) -> str | None:
    """Which logical split a parquet file belongs to, from its file name or parent folder (hub layout)."""
    parts = [p.lower() for p in path.relative_to(root).parts]
    stem = parts[-1]
    for logical, names in splits.items():
        for name in names:
            n = name.lower()
            if stem == f"{n}.parquet" or stem.startswith(f"{n}-") or stem.startswith(f"{n}_") or n in parts[:-1]:
                return logical
    return None


def _parquet_files(root: Path, config: str | None, splits: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    files = sorted(root.rglob(PARQUET))
    if config:
        # A hub repo with several configs keeps each in its own folder; prefer the one asked for.
        in_config = [f for f in files if config in f.relative_to(root).parts[:-1]]
        if in_config:
            files = in_config
    found: dict[str, list[str]] = {}
    for f in files:
        split = _split_of(f, root, splits)
        if split is not None:
            found.setdefault(split, []).append(str(f))
    return found


def _candidates(data_dir: Path, task: str, hub_id: str) -> list[Path]:
    owner_name = Path(*hub_id.split("/"))
    name = hub_id.split("/")[-1]
    out = []
    for c in (data_dir / task, data_dir / owner_name, data_dir / name):
        if c not in out:
            out.append(c)
    return out


def load_splits(task: str, hub_id: str, config: str | None, splits: dict[str, tuple[str, ...]],
                columns: tuple[str, ...], data_dir: str | os.PathLike | None = None) -> dict:
    """Return ``{logical_split: datasets.Dataset}`` for ``splits`` (``{"train": ("train",), "eval": ("test",)}``).

    Each logical split lists the split names it may have on the hub, first preferred. The datasets must have
    ``columns``; anything else raises :class:`DatasetUnavailable` naming the dataset, why, and how to provide it.
    """
    try:
        import datasets
    except ImportError as exc:
        raise DatasetUnavailable(
            f"{task} needs the Hugging Face `datasets` package: pip install -e '.[data]'"
        ) from exc
    help_text = how_to_provide(task, hub_id, config)
    result: dict = {}
    if data_dir is not None:
        data_dir = Path(data_dir).expanduser()
        if not data_dir.is_dir():
            raise DatasetUnavailable(f"--data-dir {data_dir} is not a directory.\n{help_text}")
        looked = []
        for root in _candidates(data_dir, task, hub_id):
            looked.append(str(root))
            if (root / "dataset_dict.json").is_file():
                dd = datasets.load_from_disk(str(root))
                for logical, names in splits.items():
                    name = next((n for n in names if n in dd), None)
                    if name is None:
                        raise DatasetUnavailable(
                            f"{task}: {root} (saved with save_to_disk) has splits {list(dd)}, "
                            f"none of {list(names)}.\n{help_text}")
                    result[logical] = dd[name]
                break
            if root.is_dir():
                files = _parquet_files(root, config, splits)
                if files:
                    missing = [s for s in splits if s not in files]
                    if missing:
                        raise DatasetUnavailable(
                            f"{task}: parquet files under {root} cover splits {sorted(files)} but not "
                            f"{missing} (looked for files named like {[splits[m][0] + '-*.parquet' for m in missing]})."
                            f"\n{help_text}")
                    loaded = datasets.load_dataset("parquet", data_files=files)
                    result = {s: loaded[s] for s in splits}
                    break
        if not result:
            raise DatasetUnavailable(
                f"{task} ({hub_id}{'/' + config if config else ''}) was not found under --data-dir {data_dir}: "
                f"looked for a save_to_disk folder or parquet files in {', '.join(looked)}.\n{help_text}")
    else:
        _sync_offline_mode(datasets)
        try:
            loaded = datasets.load_dataset(hub_id, config)
        except Exception as exc:  # datasets raises ConnectionError, FileNotFoundError, ValueError, ... here
            offline = os.environ.get("HF_DATASETS_OFFLINE") or os.environ.get("HF_HUB_OFFLINE")
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            mode = " (offline mode is on and it is not in the cache)" if offline else \
                " (it is not in the local datasets cache and the Hugging Face hub could not be reached)"
            raise DatasetUnavailable(
                f"{task}: could not load {hub_id}{'/' + config if config else ''}{mode}: {why}.\n{help_text}"
            ) from exc
        for logical, names in splits.items():
            name = next((n for n in names if n in loaded), None)
            if name is None:
                raise DatasetUnavailable(f"{task}: {hub_id} has splits {list(loaded)}, none of {list(names)}")
            result[logical] = loaded[name]
    for logical, ds in result.items():
        missing = [c for c in columns if c not in ds.column_names]
        if missing:
            raise DatasetUnavailable(
                f"{task}: the {logical} split has columns {ds.column_names}, but {hub_id} should have "
                f"{list(columns)} (missing {missing}); is this the right dataset?")
    return result


def _sync_offline_mode(datasets) -> None:
    """Honour HF_DATASETS_OFFLINE / HF_HUB_OFFLINE set after `datasets` was imported.

    Both libraries read these variables once, at import; without this a late setting is ignored and
    `load_dataset` waits for network time-outs instead of failing at once from the cache.
    """
    flags = (os.environ.get("HF_DATASETS_OFFLINE"), os.environ.get("HF_HUB_OFFLINE"))
    if not any(f and f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags):
        return
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    try:
        from huggingface_hub import constants
        constants.HF_HUB_OFFLINE = True
    except ImportError:
        pass
