"""Language-modelling tasks from the Hugging Face hub (WikiText-2 and WikiText-103, raw) and the byte tokenizer.

Tokenisation is byte-level UTF-8 (vocabulary 256): it needs no files, so it works offline and is exactly
reversible. Perplexity is therefore per byte, not per word or BPE token; compare it only with byte-level numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from normbench.tasks.base import Task, TaskData, split_summary
from normbench.tasks.hub import DatasetUnavailable, HubSource, load_splits
from normbench.tasks.splits import SPLIT_SEED, VAL_FRACTION
from normbench.tasks.vision import cache_dir, save_cache

#: Bytes kept by ``quick`` on real tasks (train; val and test): a smoke run.
QUICK_TRAIN_BYTES, QUICK_EVAL_BYTES = 2_000_000, 200_000


class ByteTokenizer:
    """UTF-8 bytes as tokens: ``encode(str) -> uint8 tensor``, ``decode(tensor) -> str``; vocabulary 256."""

    vocab_size = 256
    name = "bytes"

    def encode(self, text: str) -> torch.Tensor:
        data = bytearray(text.encode("utf-8"))
        if not data:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(data, dtype=torch.uint8).clone()

    def decode(self, tokens) -> str:
        return bytes(torch.as_tensor(tokens, dtype=torch.uint8).tolist()).decode("utf-8", errors="replace")


def read_lines(ds) -> list[str]:
    """A WikiText split's 'text' lines, in order (each keeps its own newline)."""
    lines: list[str] = []
    for start in range(0, len(ds), 10_000):
        lines.extend(ds[start:start + 10_000]["text"])
    return lines


def _is_title(line: str) -> bool:
    # " = Title = " opens an article; " = = Section = = " and deeper headings do not.
    return line.startswith(" = ") and not line.startswith(" = = ") and line.rstrip("\n").endswith(" = ")


def articles(lines: list[str], fallback_lines: int = 200) -> list[str]:
    """The lines grouped into articles (a new one at each top-level heading); fixed blocks of lines without any.

    Splits are carved from whole articles so that no article is half in training and half in validation.
    """
    out: list[list[str]] = [[]]
    for line in lines:
        if _is_title(line) and any(prev.strip() for prev in out[-1]):  # blank lines stay with the next title
            out.append([])
        out[-1].append(line)
    if len(out) < 2:
        out = [lines[i:i + fallback_lines] for i in range(0, len(lines), fallback_lines)]
    return ["".join(a) for a in out if a]


def _pick_articles(docs: list[str], budget: int | None, seed: int) -> list[int]:
    """Indices (in order) of seeded random articles until ``budget`` characters are reached; all when ``None``."""
    if budget is None:
        return list(range(len(docs)))
    chosen, total = [], 0
    for i in np.random.default_rng(seed).permutation(len(docs)):
        if total >= budget:
            break
        chosen.append(int(i))
        total += len(docs[i])
    return sorted(chosen)


def text_splits(train_ds, test_ds, tag: str, quick: bool) -> dict[str, torch.Tensor]:
    """``{"train", "val", "test"}`` byte tokens: validation is a seeded tenth of train's articles, test its own.

    ``quick`` keeps seeded random articles up to 2 MB (train) and 200 kB (val, test). Cached on disk.
    """
    fps = (getattr(train_ds, "_fingerprint", None), getattr(test_ds, "_fingerprint", None))
    key = f"{tag}-splits-{SPLIT_SEED}-{VAL_FRACTION:g}-{'quick' if quick else 'all'}-{fps[0]}-{fps[1]}"
    path = cache_dir() / "data" / f"{key}.pt" if all(fps) else None
    if path is not None and path.is_file():
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # a truncated cache file is rebuilt, not trusted
            pass
    docs = articles(read_lines(train_ds))
    total = sum(len(d) for d in docs)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(docs))
    held, size = set(), 0
    for i in order[:-1]:  # never hold out every article
        if size >= VAL_FRACTION * total:
            break
        held.add(int(i))
        size += len(docs[i])
    train_docs = [d for i, d in enumerate(docs) if i not in held]
    val_docs = [d for i, d in enumerate(docs) if i in held]
    test_docs = articles(read_lines(test_ds))
    tok = ByteTokenizer()
    out = {}
    for part, part_docs, budget, seed in (("train", train_docs, QUICK_TRAIN_BYTES, SPLIT_SEED + 1),
                                          ("val", val_docs, QUICK_EVAL_BYTES, SPLIT_SEED + 2),
                                          ("test", test_docs, QUICK_EVAL_BYTES, SPLIT_SEED + 3)):
        keep = _pick_articles(part_docs, budget if quick else None, seed)
        tokens = tok.encode("".join(part_docs[i] for i in keep))
        out[part] = tokens[:budget] if quick else tokens
    if path is not None:
        save_cache(out, path)
    return out


WIKITEXT_2 = HubSource("Salesforce/wikitext", "wikitext-2-raw-v1", {"train": "train", "test": "test"}, ("text",))
WIKITEXT_103 = HubSource("Salesforce/wikitext", "wikitext-103-raw-v1", {"train": "train", "test": "test"},
                         ("text",))


def _wikitext_loader(src: HubSource):
    def load(task, data_dir=None, quick=False):
        splits = load_splits(task.name, src, data_dir=data_dir)
        parts = text_splits(splits["train"], splits["test"], task.name, quick)
        sizes = {p: len(t) for p, t in parts.items()}
        if not all(sizes.values()):
            raise DatasetUnavailable(f"{task.name}: a split has no text after loading (bytes per split: {sizes})")
        tensors = {p: {"tokens": t} for p, t in parts.items()}
        data = {
            "source": src.describe(),
            "val": f"{VAL_FRACTION:g} of 'train' (whole articles), seed {SPLIT_SEED}",
            "test": "test",
            "subset": f"seeded whole articles, at most {QUICK_TRAIN_BYTES}/{QUICK_EVAL_BYTES}/{QUICK_EVAL_BYTES} "
                      f"bytes" if quick else "all",
            **split_summary(tensors, "tokens"),
        }
        return TaskData(task=task, train=tensors["train"], val=tensors["val"], eval=tensors["test"],
                        info={"source": src.repo, "config": src.folder, "tokenizer": "bytes", "data": data})
    return load


def _tasks():
    return [
        Task(
            name="wikitext-2", title="WikiText-2 (raw, bytes)", modality="text", offline=False, metric="perplexity",
            higher_is_better=False,
            description="Wikipedia articles, ~11 MB of raw training text; Salesforce/wikitext 'wikitext-2-raw-v1' "
                        "'text'; byte-level tokens, scored on 'test'; validation: a tenth of train's articles "
                        "(seed 1234).",
            source="Salesforce/wikitext (wikitext-2-raw-v1)", loader=_wikitext_loader(WIKITEXT_2),
            default_model="gpt", models=("gpt",), vocab_size=256, tokenizer="bytes",
        ),
        Task(
            name="wikitext-103", title="WikiText-103 (raw, bytes)", modality="text", offline=False,
            metric="perplexity", higher_is_better=False,
            description="Wikipedia articles, ~540 MB of raw training text; Salesforce/wikitext 'wikitext-103-raw-v1' "
                        "'text'; byte-level tokens, scored on 'test'; validation: a tenth of train's articles "
                        "(seed 1234).",
            source="Salesforce/wikitext (wikitext-103-raw-v1)", loader=_wikitext_loader(WIKITEXT_103),
            default_model="gpt", models=("gpt",), vocab_size=256, tokenizer="bytes",
        ),
    ]


TASKS = _tasks()
