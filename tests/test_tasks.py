"""Tasks: the registry, the offline generators, the byte tokenizer, and the real loaders run on local fixtures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from normbench.tasks import DatasetUnavailable, all_tasks, default_task, get_task, list_tasks
from normbench.tasks import synthetic as S
from normbench.tasks.text import ByteTokenizer

datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    # Decoded-tensor caches go to a temporary folder, never the user's.
    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "cache"))


def test_registry_lists_real_and_offline_tasks():
    names = list_tasks()
    for name in ("synth-shapes", "synth-lm", "cifar10", "cifar100", "wikitext-2", "wikitext-103", "imagenette",
                 "tiny-imagenet"):
        assert name in names
    offline = {t.name for t in all_tasks() if t.offline}
    assert offline == {"synth-shapes", "synth-lm"}
    assert default_task(("tokens",)) == "synth-lm"
    assert default_task(("images",)) == "synth-shapes"
    with pytest.raises(KeyError, match="cifar10"):
        get_task("cifar-10")


def test_tasks_command_json_says_which_run_offline(capsys):
    from normbench.cli import main

    assert main(["tasks", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    flags = {t["name"]: t["offline"] for t in out["tasks"]}
    assert flags["synth-lm"] is True and flags["cifar10"] is False
    assert main(["tasks"]) == 0
    assert "offline" in capsys.readouterr().out


def test_synthetic_shapes_are_deterministic_and_labelled():
    a, b = S.make_shapes(64, seed=7), S.make_shapes(64, seed=7)
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])
    assert a["x"].dtype == torch.uint8 and a["x"].shape == (64, 3, S.SHAPES_SIZE, S.SHAPES_SIZE)
    assert int(a["y"].min()) >= 0 and int(a["y"].max()) < len(S.SHAPES_CLASSES)
    assert not torch.equal(a["x"], S.make_shapes(64, seed=8)["x"])


def test_synthetic_lm_contains_verbatim_repeats():
    chain = S.markov_chain(S.LM_VOCAB, S._gen(0))
    docs = S.make_lm(200, seed=1, chain=chain).long()
    assert torch.equal(docs, S.make_lm(200, seed=1, chain=chain).long())
    assert docs.shape == (200, S.LM_DOC) and int(docs.max()) < S.LM_VOCAB
    # A transition the Markov chain gives zero probability can only come from a repeat.
    impossible = chain[docs[:, :-1], docs[:, 1:]] == 0
    assert impossible.any(), "no repeated spans were generated"


def test_offline_tasks_load_and_are_labelled_offline():
    lm = get_task("synth-lm").load()
    assert lm.task.offline and lm.train["tokens"].dim() == 1 and len(lm.train["tokens"]) % S.LM_DOC == 0
    shapes = get_task("synth-shapes").load()
    assert shapes.train["x"].shape[1:] == (3, 16, 16) and len(shapes.eval["y"]) == S.SHAPES_EVAL


def test_byte_tokenizer_round_trips_unicode():
    tok = ByteTokenizer()
    text = "= Valkyria Chronicles III =\n Senjō no Valkyria 3 : naïve café ☃\n"
    ids = tok.encode(text)
    assert ids.dtype == torch.uint8 and tok.vocab_size == 256
    assert tok.decode(ids) == text
    assert len(tok.encode("")) == 0


# -- fixtures in the real schemas ----------------------------------------------------------------------------------

def _images(n, size, seed, gray_every=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w, h = (size, size) if isinstance(size, int) else size
        arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img = PIL.fromarray(arr)
        if gray_every and i % gray_every == 0:
            img = img.convert("L")  # Tiny-ImageNet has some greyscale images
        out.append(img)
    return out


def _image_dataset(n, size, image_col, label_cols, num_classes, seed):
    feats = {image_col: datasets.Image()}
    data = {image_col: _images(n, size, seed, gray_every=5)}
    for col, k in label_cols.items():
        feats[col] = datasets.ClassLabel(num_classes=k)
        data[col] = [i % k for i in range(n)]
    return datasets.Dataset.from_dict(data, features=datasets.Features(feats))


def test_cifar10_from_save_to_disk(tmp_path):
    dd = datasets.DatasetDict({
        "train": _image_dataset(12, 32, "img", {"label": 10}, 10, 0),
        "test": _image_dataset(6, 32, "img", {"label": 10}, 10, 1),
    })
    dd.save_to_disk(str(tmp_path / "cifar10"))
    data = get_task("cifar10").load(data_dir=str(tmp_path))
    assert data.train["x"].shape == (12, 3, 32, 32) and data.train["x"].dtype == torch.uint8
    assert data.eval["y"].tolist() == [i % 10 for i in range(6)]
    # The first image's pixels survive the round trip (it is greyscale, so all channels are equal).
    first = np.array(dd["train"][0]["img"].convert("RGB")).transpose(2, 0, 1).copy()
    assert torch.equal(data.train["x"][0], torch.from_numpy(first))


def test_cifar100_from_hub_parquet_layout_uses_fine_labels(tmp_path):
    root = tmp_path / "uoft-cs" / "cifar100" / "cifar100"
    root.mkdir(parents=True)
    cols = {"fine_label": 100, "coarse_label": 20}
    _image_dataset(10, 32, "img", cols, 100, 0).to_parquet(str(root / "train-00000-of-00001.parquet"))
    _image_dataset(4, 32, "img", cols, 100, 1).to_parquet(str(root / "test-00000-of-00001.parquet"))
    data = get_task("cifar100").load(data_dir=str(tmp_path))
    assert data.train["y"].tolist() == list(range(10))
    assert data.eval["x"].shape == (4, 3, 32, 32)


def test_imagenette_resizes_and_crops_any_size(tmp_path):
    train = datasets.Dataset.from_dict(
        {"image": _images(3, (213, 160), 0) + _images(2, (160, 240), 1), "label": [0, 1, 2, 3, 9]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}))
    val = datasets.Dataset.from_dict(
        {"image": _images(2, (160, 160), 2), "label": [4, 5]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}))
    datasets.DatasetDict({"train": train, "validation": val}).save_to_disk(str(tmp_path / "imagenette"))
    data = get_task("imagenette").load(data_dir=str(tmp_path))
    assert data.train["x"].shape == (5, 3, 144, 144) and data.stored_size == 144
    assert data.eval["y"].tolist() == [4, 5]


def test_tiny_imagenet_parquet_with_valid_split_and_greyscale(tmp_path):
    root = tmp_path / "tiny-imagenet" / "data"
    root.mkdir(parents=True)
    _image_dataset(8, 64, "image", {"label": 200}, 200, 0).to_parquet(str(root / "train-00000-of-00001-abc.parquet"))
    _image_dataset(4, 64, "image", {"label": 200}, 200, 1).to_parquet(str(root / "valid-00000-of-00001-def.parquet"))
    data = get_task("tiny-imagenet").load(data_dir=str(tmp_path))
    assert data.train["x"].shape == (8, 3, 64, 64) and len(data.eval["y"]) == 4


def test_wikitext_parquet_becomes_bytes(tmp_path):
    root = tmp_path / "Salesforce" / "wikitext" / "wikitext-2-raw-v1"
    root.mkdir(parents=True)
    lines = ["", " = Robert Boulter = \n", "", " Robert Boulter is an English actor . \n"]
    datasets.Dataset.from_dict({"text": lines * 50}).to_parquet(str(root / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_dict({"text": lines * 5}).to_parquet(str(root / "validation-00000-of-00001.parquet"))
    datasets.Dataset.from_dict({"text": ["x"]}).to_parquet(str(root / "test-00000-of-00001.parquet"))
    data = get_task("wikitext-2").load(data_dir=str(tmp_path))
    assert ByteTokenizer().decode(data.train["tokens"]) == "".join(lines * 50)
    assert ByteTokenizer().decode(data.eval["tokens"]) == "".join(lines * 5)


def test_missing_dataset_says_which_why_and_how(tmp_path):
    with pytest.raises(DatasetUnavailable) as err:
        get_task("cifar10").load(data_dir=str(tmp_path))
    msg = str(err.value)
    for needle in ("cifar10", "uoft-cs/cifar10", "--data-dir", "HF_DATASETS_OFFLINE", "save_to_disk"):
        assert needle in msg


def test_missing_dataset_in_offline_mode_fails_fast_with_help(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetUnavailable) as err:
        get_task("wikitext-2").load()
    msg = str(err.value)
    assert "wikitext-2" in msg and "offline mode" in msg and "datasets cache" in msg


def test_wrong_schema_is_named(tmp_path):
    ds = datasets.Dataset.from_dict({"image": _images(2, 32, 0), "label": [0, 1]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "cifar10"))
    with pytest.raises(DatasetUnavailable, match="'img'"):
        get_task("cifar10").load(data_dir=str(tmp_path))


def test_partial_parquet_layout_names_the_missing_split(tmp_path):
    root = tmp_path / "cifar10"
    root.mkdir()
    _image_dataset(4, 32, "img", {"label": 10}, 10, 0).to_parquet(str(root / "train-00000-of-00001.parquet"))
    with pytest.raises(DatasetUnavailable, match="eval"):
        get_task("cifar10").load(data_dir=str(tmp_path))


def test_a_real_task_trains_on_its_fixture(tmp_path):
    from normbench.train.loop import Run, train

    dd = datasets.DatasetDict({
        "train": _image_dataset(16, 32, "img", {"label": 10}, 10, 0),
        "test": _image_dataset(8, 32, "img", {"label": 10}, 10, 1),
    })
    dd.save_to_disk(str(tmp_path / "cifar10"))
    rec = train(Run(task="cifar10", model="resnet", norm="groupnorm", data_dir=str(tmp_path), progress=False,
                    checkpoint_dir=str(tmp_path / "ck"),
                    recipe_overrides={"steps": 2, "batch_size": 4, "eval_every": 2, "warmup_steps": 0,
                                      "model_options": {"layers": (1, 1, 1)}}))
    assert rec["config"]["task_offline"] is False and rec["metrics"]["steps"] == 2
    assert 0.0 <= rec["metrics"]["final"] <= 1.0
