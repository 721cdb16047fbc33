"""How a real task's splits are made: validation carved from train, quick subsets, both class-stratified and seeded.

The test split is always the dataset's own (CIFAR ``test``, Tiny-ImageNet ``valid``, Imagenette ``validation``,
WikiText ``test``). The validation split is a fixed, seeded, class-stratified tenth of the training split, and the
rest is what every run trains on, so learning rates chosen on it never saw the test split. ``--quick`` keeps a
seeded, class-stratified subset of each split (hub mirrors are often sorted by label, so the first N examples would
hold one or two classes).
"""

from __future__ import annotations

import numpy as np

#: Fixed seed of every split and subset: all runs of a task, whatever their training seed, see the same examples.
SPLIT_SEED = 1234
#: Share of the training split held out as the validation split.
VAL_FRACTION = 0.1


def stratified_pick(labels, n: int, seed: int) -> np.ndarray:
    """Sorted indices of ``n`` examples drawn without replacement so that each class keeps its share.

    Each class gets ``floor(n * share)`` examples, and the remaining ones go to the classes with the largest
    remainders (ties broken by the seeded generator); within a class the examples are a seeded random draw.
    """
    labels = np.asarray(labels)
    total = len(labels)
    if not 0 <= n <= total:
        raise ValueError(f"cannot pick {n} of {total} examples")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    exact = n * counts / total
    take = np.floor(exact).astype(int)
    short = n - int(take.sum())
    if short:
        # Largest remainder first; a random key breaks ties so no class is favoured by its label value.
        order = np.lexsort((rng.random(len(classes)), -(exact - take)))
        take[order[:short]] += 1
    picked = []
    for c, k in zip(classes, take):
        if k:
            members = np.flatnonzero(labels == c)
            picked.append(rng.choice(members, size=int(k), replace=False))
    return np.sort(np.concatenate(picked)) if picked else np.empty(0, dtype=np.int64)


def carve_validation(labels, fraction: float = VAL_FRACTION, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices): a stratified ``fraction`` of ``labels`` held out, the rest kept."""
    labels = np.asarray(labels)
    val = stratified_pick(labels, int(round(fraction * len(labels))), seed)
    keep = np.ones(len(labels), dtype=bool)
    keep[val] = False
    return np.flatnonzero(keep), val


def quick_subset(labels, limit: int, seed: int) -> np.ndarray:
    """Indices (into ``labels``) of a stratified subset of at most ``limit`` examples; all of them when fewer."""
    labels = np.asarray(labels)
    if len(labels) <= limit:
        return np.arange(len(labels))
    return stratified_pick(labels, limit, seed)
