"""Language-modelling tasks from the Hugging Face hub (WikiText-2 and WikiText-103, raw) and the byte tokenizer.

Tokenisation is byte-level UTF-8 (vocabulary 256): it needs no files, so it works offline and is exactly
reversible. Perplexity is therefore per byte, not per word or BPE token; compare it only with byte-level numbers.
"""

from __future__ import annotations

import os

import torch

from normbench.tasks.hub import load_splits
from normbench.tasks.vision import cache_dir

#: Bytes kept per split by ``quick`` on real tasks (a smoke run).
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


def encode_split(ds, tag: str, limit_bytes: int | None = None) -> torch.Tensor:
    """Join a WikiText split's 'text' lines (they keep their own newlines) and encode them as bytes, cached."""
    fp = getattr(ds, "_fingerprint", None)
    path = cache_dir() / "data" / f"{tag}-bytes-{limit_bytes}-{fp}.pt" if fp else None
    if path is not None and path.is_file():
        try:
            return torch.load(path, weights_only=True)
        except Exception:
            pass
    pieces, total = [], 0
    for start in range(0, len(ds), 10_000):
        for line in ds[start:start + 10_000]["text"]:
            pieces.append(line)
            total += len(line)
            if limit_bytes is not None and total >= limit_bytes:
                break
        if limit_bytes is not None and total >= limit_bytes:
            break
    tokens = ByteTokenizer().encode("".join(pieces))
    if limit_bytes is not None:
        tokens = tokens[:limit_bytes]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(tokens, tmp)
        os.replace(tmp, path)
    return tokens


def _wikitext_loader(config: str):
    def load(task, data_dir=None, quick=False):
        from normbench.tasks import TaskData

        splits = load_splits(task.name, "Salesforce/wikitext", config,
                             {"train": ("train",), "eval": ("validation", "valid")}, ("text",), data_dir=data_dir)
        train = encode_split(splits["train"], f"{task.name}-train", QUICK_TRAIN_BYTES if quick else None)
        ev = encode_split(splits["eval"], f"{task.name}-eval", QUICK_EVAL_BYTES if quick else None)
        if len(train) == 0 or len(ev) == 0:
            raise ValueError(f"{task.name}: empty text after loading (train {len(train)}, eval {len(ev)} bytes)")
        return TaskData(task=task, train={"tokens": train}, eval={"tokens": ev},
                        info={"source": "Salesforce/wikitext", "config": config, "tokenizer": "bytes",
                              "train_tokens": len(train), "eval_tokens": len(ev)})
    return load


def _tasks():
    from normbench.tasks import Task

    return [
        Task(
            name="wikitext-2", title="WikiText-2 (raw, bytes)", modality="text", offline=False, metric="perplexity",
            higher_is_better=False,
            description="Wikipedia articles, ~11 MB of raw training text; Salesforce/wikitext 'wikitext-2-raw-v1' "
                        "'text'; byte-level tokens, evaluated on the validation split.",
            source="Salesforce/wikitext (wikitext-2-raw-v1)", loader=_wikitext_loader("wikitext-2-raw-v1"),
            default_model="gpt", models=("gpt",), vocab_size=256, tokenizer="bytes",
        ),
        Task(
            name="wikitext-103", title="WikiText-103 (raw, bytes)", modality="text", offline=False,
            metric="perplexity", higher_is_better=False,
            description="Wikipedia articles, ~540 MB of raw training text; Salesforce/wikitext 'wikitext-103-raw-v1' "
                        "'text'; byte-level tokens, evaluated on the validation split.",
            source="Salesforce/wikitext (wikitext-103-raw-v1)", loader=_wikitext_loader("wikitext-103-raw-v1"),
            default_model="gpt", models=("gpt",), vocab_size=256, tokenizer="bytes",
        ),
    ]


TASKS = _tasks()
