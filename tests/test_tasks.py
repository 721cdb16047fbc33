"""Tasks: the registry, the offline generators, the byte tokenizer, and how splits and quick subsets are drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from normbench.tasks import all_tasks, default_task, get_task, list_tasks
from normbench.tasks import synthetic as S
from normbench.tasks.splits import carve_validation, quick_subset, stratified_pick
from normbench.tasks.text import ByteTokenizer, articles

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


def test_offline_tasks_load_with_their_own_validation_split():
    lm = get_task("synth-lm").load()
    assert lm.task.offline and lm.train["tokens"].dim() == 1 and len(lm.train["tokens"]) % S.LM_DOC == 0
    assert len(lm.val["tokens"]) == len(lm.test["tokens"]) == S.LM_EVAL_DOCS * S.LM_DOC
    assert not torch.equal(lm.val["tokens"], lm.test["tokens"])
    assert lm.info["data"]["tokens"] == {"train": S.LM_TRAIN_DOCS * S.LM_DOC, "val": S.LM_EVAL_DOCS * S.LM_DOC,
                                         "test": S.LM_EVAL_DOCS * S.LM_DOC}
    shapes = get_task("synth-shapes").load()
    assert shapes.train["x"].shape[1:] == (3, 16, 16) and len(shapes.eval["y"]) == S.SHAPES_EVAL
    assert shapes.test is shapes.eval and len(shapes.val["y"]) == S.SHAPES_EVAL
    # The validation images are new draws, not copies of the test or training images.
    assert not torch.equal(shapes.val["x"], shapes.test["x"])
    assert shapes.info["data"]["classes"] == {"train": 10, "val": 10, "test": 10}


def test_byte_tokenizer_round_trips_unicode():
    tok = ByteTokenizer()
    text = "= Valkyria Chronicles III =\n Senjō no Valkyria 3 : naïve café ☃\n"
    ids = tok.encode(text)
    assert ids.dtype == torch.uint8 and tok.vocab_size == 256
    assert tok.decode(ids) == text
    assert len(tok.encode("")) == 0


# -- how splits and subsets are drawn -----------------------------------------------------------------------------

def test_stratified_pick_keeps_each_class_share_where_first_n_would_not():
    # Sorted by label, as some hub mirrors are: the first 30 examples hold one class.
    labels = np.repeat(np.arange(6), [50, 50, 50, 50, 50, 250])
    idx = stratified_pick(labels, 60, seed=3)
    assert len(idx) == 60 and len(set(idx.tolist())) == 60 and np.all(np.diff(idx) > 0)
    counts = np.bincount(labels[idx], minlength=6)
    # Each class gets its share of 60 (50/500 -> 6, 250/500 -> 30), independent of where it sits.
    assert counts.tolist() == [6, 6, 6, 6, 6, 30]
    assert len(np.unique(labels[:60])) == 2
    assert np.array_equal(idx, stratified_pick(labels, 60, seed=3))
    assert not np.array_equal(idx, stratified_pick(labels, 60, seed=4))


def test_stratified_pick_rounds_by_largest_remainder():
    labels = np.array([0] * 7 + [1] * 2 + [2] * 1)
    # Exact shares of 5: 3.5, 1.0, 0.5 -> floors 3, 1, 0; the one left goes to class 0 or 2 (remainder 0.5 each).
    counts = [np.bincount(labels[stratified_pick(labels, 5, seed=s)], minlength=3).tolist() for s in range(20)]
    assert all(sum(c) == 5 and c[1] == 1 and c[0] in (3, 4) and c[0] + c[2] == 4 for c in counts)
    assert {tuple(c) for c in counts} == {(4, 1, 0), (3, 1, 1)}  # ties are broken by the seed, both ways


def test_validation_is_carved_from_train_disjoint_stratified_and_fixed():
    labels = np.random.default_rng(0).integers(0, 10, 1000)
    train, val = carve_validation(labels)
    assert len(val) == 100 and len(train) == 900
    assert set(train.tolist()).isdisjoint(val.tolist()) and set(train.tolist()) | set(val.tolist()) == set(range(1000))
    share = np.bincount(labels[val], minlength=10) / np.bincount(labels, minlength=10)
    assert np.all(np.abs(share - 0.1) < 0.02)
    again = carve_validation(labels)
    assert np.array_equal(train, again[0]) and np.array_equal(val, again[1])


def test_quick_subset_keeps_all_when_there_are_fewer():
    assert quick_subset(np.arange(5), 10, seed=0).tolist() == [0, 1, 2, 3, 4]
    assert len(quick_subset(np.repeat(np.arange(4), 10), 8, seed=0)) == 8


def test_wikitext_articles_start_at_top_level_headings_only():
    lines = ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 . \n", "", " = = Gameplay = = \n",
             "", " It is a game . \n", "", " = Tower Building = \n", "", " A tower . \n"]
    docs = articles(lines)
    assert len(docs) == 2 and "".join(docs) == "".join(lines)
    assert docs[0].startswith(" = Valkyria") and " = = Gameplay = = " in docs[0]
    assert docs[1].startswith(" = Tower Building = ")
    # Text without headings falls back to fixed blocks of lines, so a split can still be carved.
    assert len(articles([f" line {i} \n" for i in range(450)], fallback_lines=200)) == 3
