"""The task types: a dataset and how it is scored (``Task``), its loaded tensors (``TaskData``), split summaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass(frozen=True)
class Task:
    """One dataset and how it is scored."""

    name: str
    title: str
    modality: str  # "image" | "text"
    offline: bool
    metric: str  # "top1" | "perplexity"
    higher_is_better: bool
    description: str
    source: str  # Hugging Face dataset id (and config) or "generated"
    loader: Callable[..., "TaskData"]
    default_model: str
    models: tuple[str, ...]
    num_classes: int | None = None  # image tasks
    image_size: int | None = None  # side of the training crop
    vocab_size: int | None = None  # text tasks
    tokenizer: str | None = None
    why_norms_differ: str = ""
    #: ``summarize(task, data_dir=, quick=)`` -> the record's ``config["data"]`` without decoding the data (the
    #: record id of a run is computed before it trains); ``None``: taken from the loaded data.
    summarize: Callable[..., dict] | None = None

    @property
    def layout(self) -> str:
        """The norm layout the task's default model needs: images for a ResNet, tokens for transformers."""
        return "images" if self.default_model == "resnet" else "tokens"

    def load(self, data_dir: str | None = None, quick: bool = False) -> "TaskData":
        """Load (or generate) the data; a real dataset that cannot be reached raises ``DatasetUnavailable``."""
        return self.loader(self, data_dir=data_dir, quick=quick)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "modality": self.modality,
            "offline": self.offline,
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "source": self.source,
            "default_model": self.default_model,
            "models": list(self.models),
            "num_classes": self.num_classes,
            "image_size": self.image_size,
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer,
            "description": self.description,
            "why_norms_differ": self.why_norms_differ,
        }


@dataclass
class TaskData:
    """Tensors for one task: ``x``/``y`` dicts (images) or ``tokens`` (text) per split.

    ``train`` is what runs train on; ``val`` is held out from it (a seeded, class-stratified tenth of a real
    dataset's training split; generated from its own seed for offline tasks) for choosing learning rates;
    ``eval`` is the split a run is scored on: the dataset's own test split (also reachable as ``test``).
    ``info["data"]`` says where each split came from and how many examples (and classes) it has.
    """

    task: Task
    train: dict[str, torch.Tensor]
    eval: dict[str, torch.Tensor]
    val: dict[str, torch.Tensor] = field(default_factory=dict)
    #: Per-channel mean and std (in [0, 1] units) used to standardise uint8 images.
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.25, 0.25, 0.25)
    #: Stored image side (training crops are ``task.image_size``; eval takes the centre crop).
    stored_size: int | None = None
    info: dict = field(default_factory=dict)

    @property
    def test(self) -> dict[str, torch.Tensor]:
        return self.eval

    def num_train(self) -> int:
        return len(self.train["y"]) if "y" in self.train else len(self.train["tokens"])


def split_summary(splits: dict, unit: str) -> dict:
    """``{"examples": {split: n}, "classes": {split: k}}`` (classes for images only) for ``{split: tensors}``."""
    if unit == "tokens":
        return {"tokens": {s: int(len(d["tokens"])) for s, d in splits.items()}}
    return {"examples": {s: int(len(d["y"])) for s, d in splits.items()},
            "classes": {s: int(d["y"].unique().numel()) for s, d in splits.items()}}
