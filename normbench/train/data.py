"""Deterministic, stateless batching: the batch of step ``s`` depends only on (seed, s, rank), so resume is exact.

Sample order comes from ``torch.utils.data.DistributedSampler`` (one permutation per epoch seeded by
seed + epoch, sharded across ranks; with one process it is a plain shuffled order): rank r of N takes the global
batch's examples r, r + N, r + 2N, ..., so the global batch of a step is the same set for every world size.
Augmentation draws from a generator seeded by (seed, step) — the same on every rank — for the whole global batch,
and each rank keeps its examples' draws: an example is cropped and flipped the same way whatever the world size.
Text is cut into non-overlapping blocks of ``seq_len + 1`` tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler


class _Sized:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def step_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + step * 7_919 + rank * 104_729) % (2 ** 63))
    return g


class Batcher:
    """Training batches and evaluation batches for one task, on one rank."""

    def __init__(self, data, recipe, seed: int, device, rank: int = 0, world: int = 1):
        self.data = data
        self.task = data.task
        self.recipe = recipe
        self.seed = seed
        self.device = device
        self.rank, self.world = rank, world
        if recipe.batch_size % world:
            raise ValueError(f"batch size {recipe.batch_size} is not divisible by the world size {world}")
        self.batch = recipe.batch_size // world
        if self.task.modality == "text":
            s = recipe.seq_len
            if s is None:
                raise ValueError(f"recipe {recipe.name} needs seq_len for a text task")
            self.train_blocks = self._blocks(data.train["tokens"], s)
            self.eval_blocks = self._blocks(data.eval["tokens"], s)
            n_train = len(self.train_blocks)
        else:
            n_train = len(data.train["y"])
            self.mean = torch.tensor(data.mean).view(1, -1, 1, 1)
            self.std = torch.tensor(data.std).view(1, -1, 1, 1)
        self.sampler = DistributedSampler(_Sized(n_train), num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                          drop_last=True)
        self.steps_per_epoch = len(self.sampler) // self.batch
        if self.steps_per_epoch == 0:
            raise ValueError(f"{self.task.name}: {n_train} training examples are fewer than one batch per rank "
                             f"({self.batch})")
        self._epoch, self._order = None, None

    @staticmethod
    def _blocks(tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
        n = len(tokens) // (seq_len + 1)
        if n == 0:
            raise ValueError(f"{len(tokens)} tokens are fewer than one sequence of {seq_len + 1}")
        return tokens[: n * (seq_len + 1)].view(n, seq_len + 1)

    def indices(self, step: int) -> list[int]:
        epoch, pos = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self.sampler.set_epoch(epoch)
            self._order = list(self.sampler)
            self._epoch = epoch
        return self._order[pos * self.batch:(pos + 1) * self.batch]

    # -- images ---------------------------------------------------------------------------------------------
    def _standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255.0 - self.mean) / self.std

    def _center(self, x: torch.Tensor) -> torch.Tensor:
        size, stored = self.task.image_size, x.shape[-1]
        if stored == size:
            return x
        o = (stored - size) // 2
        return x[..., o:o + size, o:o + size]

    def _augment(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        r = self.recipe
        size = self.task.image_size
        if r.augmentation == "none":
            return self._center(x)
        if r.crop_padding:
            # Zero padding after standardisation is padding with the mean colour.
            x = F.pad(x, [r.crop_padding] * 4)
        room = x.shape[-1] - size
        out = torch.empty(x.shape[0], x.shape[1], size, size, dtype=x.dtype)
        # Draws for the whole global batch, of which this rank takes its examples' share (global position
        # rank + world·i, as DistributedSampler interleaves): every example gets the same crop and flip whatever
        # the world size, so N ranks see exactly the batches one process would.
        n, mine = x.shape[0] * self.world, slice(self.rank, None, self.world)
        oy = torch.randint(0, room + 1, (n,), generator=g)[mine]
        ox = torch.randint(0, room + 1, (n,), generator=g)[mine]
        flip = (torch.rand(n, generator=g) < 0.5)[mine]
        for i in range(x.shape[0]):
            crop = x[i, :, oy[i]:oy[i] + size, ox[i]:ox[i] + size]
            out[i] = crop.flip(-1) if (flip[i] and "flip" in r.augmentation) else crop
        return out

    def train_batch(self, step: int):
        idx = torch.tensor(self.indices(step), dtype=torch.long)
        if self.task.modality == "text":
            blk = self.train_blocks[idx].long()
            return blk[:, :-1].to(self.device), blk[:, 1:].to(self.device)
        x = self._standardise(self.data.train["x"][idx])
        x = self._augment(x, step_generator(self.seed, step))
        return x.contiguous().to(self.device), self.data.train["y"][idx].to(self.device)

    def eval_batches(self, limit: int | None, batch: int = 256):
        """This rank's share of the first ``limit`` evaluation examples (all when ``None``), in order."""
        if self.task.modality == "text":
            n = len(self.eval_blocks) if limit is None else min(limit, len(self.eval_blocks))
            ids = list(range(self.rank, n, self.world))
            for i in range(0, len(ids), max(1, batch // 8)):
                blk = self.eval_blocks[ids[i:i + max(1, batch // 8)]].long()
                yield blk[:, :-1].to(self.device), blk[:, 1:].to(self.device)
            return
        n = len(self.data.eval["y"]) if limit is None else min(limit, len(self.data.eval["y"]))
        ids = torch.arange(self.rank, n, self.world)
        for i in range(0, len(ids), batch):
            sel = ids[i:i + batch]
            x = self._center(self._standardise(self.data.eval["x"][sel]))
            yield x.contiguous().to(self.device), self.data.eval["y"][sel].to(self.device)
