"""Every real task loads and trains from files in its hub repository's layout: through ``--data-dir``, and through
the hub code with only ``huggingface_hub.snapshot_download`` (the network call) replaced. Wrong inputs get errors
that name what was expected."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")
pq = pytest.importorskip("pyarrow.parquet")

import hub_layouts as H  # noqa: E402  (tests/ is on sys.path)

from normbench.tasks import DatasetUnavailable, get_task  # noqa: E402
from normbench.tasks import vision as V  # noqa: E402
from normbench.tasks.text import ByteTokenizer, articles  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

REAL = ("cifar10", "cifar100", "imagenette", "tiny-imagenet", "wikitext-2", "wikitext-103")
#: The test split each task is scored on: the dataset's own.
TEST_FILE = {
    "cifar10": "uoft-cs/cifar10/plain_text/test-00000-of-00001.parquet",
    "cifar100": "uoft-cs/cifar100/cifar100/test-00000-of-00001.parquet",
    "imagenette": "frgfm/imagenette/160px/validation/0000.parquet",
    "tiny-imagenet": "zh-plus/tiny-imagenet/data/valid-00000-of-00001-70d52db3c749a935.parquet",
    "wikitext-2": "Salesforce/wikitext/wikitext-2-raw-v1/test-00000-of-00001.parquet",
    "wikitext-103": "Salesforce/wikitext/wikitext-103-raw-v1/test-00000-of-00001.parquet",
}
TRAIN_FILES = {
    "cifar10": ["uoft-cs/cifar10/plain_text/train-00000-of-00001.parquet"],
    "cifar100": ["uoft-cs/cifar100/cifar100/train-00000-of-00001.parquet"],
    "imagenette": ["frgfm/imagenette/160px/train/0000.parquet"],
    "tiny-imagenet": ["zh-plus/tiny-imagenet/data/train-00000-of-00001-1359597a978bc4fa.parquet"],
    "wikitext-2": ["Salesforce/wikitext/wikitext-2-raw-v1/train-00000-of-00001.parquet"],
    "wikitext-103": [f"Salesforce/wikitext/wikitext-103-raw-v1/train-0000{i}-of-00002.parquet" for i in (0, 1)],
}
LABEL = {"cifar10": "label", "cifar100": "fine_label", "imagenette": "label", "tiny-imagenet": "label"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The five repositories (all revisions) and a --data-dir copy of their parquet files."""
    root = tmp_path_factory.mktemp("hub")
    H.write_hub(root / "repos")
    H.as_data_dir(root / "repos", root / "data")
    return root


@pytest.fixture(autouse=True)
def _private_caches(tmp_path, monkeypatch):
    # Decoded tensors and the HF caches go to temporary folders, never the user's.
    import datasets

    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")  # read at import


@pytest.fixture
def fake_hub(hub, tmp_path, monkeypatch):
    """``huggingface_hub.snapshot_download`` replaced by one that serves the local repositories; returns its calls."""
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        H.fake_snapshot_download(hub / "repos", tmp_path / "hf-hub", calls))
    return calls


def _table(hub, rel):
    return pq.read_table(hub / "data" / rel).to_pydict()


def _rows(hub, task):
    """All training rows of ``task`` (shards in order) and its test rows, read with pyarrow alone."""
    train = {}
    for rel in TRAIN_FILES[task]:
        for k, v in _table(hub, rel).items():
            train.setdefault(k, []).extend(v)
    return train, _table(hub, TEST_FILE[task])


@pytest.mark.parametrize("task", REAL)
def test_real_task_splits_from_data_dir(hub, task):
    data = get_task(task).load(data_dir=str(hub / "data"))
    train_rows, test_rows = _rows(hub, task)
    info = data.info["data"]
    if task.startswith("wikitext"):
        tok = ByteTokenizer()
        # The test split is the dataset's own test file, byte for byte.
        assert tok.decode(data.test["tokens"]) == "".join(test_rows["text"])
        # Train and validation partition the training articles (all shards): nothing lost, nothing shared.
        whole = articles(train_rows["text"])
        train_text, val_text = tok.decode(data.train["tokens"]), tok.decode(data.val["tokens"])
        held = [d for d in whole if d in val_text]
        assert 1 <= len(held) < len(whole) and not any(d in train_text for d in held)
        assert all(d in train_text for d in whole if d not in held)
        assert len(data.train["tokens"]) + len(data.val["tokens"]) == len("".join(whole).encode())
        assert info["tokens"] == {"train": len(data.train["tokens"]), "val": len(data.val["tokens"]),
                                  "test": len(data.test["tokens"])}
        return
    label = LABEL[task]
    # What a record id is computed from before the run (labels only, no decoding) is what the run then sees.
    t = get_task(task)
    assert t.summarize(t, data_dir=str(hub / "data"), quick=False) == info
    # Scored on the dataset's own test split, in its order.
    assert data.test["y"].tolist() == test_rows[label]
    # Validation + train are exactly the training rows (as multisets of labels), validation stratified.
    y_all = np.asarray(train_rows[label])
    assert sorted(data.train["y"].tolist() + data.val["y"].tolist()) == sorted(y_all.tolist())
    assert len(data.val["y"]) == round(0.1 * len(y_all))
    assert info["examples"] == {"train": len(data.train["y"]), "val": len(data.val["y"]),
                                "test": len(test_rows[label])}
    assert info["classes"]["test"] == len(set(test_rows[label]))
    size = data.stored_size
    assert data.train["x"].shape[1:] == (3, size, size) and data.train["x"].dtype == torch.uint8
    if task != "imagenette":  # stored at their own size: the first test image is the file's pixels (RGB)
        first = test_rows[next(iter(k for k in test_rows if k in ("img", "image")))][0]
        rgb = np.asarray(PIL.open(io.BytesIO(first["bytes"])).convert("RGB")).transpose(2, 0, 1)
        assert torch.equal(data.test["x"][0], torch.from_numpy(rgb.copy()))


@pytest.mark.parametrize("task", REAL)
def test_real_task_through_the_hub_code_matches_data_dir(hub, fake_hub, task):
    via_hub = get_task(task).load()
    via_dir = get_task(task).load(data_dir=str(hub / "data"))
    for split in ("train", "val", "test"):
        a, b = getattr(via_hub, split), getattr(via_dir, split)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert via_hub.info["data"] == via_dir.info["data"]
    call = fake_hub[-1]
    assert call["repo_type"] == "dataset"
    if task == "imagenette":
        # The script-based repository is read from the hub's parquet conversion of it, 160px only.
        assert call["revision"] == "refs/convert/parquet" and call["allow_patterns"] == ["160px/*.parquet"]
    else:
        assert call["revision"] is None


def test_imagenette_takes_its_160px_configuration_and_crops_to_144(hub):
    data = get_task("imagenette").load(data_dir=str(hub / "data"))
    assert data.stored_size == 144 and data.train["x"].shape[1:] == (3, 144, 144)
    # The 320px configuration in the same repository is ignored: 10 validation rows, not 20.
    assert len(data.test["y"]) == 10


def _tiny(task):
    from normbench.models.timm_models import RESNET_PRESETS, preset_for

    t = get_task(task)
    if t.modality == "text":
        return {"model_options": {"n_layer": 1, "n_head": 2, "n_embd": 16}}
    stages = len(preset_for(RESNET_PRESETS, t.image_size).layers)
    return {"model_options": {"layers": [1] * stages, "channels": [8] * stages}}


@pytest.mark.parametrize("source", ["data_dir", "hub"])
@pytest.mark.parametrize("task", REAL)
def test_every_real_task_trains(hub, fake_hub, tmp_path, task, source):
    from normbench.results import validate_record
    from normbench.train.loop import Run, train
    from normbench.train.recipes import get_recipe

    norm = "layernorm" if task.startswith("wikitext") else "groupnorm"
    recipe = get_recipe(task, get_task(task).default_model)
    run = Run(task=task, model=get_task(task).default_model, norm=norm, progress=False,
              data_dir=str(hub / "data") if source == "data_dir" else None, checkpoint_dir=str(tmp_path / "ck"),
              recipe_overrides={"steps": 2, "batch_size": 2, "eval_every": 2, "warmup_steps": 0, **_tiny(task)})
    rec = train(run)
    assert validate_record(rec) == []
    cfg, met = rec["config"], rec["metrics"]
    assert cfg["task"] == task and cfg["task_offline"] is False and met["steps"] == 2 and not met["diverged"]
    assert math.isfinite(met["final"])
    if task.startswith("wikitext"):
        assert met["final"] > 1
        # The recipe's context length reached the model (it used to stay at the default 64).
        assert cfg["model_config"]["seq_len"] == recipe.seq_len
        assert set(cfg["data"]["tokens"]) == {"train", "val", "test"}
    else:
        assert 0 <= met["final"] <= 1
        assert cfg["data"]["examples"]["test"] == len(_table(hub, TEST_FILE[task])[LABEL[task]])
        assert cfg["data"]["classes"]["train"] == len(set(_rows(hub, task)[0][LABEL[task]]))
    if source == "hub":
        assert fake_hub, "the hub path did not download"


def test_train_command_runs_wikitext_from_data_dir(hub, tmp_path, capsys):
    from normbench.cli import main

    out = tmp_path / "results"
    code = main(["train", "--task", "wikitext-2", "--norm", "rmsnorm", "--data-dir", str(hub / "data"),
                 "--steps", "1", "--batch-size", "1", "--seeds", "1", "--out", str(out), "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "ck")])
    assert code == 0, capsys.readouterr().err
    from normbench.results import iter_records

    [(_, rec)] = list(iter_records(out, kind="accuracy", errors="raise"))
    assert rec["config"]["model_config"]["seq_len"] == 256 and rec["config"]["recipe"]["name"] == "wikitext-2/gpt"
    assert math.isfinite(rec["metrics"]["final"])


def test_quick_subsets_are_class_stratified_on_a_label_sorted_mirror(hub, monkeypatch):
    # Tiny-ImageNet rows are sorted by label on the hub: the first 10 training rows hold 4 classes.
    train_rows, _ = _rows(hub, "tiny-imagenet")
    assert len(set(train_rows["label"][:10])) <= 4
    monkeypatch.setattr(V, "QUICK_TRAIN", 10)
    monkeypatch.setattr(V, "QUICK_EVAL", 5)
    data = get_task("tiny-imagenet").load(data_dir=str(hub / "data"), quick=True)
    assert len(data.train["y"]) == 10 and len(data.test["y"]) == 5
    assert data.info["data"]["classes"]["train"] == 10 and data.info["data"]["classes"]["test"] == 5
    assert data.info["data"]["subset"].startswith("class-stratified")
    t = get_task("tiny-imagenet")
    assert t.summarize(t, data_dir=str(hub / "data"), quick=True) == data.info["data"]
    again = get_task("tiny-imagenet").load(data_dir=str(hub / "data"), quick=True)
    assert torch.equal(again.train["y"], data.train["y"]) and torch.equal(again.train["x"], data.train["x"])


def test_save_to_disk_folder_is_read(tmp_path):
    import datasets

    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list(H.L.CIFAR10))})
    rng = np.random.default_rng(0)

    def split(labels):
        return datasets.Dataset.from_dict(
            {"img": [{"bytes": H._image_bytes(rng, (32, 32), "PNG", c), "path": None} for c in labels],
             "label": labels}, features=feats)

    datasets.DatasetDict({"train": split(list(range(10)) * 2), "test": split([3, 1, 4])}).save_to_disk(
        str(tmp_path / "data" / "cifar10"))
    data = get_task("cifar10").load(data_dir=str(tmp_path / "data"))
    assert data.test["y"].tolist() == [3, 1, 4] and len(data.train["y"]) + len(data.val["y"]) == 20


# -- errors that say what was expected ------------------------------------------------------------------------------

def test_wrong_directory_names_the_expected_layout(tmp_path):
    (tmp_path / "somewhere").mkdir()
    with pytest.raises(DatasetUnavailable) as err:
        get_task("cifar10").load(data_dir=str(tmp_path / "somewhere"))
    msg = str(err.value)
    assert "uoft-cs/cifar10/plain_text/train-00000-of-00001.parquet" in msg
    assert "plain_text/test-00000-of-00001.parquet" in msg and "save_to_disk" in msg and "hf download" in msg
    with pytest.raises(DatasetUnavailable, match="160px/validation/0000.parquet.*refs/convert/parquet|"
                                                 "refs/convert/parquet.*160px/validation/0000.parquet"):
        get_task("imagenette").load(data_dir=str(tmp_path / "somewhere"))


def test_dataset_folder_passed_as_data_dir_says_to_pass_its_parent(hub):
    with pytest.raises(DatasetUnavailable, match="pass its parent"):
        get_task("cifar10").load(data_dir=str(hub / "data" / "uoft-cs" / "cifar10"))


def test_partial_layout_names_the_missing_split(hub, tmp_path):
    import shutil

    root = tmp_path / "data" / "zh-plus" / "tiny-imagenet" / "data"
    root.mkdir(parents=True)
    shutil.copy(hub / "data" / TRAIN_FILES["tiny-imagenet"][0], root)
    with pytest.raises(DatasetUnavailable, match=r"not \['valid'\].*data/valid-00000-of-00001.parquet"):
        get_task("tiny-imagenet").load(data_dir=str(tmp_path / "data"))


def test_labels_in_another_order_are_refused(tmp_path):
    import datasets

    names = list(H.L.CIFAR10)
    names[2], names[3] = names[3], names[2]  # a copy whose label 2 is "cat" and 3 is "bird"
    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    root = tmp_path / "uoft-cs" / "cifar10" / "plain_text"
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        H._write(root / f"{split}-00000-of-00001.parquet",
                 {"img": [{"bytes": H._image_bytes(rng, (32, 32), "PNG", 0), "path": None}] * 10,
                  "label": list(range(10))}, feats)
    with pytest.raises(DatasetUnavailable, match="first difference at label 2 .'cat' here, 'bird' on the hub"):
        get_task("cifar10").load(data_dir=str(tmp_path))


def test_wrong_columns_are_named(tmp_path):
    import datasets

    root = tmp_path / "uoft-cs" / "cifar10" / "plain_text"
    for split in ("train", "test"):
        H._write(root / f"{split}-00000-of-00001.parquet", {"image": [None, None], "label": [0, 1]},
                 datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}))
    with pytest.raises(DatasetUnavailable, match=r"missing \['img'\]"):
        get_task("cifar10").load(data_dir=str(tmp_path))


def test_hub_without_the_parquet_revision_blames_the_revision(hub, fake_hub, tmp_path, monkeypatch):
    import shutil

    import huggingface_hub

    # A hub whose frgfm/imagenette has only its main branch (the loading script, no parquet files).
    main = ("frgfm", "imagenette", "main")
    shutil.copytree(hub.joinpath("repos", *main), tmp_path.joinpath("repos", *main))
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        H.fake_snapshot_download(tmp_path / "repos", tmp_path / "hf-hub2"))
    with pytest.raises(DatasetUnavailable, match="no revision 'refs/convert/parquet' of frgfm/imagenette"):
        get_task("imagenette").load()


def test_hub_snapshot_without_split_files_blames_the_layout(hub, tmp_path, monkeypatch):
    import huggingface_hub

    (tmp_path / "snap" / "plain_text").mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(tmp_path / "snap"))
    with pytest.raises(DatasetUnavailable, match="no parquet files for the splits.*plain_text/train-00000"):
        get_task("cifar10").load()


def test_not_cached_in_offline_mode_fails_at_once_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(DatasetUnavailable) as err:
        get_task("wikitext-2").load()
    msg = str(err.value)
    assert "not in the Hugging Face cache and offline mode is on" in msg
    assert "hf download Salesforce/wikitext" in msg and "--data-dir" in msg


@pytest.mark.parametrize("task,layout", [
    # Layouts read before this version: the files without their configuration folder, under D/<task> ...
    ("cifar10", {"cifar10/train-00000-of-00001.parquet": TRAIN_FILES["cifar10"][0],
                 "cifar10/test-00000-of-00001.parquet": TEST_FILE["cifar10"]}),
    # ... D/<name>/<config>, and a test split under another name.
    ("wikitext-2", {"wikitext/wikitext-2-raw-v1/train-00000-of-00001.parquet": TRAIN_FILES["wikitext-2"][0],
                    "wikitext/wikitext-2-raw-v1/test-00000-of-00001.parquet": TEST_FILE["wikitext-2"]}),
    ("tiny-imagenet", {"tiny-imagenet/data/train-00000-of-00001-abc.parquet": TRAIN_FILES["tiny-imagenet"][0],
                       "tiny-imagenet/data/validation-00000-of-00001-def.parquet": TEST_FILE["tiny-imagenet"]}),
])
def test_earlier_local_layouts_still_load(hub, tmp_path, task, layout):
    import shutil

    for dest, rel in layout.items():
        (tmp_path / "d" / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(hub / "data" / rel, tmp_path / "d" / dest)
    data = get_task(task).load(data_dir=str(tmp_path / "d"))
    reference = get_task(task).load(data_dir=str(hub / "data"))
    for split in ("train", "val", "test"):
        a, b = getattr(data, split), getattr(reference, split)
        assert all(torch.equal(a[k], b[k]) for k in a)
