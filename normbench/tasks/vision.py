"""Image classification tasks from the Hugging Face hub: CIFAR-10, CIFAR-100, Imagenette and Tiny-ImageNet.

Each dataset is decoded once (PIL -> RGB -> resize of the shorter side -> centre crop) into a ``uint8`` tensor
``[N, 3, S, S]`` and cached under ``$NORMBENCH_CACHE`` (default ``~/.cache/normbench``), keyed by the
dataset's fingerprint, so later runs start in seconds.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch

from normbench.tasks import labels as L
from normbench.tasks.base import Task, TaskData, split_summary
from normbench.tasks.hub import DatasetUnavailable, HubSource, load_splits
from normbench.tasks.splits import SPLIT_SEED, VAL_FRACTION, carve_validation, quick_subset

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: Examples kept per split (train / val and test) by ``quick`` on real tasks: a smoke run, not a result.
QUICK_TRAIN, QUICK_EVAL = 5000, 1000


def save_cache(obj, path: Path) -> None:
    """``torch.save`` of a decoded data set to ``path``, atomically: an interruption mid-save leaves no partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cache_dir() -> Path:
    root = os.environ.get("NORMBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "normbench")
    return Path(root)


def to_uint8(images, size: int) -> np.ndarray:
    """PIL images -> ``uint8 [N, 3, size, size]``: RGB, shorter side resized to ``size``, centre crop."""
    from PIL import Image

    out = np.empty((len(images), 3, size, size), dtype=np.uint8)
    for i, img in enumerate(images):
        if isinstance(img, dict):  # the Image struct {bytes, path}, when no datasets feature decoded it
            img = Image.open(io.BytesIO(img["bytes"])) if img.get("bytes") else Image.open(img["path"])
        if not isinstance(img, Image.Image):
            img = Image.fromarray(np.asarray(img))
        img = img.convert("RGB")
        w, h = img.size
        if (w, h) != (size, size):
            scale = size / min(w, h)
            nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
            img = img.resize((nw, nh), Image.BILINEAR)
            left, top = (nw - size) // 2, (nh - size) // 2
            img = img.crop((left, top, left + size, top + size))
        out[i] = np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)
    return out


def decode_split(ds, image_col: str, label_col: str, size: int, tag: str) -> dict[str, torch.Tensor]:
    """Decode one ``datasets.Dataset`` split into ``{"x": uint8 [N,3,S,S], "y": int64 [N]}``, cached on disk."""
    fp = getattr(ds, "_fingerprint", None)
    path = cache_dir() / "data" / f"{tag}-{size}-{len(ds)}-{fp}.pt" if fp else None
    if path is not None and path.is_file():
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # a truncated cache file is rebuilt, not trusted
            pass
    from tqdm.auto import tqdm

    xs, ys = [], []
    batch = 512
    for start in tqdm(range(0, len(ds), batch), desc=f"decoding {tag}", unit="batch", disable=None, leave=False):
        rows = ds[start:start + batch]
        xs.append(to_uint8(rows[image_col], size))
        ys.append(np.asarray(rows[label_col], dtype=np.int64))
    out = {"x": torch.from_numpy(np.concatenate(xs)), "y": torch.from_numpy(np.concatenate(ys))}
    if path is not None:
        save_cache(out, path)
    return out


def labels_of(ds, label_col: str) -> np.ndarray:
    """The label column of a ``datasets.Dataset`` as an ``int64`` array (without decoding the images)."""
    return np.asarray(ds.select_columns([label_col]).with_format("numpy")[label_col], dtype=np.int64)


class _HubImages:
    """Loader of one hub image dataset: its splits (validation carved, quick subsets) decoded, or only counted."""

    def __init__(self, src: HubSource, image_col: str, label_col: str, names: tuple, stored: int, mean, std):
        self.src, self.image_col, self.label_col, self.names = src, image_col, label_col, names
        self.stored, self.mean, self.std = stored, mean, std

    def _plan(self, task, data_dir, quick):
        """(``{part: (dataset, indices, its labels)}``, the record's data description without counts)."""
        src, label_col = self.src, self.label_col
        splits = load_splits(task.name, src, data_dir=data_dir, label_names={label_col: self.names})
        y = {s: labels_of(ds, label_col) for s, ds in splits.items()}
        for split, labels in y.items():
            bad = int(((labels < 0) | (labels >= task.num_classes)).sum())
            if bad:
                raise DatasetUnavailable(f"{task.name}: {bad} labels of the {src.splits[split]!r} split are outside "
                                         f"[0, {task.num_classes}); is this {src.repo}?")
        train_idx, val_idx = carve_validation(y["train"])
        test_idx = np.arange(len(y["test"]))
        if quick:
            train_idx = train_idx[quick_subset(y["train"][train_idx], QUICK_TRAIN, SPLIT_SEED + 1)]
            val_idx = val_idx[quick_subset(y["train"][val_idx], QUICK_EVAL, SPLIT_SEED + 2)]
            test_idx = quick_subset(y["test"], QUICK_EVAL, SPLIT_SEED + 3)
        parts = {"train": (splits["train"], train_idx, y["train"]), "val": (splits["train"], val_idx, y["train"]),
                 "test": (splits["test"], test_idx, y["test"])}
        for part, (_, idx, labels) in parts.items():
            if len(idx) == 0:
                raise DatasetUnavailable(f"{task.name}: the {part} split is empty ({len(labels)} examples in "
                                         f"the source split)")
        data = {
            "source": src.describe(),
            "val": f"{VAL_FRACTION:g} of {src.splits['train']!r}, class-stratified, seed {SPLIT_SEED}",
            "test": src.splits["test"],
            "subset": f"class-stratified, at most {QUICK_TRAIN}/{QUICK_EVAL}/{QUICK_EVAL}" if quick else "all",
        }
        return parts, data

    def summary(self, task, data_dir=None, quick=False) -> dict:
        """The record's ``config["data"]`` from the labels alone (no image is decoded)."""
        parts, data = self._plan(task, data_dir, quick)
        data["examples"] = {p: int(len(idx)) for p, (_, idx, _) in parts.items()}
        data["classes"] = {p: int(len(np.unique(labels[idx]))) for p, (_, idx, labels) in parts.items()}
        return data

    def load(self, task, data_dir=None, quick=False):
        parts, data = self._plan(task, data_dir, quick)
        out = {}
        for part, (ds, idx, labels) in parts.items():
            sub = ds if len(idx) == len(ds) else ds.select(idx)
            out[part] = decode_split(sub, self.image_col, self.label_col, self.stored, f"{task.name}-{part}")
            if not torch.equal(out[part]["y"], torch.from_numpy(labels[idx])):
                raise RuntimeError(f"{task.name}: decoded {part} labels differ from the dataset's (stale cache "
                                   f"under {cache_dir() / 'data'}?)")
        data.update(split_summary(out, "images"))
        return TaskData(task=task, train=out["train"], val=out["val"], eval=out["test"], mean=self.mean,
                        std=self.std, stored_size=self.stored,
                        info={"source": self.src.repo, "config": self.src.folder, "data": data})


CIFAR10 = HubSource("uoft-cs/cifar10", "plain_text", {"train": "train", "test": "test"}, ("img", "label"))
CIFAR100 = HubSource("uoft-cs/cifar100", "cifar100", {"train": "train", "test": "test"},
                     ("img", "fine_label", "coarse_label"))
#: frgfm/imagenette is a loading script, which ``datasets`` 4+ refuses; the hub's parquet conversion of it (the
#: ``refs/convert/parquet`` branch, one folder per configuration and split) holds the same rows and features.
IMAGENETTE = HubSource("frgfm/imagenette", "160px", {"train": "train", "test": "validation"}, ("image", "label"),
                       revision="refs/convert/parquet", naming="folder", aliases=(("test", ("valid", "test")),))
TINY_IMAGENET = HubSource("zh-plus/tiny-imagenet", "data", {"train": "train", "test": "valid"}, ("image", "label"),
                          aliases=(("test", ("validation",)),))


def _images(*args) -> dict:
    h = _HubImages(*args)
    return {"loader": h.load, "summarize": h.summary}


def _tasks():
    image_models = ("resnet", "vit", "fixup_resnet", "skipinit_resnet", "nf_resnet")
    split_note = "validation: a class-stratified tenth of train (seed 1234)"
    return [
        Task(
            name="cifar10", title="CIFAR-10", modality="image", offline=False, metric="top1", higher_is_better=True,
            description=f"60k 32x32 colour images in 10 classes (50k train, 10k test); uoft-cs/cifar10 'img', "
                        f"'label'; scored on 'test'; {split_note}.",
            source="uoft-cs/cifar10 (plain_text)",
            **_images(CIFAR10, "img", "label", L.CIFAR10, 32, CIFAR10_MEAN, CIFAR10_STD),
            default_model="resnet", models=image_models, num_classes=10, image_size=32,
        ),
        Task(
            name="cifar100", title="CIFAR-100", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description=f"60k 32x32 colour images in 100 fine classes; uoft-cs/cifar100 'img', 'fine_label', "
                        f"'coarse_label' (trained on fine_label); scored on 'test'; {split_note}.",
            source="uoft-cs/cifar100 (cifar100)",
            **_images(CIFAR100, "img", "fine_label", L.CIFAR100_FINE, 32, CIFAR100_MEAN, CIFAR100_STD),
            default_model="resnet", models=image_models, num_classes=100, image_size=32,
        ),
        Task(
            name="imagenette", title="Imagenette (160px)", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description=f"10 easy ImageNet classes (~9.5k train, ~3.9k validation); the hub's parquet conversion "
                        f"of frgfm/imagenette (revision refs/convert/parquet, '160px') 'image', 'label', stored "
                        f"at 144px, trained on random 128px crops; scored on 'validation'; {split_note}.",
            source="frgfm/imagenette@refs/convert/parquet (160px)",
            **_images(IMAGENETTE, "image", "label", L.IMAGENETTE, 144, IMAGENET_MEAN, IMAGENET_STD),
            default_model="resnet", models=image_models, num_classes=10, image_size=128,
        ),
        Task(
            name="tiny-imagenet", title="Tiny-ImageNet", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description=f"200 ImageNet classes at 64x64 (100k train, 10k valid); zh-plus/tiny-imagenet 'image', "
                        f"'label'; scored on 'valid'; {split_note}.",
            source="zh-plus/tiny-imagenet",
            **_images(TINY_IMAGENET, "image", "label", L.TINY_IMAGENET, 64, IMAGENET_MEAN,
                               IMAGENET_STD),
            default_model="resnet", models=image_models, num_classes=200, image_size=64,
        ),
    ]


TASKS = _tasks()
