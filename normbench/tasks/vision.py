"""Image classification tasks from the Hugging Face hub: CIFAR-10, CIFAR-100, Imagenette and Tiny-ImageNet.

Each dataset is decoded once (PIL -> RGB -> resize of the shorter side -> centre crop) into a ``uint8`` tensor
``[N, 3, S, S]`` and cached under ``$NORMBENCH_CACHE`` (default ``~/.cache/normbench``), keyed by the
dataset's fingerprint, so later runs start in seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from normbench.tasks.hub import load_splits

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: Examples kept per split by ``quick`` on real tasks (a smoke run, not a result to compare).
QUICK_TRAIN, QUICK_EVAL = 5000, 1000


def cache_dir() -> Path:
    root = os.environ.get("NORMBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "normbench")
    return Path(root)


def to_uint8(images, size: int) -> np.ndarray:
    """PIL images -> ``uint8 [N, 3, size, size]``: RGB, shorter side resized to ``size``, centre crop."""
    from PIL import Image

    out = np.empty((len(images), 3, size, size), dtype=np.uint8)
    for i, img in enumerate(images):
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
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(out, tmp)
        os.replace(tmp, path)
    return out


def _hub_loader(hub_id, config, image_col, label_col, eval_splits, stored, mean, std):
    def load(task, data_dir=None, quick=False):
        from normbench.tasks import TaskData

        splits = load_splits(task.name, hub_id, config, {"train": ("train",), "eval": eval_splits},
                             (image_col, label_col), data_dir=data_dir)
        out = {}
        for split, ds in splits.items():
            limit = QUICK_TRAIN if split == "train" else QUICK_EVAL
            if quick and len(ds) > limit:
                ds = ds.select(range(limit))
            out[split] = decode_split(ds, image_col, label_col, stored, f"{task.name}-{split}")
            n_bad = int(((out[split]["y"] < 0) | (out[split]["y"] >= task.num_classes)).sum())
            if n_bad:
                raise ValueError(f"{task.name}: {n_bad} {split} labels outside [0, {task.num_classes})")
        return TaskData(task=task, train=out["train"], eval=out["eval"], mean=mean, std=std, stored_size=stored,
                        info={"source": hub_id, "config": config, "train_examples": len(out["train"]["y"]),
                              "eval_examples": len(out["eval"]["y"])})
    return load


def _tasks():
    from normbench.tasks import Task

    image_models = ("resnet", "vit", "fixup_resnet", "skipinit_resnet", "nf_resnet")
    return [
        Task(
            name="cifar10", title="CIFAR-10", modality="image", offline=False, metric="top1", higher_is_better=True,
            description="60k 32x32 colour images in 10 classes (50k train, 10k test); uoft-cs/cifar10 'img', 'label'.",
            source="uoft-cs/cifar10 (plain_text)",
            loader=_hub_loader("uoft-cs/cifar10", "plain_text", "img", "label", ("test",), 32,
                               CIFAR10_MEAN, CIFAR10_STD),
            default_model="resnet", models=image_models, num_classes=10, image_size=32,
        ),
        Task(
            name="cifar100", title="CIFAR-100", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description="60k 32x32 colour images in 100 fine classes; uoft-cs/cifar100 'img', 'fine_label', "
                        "'coarse_label' (trained on fine_label).",
            source="uoft-cs/cifar100 (cifar100)",
            loader=_hub_loader("uoft-cs/cifar100", "cifar100", "img", "fine_label", ("test",), 32,
                               CIFAR100_MEAN, CIFAR100_STD),
            default_model="resnet", models=image_models, num_classes=100, image_size=32,
        ),
        Task(
            name="imagenette", title="Imagenette (160px)", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description="10 easy ImageNet classes (~9.5k train, ~3.9k validation); frgfm/imagenette '160px' "
                        "'image', 'label', stored at 144px, trained on random 128px crops.",
            source="frgfm/imagenette (160px)",
            loader=_hub_loader("frgfm/imagenette", "160px", "image", "label", ("validation", "valid", "test"), 144,
                               IMAGENET_MEAN, IMAGENET_STD),
            default_model="resnet", models=image_models, num_classes=10, image_size=128,
        ),
        Task(
            name="tiny-imagenet", title="Tiny-ImageNet", modality="image", offline=False, metric="top1",
            higher_is_better=True,
            description="200 ImageNet classes at 64x64 (100k train, 10k valid); zh-plus/tiny-imagenet 'image', "
                        "'label'.",
            source="zh-plus/tiny-imagenet",
            loader=_hub_loader("zh-plus/tiny-imagenet", None, "image", "label", ("valid", "validation"), 64,
                               IMAGENET_MEAN, IMAGENET_STD),
            default_model="resnet", models=image_models, num_classes=200, image_size=64,
        ),
    ]


TASKS = _tasks()
