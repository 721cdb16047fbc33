"""Tiny copies of the real tasks' hub repositories, written by test code in each repository's real layout.

Paths, split names, columns, feature types (``Image`` stored as the struct {bytes, path}, ``ClassLabel`` with the
hub's names in the hub's order) are those of the repositories as served, at the revision the loaders read:

=========================  ======================  ===============================================================
repository                 revision                files
=========================  ======================  ===============================================================
uoft-cs/cifar10            main                    plain_text/{train,test}-00000-of-00001.parquet (img PNG, label)
uoft-cs/cifar100           main                    cifar100/{train,test}-00000-of-00001.parquet
                                                   (img, fine_label, coarse_label)
frgfm/imagenette           refs/convert/parquet    {160px,320px}/{train,validation}/0000.parquet (image JPEG, label);
                           main                    the loading script imagenette.py and metadata/ (no parquet)
zh-plus/tiny-imagenet      main                    data/train-00000-of-00001-1359597a978bc4fa.parquet,
                                                   data/valid-00000-of-00001-70d52db3c749a935.parquet
Salesforce/wikitext        main                    wikitext-2-raw-v1/{train,validation,test}-00000-of-00001.parquet,
                                                   wikitext-103-raw-v1/train-0000{0,1}-of-00002.parquet, ...
=========================  ======================  ===============================================================

Like the real mirrors, Tiny-ImageNet and Imagenette rows are sorted by label (a first-N subset would hold few
classes). :func:`write_hub` writes every repository under ``root/<owner>/<name>/<revision>/``;
:func:`fake_snapshot_download` serves them in place of ``huggingface_hub.snapshot_download`` (the only network
call of the hub path), honouring ``revision`` and ``allow_patterns`` as the hub does.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np

from normbench.tasks import labels as L

# CIFAR-100: the superclass (coarse_label) of each fine label.
CIFAR100_COARSE_OF_FINE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13, 15, 3, 15, 0, 11, 1, 10,
    12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4, 18, 17, 10, 3, 2, 12, 12,
    16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13, 16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8,
    14, 13,
)

WIKI_WORDS = ("the", "of", "and", "in", "a", "was", "to", "is", "for", "on", "as", "by", "with", "he", "at", "from",
              "his", "an", "were", "are", "which", "album", "river", "game", "season", "@-@", "@,@", "1", "2", ",",
              ".", "(", ")", "@.@", "Valkyria", "Chronicles", "Robert", "Boulter", "café", "naïve")


def _image_bytes(rng, size: tuple[int, int], fmt: str, label: int, gray: bool = False) -> bytes:
    from PIL import Image

    w, h = size
    # A class-dependent mean colour plus noise: decodable, distinct images whose pixels the tests can check.
    base = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256], dtype=np.int16)
    arr = np.clip(base + rng.integers(-40, 41, (h, w, 3)), 0, 255).astype(np.uint8)
    img = Image.fromarray(arr)
    if gray:
        img = img.convert("L")  # Tiny-ImageNet has greyscale JPEGs
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _write(path: Path, columns: dict, features) -> None:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(path))


def _labels(classes, per_class: int, sort: bool, seed: int) -> list[int]:
    labels = [c for c in classes for _ in range(per_class)]
    if not sort:
        np.random.default_rng(seed).shuffle(labels)
    return labels


def cifar10(repo: Path, classes=range(10), train_per_class=3, test_per_class=1) -> None:
    import datasets

    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list(L.CIFAR10))})
    rng = np.random.default_rng(10)
    for split, k in (("train", train_per_class), ("test", test_per_class)):
        y = _labels(classes, k, sort=False, seed=len(split))
        imgs = [{"bytes": _image_bytes(rng, (32, 32), "PNG", c), "path": None} for c in y]
        _write(repo / "main" / "plain_text" / f"{split}-00000-of-00001.parquet", {"img": imgs, "label": y}, feats)


def cifar100(repo: Path, classes=(0, 26, 51, 77, 99), train_per_class=3, test_per_class=1) -> None:
    import datasets

    feats = datasets.Features({
        "img": datasets.Image(),
        "fine_label": datasets.ClassLabel(names=list(L.CIFAR100_FINE)),
        "coarse_label": datasets.ClassLabel(names=list(L.CIFAR100_COARSE)),
    })
    rng = np.random.default_rng(100)
    for split, k in (("train", train_per_class), ("test", test_per_class)):
        y = _labels(classes, k, sort=False, seed=len(split))
        cols = {"img": [{"bytes": _image_bytes(rng, (32, 32), "PNG", c), "path": None} for c in y],
                "fine_label": y, "coarse_label": [CIFAR100_COARSE_OF_FINE[c] for c in y]}
        _write(repo / "main" / "cifar100" / f"{split}-00000-of-00001.parquet", cols, feats)


IMAGENETTE_WNIDS = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079", "n03394916", "n03417042",
                    "n03425413", "n03445777", "n03888257")


def imagenette(repo: Path, classes=range(10), train_per_class=3, test_per_class=1) -> None:
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(L.IMAGENETTE))})
    rng = np.random.default_rng(7)
    parquet = repo / "refs%2Fconvert%2Fparquet"
    for config, short in (("160px", 160), ("320px", 320)):
        for split, k in (("train", train_per_class), ("validation", test_per_class)):
            y = _labels(classes, k, sort=True, seed=0)  # the archive is read class folder by class folder
            imgs = []
            for i, c in enumerate(y):
                # Shorter side = the config's size, aspect ratios as in ImageNet (landscape and portrait).
                size = (round(short * 4 / 3), short) if i % 2 == 0 else (short, round(short * 3 / 2))
                folder = f"imagenette2-{short}/{'val' if split == 'validation' else 'train'}/{IMAGENETTE_WNIDS[c]}"
                imgs.append({"bytes": _image_bytes(rng, size, "JPEG", c),
                             "path": f"{folder}/{IMAGENETTE_WNIDS[c]}_{i}.JPEG"})
            _write(parquet / config / split / "0000.parquet", {"image": imgs, "label": y}, feats)
    # The main branch holds the loading script that datasets 4+ refuses, and no parquet files.
    main = repo / "main"
    (main / "metadata" / "imagenette2-160").mkdir(parents=True, exist_ok=True)
    (main / "imagenette.py").write_text('"""Imagenette dataset."""\nimport datasets\n')
    (main / "metadata" / "imagenette2-160" / "train.txt").write_text("imagenette2-160/train/n01440764/x.JPEG\n")


def tiny_imagenet(repo: Path, classes=tuple(range(0, 200, 20)), train_per_class=3, test_per_class=1) -> None:
    import datasets

    feats = datasets.Features({"image": datasets.Image(),
                               "label": datasets.ClassLabel(names=list(L.TINY_IMAGENET))})
    rng = np.random.default_rng(200)
    for split, k, name in (("train", train_per_class, "train-00000-of-00001-1359597a978bc4fa.parquet"),
                           ("valid", test_per_class, "valid-00000-of-00001-70d52db3c749a935.parquet")):
        y = _labels(classes, k, sort=True, seed=0)
        imgs = [{"bytes": _image_bytes(rng, (64, 64), "JPEG", c, gray=(i % 5 == 0)), "path": None}
                for i, c in enumerate(y)]
        _write(repo / "main" / "data" / name, {"image": imgs, "label": y}, feats)


def wiki_lines(n_articles: int, seed: int, paragraphs: int = 3) -> list[str]:
    """WikiText's raw line format: '' between blocks, ' = Title = ', ' = = Section = = ', ' text . \\n'."""
    rng = np.random.default_rng(seed)
    lines = [""]
    for a in range(n_articles):
        lines += [f" = Article {seed}-{a} = \n", ""]
        for p in range(paragraphs):
            if p == 1:
                lines += [f" = = Section {p} = = \n", ""]
            words = rng.choice(WIKI_WORDS, size=int(rng.integers(40, 80)))
            lines += [" " + " ".join(words) + " \n", ""]
    return lines


def wikitext(repo: Path, articles=(24, 3, 3)) -> None:
    import datasets

    feats = datasets.Features({"text": datasets.Value("string")})
    n_train, n_val, n_test = articles
    for config, train_shards in (("wikitext-2-raw-v1", 1), ("wikitext-103-raw-v1", 2)):
        train = wiki_lines(n_train, seed=1)
        cut = len(train) // train_shards
        for i in range(train_shards):
            part = train[i * cut:(i + 1) * cut if i < train_shards - 1 else None]
            _write(repo / "main" / config / f"train-{i:05d}-of-{train_shards:05d}.parquet", {"text": part}, feats)
        _write(repo / "main" / config / "validation-00000-of-00001.parquet", {"text": wiki_lines(n_val, 2)}, feats)
        _write(repo / "main" / config / "test-00000-of-00001.parquet", {"text": wiki_lines(n_test, 3)}, feats)


WRITERS = {
    "uoft-cs/cifar10": cifar10,
    "uoft-cs/cifar100": cifar100,
    "frgfm/imagenette": imagenette,
    "zh-plus/tiny-imagenet": tiny_imagenet,
    "Salesforce/wikitext": wikitext,
}


def write_hub(root: Path, repos=None) -> Path:
    """Write ``repos`` (all by default) under ``root/<owner>/<name>/<revision>/``; returns ``root``."""
    for repo in repos or WRITERS:
        WRITERS[repo](Path(root) / repo)
    return Path(root)


def as_data_dir(hub: Path, data_dir: Path, repos=None) -> Path:
    """Lay ``hub``'s parquet files out as ``hf download REPO --local-dir DATA/REPO`` does (the parquet revision)."""
    for repo in repos or WRITERS:
        revs = sorted(p.name for p in (hub / repo).iterdir())
        rev = "refs%2Fconvert%2Fparquet" if "refs%2Fconvert%2Fparquet" in revs else "main"
        shutil.copytree(hub / repo / rev, data_dir / repo, dirs_exist_ok=True)
    return data_dir


def fake_snapshot_download(hub: Path, cache: Path, calls: list | None = None):
    """A stand-in for ``huggingface_hub.snapshot_download`` that serves ``hub`` (as written by :func:`write_hub`)."""
    from huggingface_hub import utils as errors  # the error classes, exported there by every version
    from huggingface_hub.utils import filter_repo_objects

    def snapshot_download(repo_id, *, repo_type=None, revision=None, allow_patterns=None, ignore_patterns=None,
                          **_):
        if calls is not None:
            calls.append({"repo_id": repo_id, "repo_type": repo_type, "revision": revision,
                          "allow_patterns": allow_patterns})
        rev = (revision or "main").replace("/", "%2F")
        src = hub / repo_id / rev
        if repo_type != "dataset" or not (hub / repo_id).is_dir():
            raise errors.RepositoryNotFoundError(f"404 {repo_type} repository {repo_id}", response=_response(404))
        if not src.is_dir():
            raise errors.RevisionNotFoundError(f"404 Revision Not Found: {revision}", response=_response(404))
        files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
        dest = cache / repo_id / rev
        for f in filter_repo_objects(files, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns):
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / f, dest / f)
        dest.mkdir(parents=True, exist_ok=True)
        return str(dest)

    return snapshot_download


def _response(status: int):
    try:
        import httpx2 as httpx  # the HTTP client of huggingface_hub 2.x
    except ImportError:  # pragma: no cover - older huggingface_hub
        import httpx
    return httpx.Response(status, request=httpx.Request("GET", "https://huggingface.co/api/datasets"))
