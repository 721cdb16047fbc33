"""Tests of the result-record schema, its validation, atomic storage and the DataFrame loaders."""

from __future__ import annotations

import copy
import gzip
import json
import os

import pytest

from normbench import results
from normbench.records import schema


def _prov(hw_id="cpu-test-2c"):
    return {
        "timestamp": "2025-01-02T03:04:05Z", "normbench_version": "0.1.0", "git_commit": "abc123", "python": "3.11.7",
        "torch": "2.13.0", "triton": None, "platform": "Linux",
        "hardware": {"cpu": "Test CPU", "cores": 2, "threads": 2, "gpu": None, "gpu_memory_gb": None,
                     "driver": None, "cuda": None},
        "hardware_id": hw_id, "plugins": {}, "command": "normbench bench --quick",
    }


def _norm(name="layernorm"):
    # A plugin norm that is not installed here must still validate: records carry the metadata themselves.
    return {"name": name, "title": "LayerNorm", "family": "features", "kind": "activation", "layouts": ["tokens"],
            "package": "normbench", "package_version": ""}


def kernel_record(time_s=1e-3, nbytes=4_000_000, ceiling=10.0, dtype="float32", norm="layernorm", **metric_overrides):
    gbps = nbytes / time_s / 1e9
    metrics = {
        "time_median_s": time_s, "time_iqr_s": time_s / 10, "reps": 20, "bytes_moved": nbytes, "gbps": gbps,
        "ceiling_gbps": ceiling, "pct_of_ceiling": 100 * gbps / ceiling, "datasheet_peak_gbps": None,
        "suspect": False, "suspect_reason": None, "peak_mem_bytes": 123, "saved_bytes": 456,
        "err": {"y": {"max_abs": 1e-6, "max_rel": 1e-5}, "dx": None, "dw": None},
    }
    metrics.update(metric_overrides)
    config = {"backend": "eager", "layout": "tokens", "shape": [1000, 1000], "num_features": 1000, "dtype": dtype,
              "pass": "fwd", "device": "cpu", "timing": "cold", "threads": 2, "shape_class": "quick",
              "bytes_model": {"formula": "rowwise_affine", "params": {}}}
    return results.make_record("kernel", _norm(norm), config, metrics, _prov())


def accuracy_record(seed=0):
    config = {"task": "synthetic", "task_offline": True, "model": "mlp", "placement": None, "seed": seed,
              "recipe": {"lr": 1e-3}, "quick": True, "device": "cpu", "batch_size": 32}
    metrics = {"metric": "top1", "higher_is_better": True, "final": 0.5, "best": 0.6, "steps": 10,
               "wall_time_s": 1.5, "target": None, "time_to_target_s": None, "steps_to_target": None,
               "diverged": False, "diverged_step": None, "curve": [[0, 2.3, None], [10, 1.1, 0.5]]}
    return results.make_record("accuracy", _norm(), config, metrics, _prov())


def test_valid_records_have_no_problems():
    assert results.validate_record(kernel_record()) == []
    assert results.validate_record(accuracy_record()) == []
    assert results.SCHEMA_VERSION == 2


def test_real_provenance_is_valid():
    rec = kernel_record()
    rec["provenance"] = results.provenance(command=["normbench", "bench"])
    assert results.validate_record(rec) == []
    assert rec["provenance"]["command"] == "normbench bench"
    assert rec["provenance"]["hardware"]["cores"] >= 1


@pytest.mark.parametrize("breakage, expected", [
    (lambda r: r["metrics"].pop("time_median_s"), "metrics.time_median_s is missing"),
    (lambda r: r["config"].pop("dtype"), "config.dtype is missing"),
    (lambda r: r.pop("provenance"), "record.provenance is missing"),
    (lambda r: r["provenance"]["hardware"].pop("gpu"), "provenance.hardware.gpu is missing"),
    (lambda r: r["metrics"].update(time_median_s=-1.0), "metrics.time_median_s must be > 0"),
    (lambda r: r["norm"].update(name="Layer Norm!"), "norm.name 'Layer Norm!' is malformed"),
    (lambda r: r["config"].update(dtype="float8"), "config.dtype must be one of"),
    (lambda r: r["config"].update(shape=[10, -1]), "config.shape[1] must be >= 1; got -1"),
    (lambda r: r["metrics"].update(reps=0), "metrics.reps must be >= 1"),
    (lambda r: r["metrics"].update(gbps=1e6), "does not equal bytes_moved / time_median_s"),
    (lambda r: r.update(schema_version=99), "newer than this normbench understands"),
    (lambda r: r["provenance"].update(timestamp="yesterday"), "not an ISO-8601 timestamp"),
    (lambda r: r.update(kind="speed"), "record.kind must be one of"),
])
def test_broken_kernel_records_are_rejected_with_a_clear_message(breakage, expected):
    rec = kernel_record()
    breakage(rec)
    problems = results.validate_record(rec)
    assert any(expected in p for p in problems), problems


def test_gbps_far_above_the_ceiling_is_rejected_even_if_consistent():
    # 4 MB in 1 µs = 4000 GB/s against a 10 GB/s ceiling: an L2-resident (or broken) measurement.
    rec = kernel_record(time_s=1e-6, suspect=True, suspect_reason="above ceiling")
    problems = results.validate_record(rec)
    assert any("far above the measured ceiling" in p for p in problems), problems


def test_above_ceiling_must_be_flagged_suspect():
    rec = kernel_record(time_s=2.5e-4)  # 16 GB/s against a 10 GB/s ceiling
    assert any("not flagged suspect" in p for p in results.validate_record(rec))
    results.add_flag(rec, "suspect", "above the measured copy ceiling")
    assert results.validate_record(rec) == []


def test_pct_of_ceiling_may_be_null_when_not_meaningful():
    rec = kernel_record()
    rec["metrics"]["pct_of_ceiling"] = None
    assert results.validate_record(rec) == []
    rec["metrics"]["pct_of_ceiling"] = 55.0
    assert any("pct_of_ceiling" in p for p in results.validate_record(rec))


@pytest.mark.parametrize("breakage, expected", [
    (lambda r: r["metrics"]["curve"].append([20, float("nan"), None]),
     "metrics.curve[2][1] must be finite (null where training diverged); got nan"),
    (lambda r: r["config"].update(seed="zero"), "config.seed must be an integer"),
    (lambda r: r["metrics"].pop("diverged"), "metrics.diverged is missing"),
    (lambda r: r["metrics"].update(diverged_step=3), "diverged_step is set but metrics.diverged is false"),
])
def test_broken_accuracy_records_are_rejected(breakage, expected):
    rec = accuracy_record()
    breakage(rec)
    problems = results.validate_record(rec)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("breakage, expected", [
    (lambda r: r["metrics"].pop("reps"), ["metrics.reps is missing"]),
    (lambda r: r["config"].update(dtype="float8"),
     ["config.dtype must be one of float32, bfloat16, float16, float64; got 'float8'"]),
    (lambda r: r["config"].update(threads="two"), ["config.threads must be an integer; got 'two'"]),
    (lambda r: r["metrics"].update(reps=20.0), ["metrics.reps must be an integer; got 20.0"]),
    (lambda r: r["metrics"].update(ceiling_gbps="fast"), ["metrics.ceiling_gbps must be a number or null; got 'fast'"]),
    (lambda r: r["metrics"].update(gbps=float("inf")), ["metrics.gbps must be finite; got inf"]),
    (lambda r: r["config"].update(shape=[8, 0]), ["config.shape[1] must be >= 1; got 0"]),
    (lambda r: r.update(flags=["slow"]), ["record.flags[0] must be one of non_finite, fell_back, noisy, host_bound, "
                                          "suspect, unchecked, forced, diverged, tuning, rehearsal, low_clock, "
                                          "host_sync, stale, legacy; got 'slow'"]),
    (lambda r: r.update(config=[]), ["record.config must be an object; got []"]),
])
def test_schema_problems_name_the_field_and_say_what_is_wrong(breakage, expected):
    rec = kernel_record()
    breakage(rec)
    assert results.validate_record(rec) == expected


def test_schema_problems_in_nested_lists_name_the_index():
    rec = accuracy_record()
    rec["metrics"]["curve"][1] = [10, "low", None]
    rec["metrics"]["curve"].append([20, 1.0])
    assert results.validate_record(rec) == [
        "metrics.curve[1][1] must be a number or null (null where training diverged); got 'low'",
        "metrics.curve[2] must have at least 3 items ([step, train_loss, eval_metric]); got [20, 1.0]"]


def test_every_structural_problem_is_reported_in_field_order_before_any_arithmetic():
    rec = kernel_record()
    rec["provenance"]["hardware"].pop("cores")
    rec["metrics"].update(time_median_s=-1.0, gbps=1e6)  # the GB/s check waits for a valid structure
    rec["config"]["dtype"] = "float8"
    rec.pop("check")
    assert results.validate_record(rec) == [
        "record.check is missing",
        "config.dtype must be one of float32, bfloat16, float16, float64; got 'float8'",
        "metrics.time_median_s must be > 0; got -1.0",
        "provenance.hardware.cores is missing",
    ]
    rec = kernel_record(gbps=1e6)
    assert results.validate_record(rec) == [
        "metrics.gbps 1e+06 does not equal bytes_moved / time_median_s = 4 GB/s",
        "metrics.pct_of_ceiling 40 does not equal 100·gbps/ceiling_gbps = 1e+07",
        "metrics.gbps 1e+06 is far above the measured ceiling 10 GB/s (more than 10x): a broken measurement, "
        "not a result"]


def test_a_newer_schema_version_is_one_problem():
    rec = kernel_record()
    rec.update(schema_version=3, shiny_new_field={})
    del rec["metrics"]
    assert results.validate_record(rec) == [
        "record.schema_version 3 is newer than this normbench understands (2); upgrade normbench"]


@pytest.fixture
def fresh_validator():
    schema._validator.cache_clear()
    yield
    schema._validator.cache_clear()


def test_the_json_schema_is_the_one_definition_of_structure(monkeypatch, fresh_validator):
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema.json_schema())
    published = jsonschema.Draft202012Validator(schema.json_schema())
    breakages = [lambda r: r["config"].update(dtype="float8"), lambda r: r["norm"].pop("layouts"),
                 lambda r: r["provenance"].update(node=7), lambda r: r.update(impl_hash="xyz"),
                 lambda r: r["metrics"]["err"].update(y={"max_abs": -1.0})]
    for breakage in breakages:  # a structural problem is reported because the schema rejects the record
        rec = kernel_record()
        breakage(rec)
        assert results.validate_record(rec) and not published.is_valid(rec)

    def changed():  # the same schema, with float8 a dtype and a shape class that must start with "l"
        s = copy.deepcopy(original())
        config = s["allOf"][1]["then"]["properties"]["config"]["properties"]
        config["dtype"]["enum"].append("float8")
        config["shape_class"]["pattern"] = "^l"
        return s

    original = schema.json_schema
    monkeypatch.setattr(schema, "json_schema", changed)
    schema._validator.cache_clear()
    rec = kernel_record(dtype="float8")
    rec["config"]["shape_class"] = "llm"
    assert results.validate_record(rec) == []
    rec["config"]["shape_class"] = "quick"
    assert results.validate_record(rec) == ["config.shape_class 'quick' is malformed (must match ^l)"]


def test_record_id_is_stable_and_depends_on_config_and_hardware():
    a, b = kernel_record(), kernel_record(time_s=2e-3)
    assert a["id"] == b["id"]  # same measurement, different outcome
    assert kernel_record(dtype="bfloat16")["id"] != a["id"]
    cfg = a["config"]
    assert results.record_id("kernel", "layernorm", cfg, "gpu-x") != results.record_id("kernel", "layernorm", cfg,
                                                                                          "cpu-test-2c")


def test_write_merges_replaces_by_id_and_never_drops(tmp_path):
    a, b = kernel_record(), kernel_record(dtype="bfloat16")
    [path] = results.write_records([a], tmp_path)
    assert path == tmp_path / "kernel" / "cpu-test-2c" / "layernorm.json.gz"
    results.write_records([b], tmp_path)
    newer = kernel_record(time_s=2e-3)
    results.write_records([newer], tmp_path)
    stored = json.loads(gzip.decompress(path.read_bytes()))["records"]
    assert [r["id"] for r in stored] == [a["id"], b["id"]]
    assert stored[0]["metrics"]["time_median_s"] == 2e-3
    assert results.existing_ids(tmp_path) == {a["id"], b["id"]}
    assert results.existing_ids(tmp_path / "nothing-here") == set()


def test_invalid_records_write_nothing(tmp_path):
    good, bad = kernel_record(), kernel_record()
    bad["metrics"]["time_median_s"] = -1
    with pytest.raises(results.InvalidRecordError, match="time_median_s"):
        results.write_records([good, bad], tmp_path)
    assert not (tmp_path / "kernel").exists()


def test_missing_id_is_filled_in(tmp_path):
    rec = kernel_record()
    expected = rec.pop("id")
    results.write_records([rec], tmp_path)
    assert results.existing_ids(tmp_path) == {expected}


def test_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    [path] = results.write_records([kernel_record()], tmp_path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        results.write_records([kernel_record(dtype="float16")], tmp_path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["layernorm.json.gz"]  # no temp file left behind
    assert results.load_report(tmp_path) == []


@pytest.mark.parametrize("name, content", [("layernorm.json", b'[{"half": '),
                                           ("layernorm.json.gz", b"\x1f\x8b\x08 truncated gzip")])
def test_corrupt_file_is_moved_aside_not_lost(tmp_path, name, content):
    path = tmp_path / "kernel" / "cpu-test-2c" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.warns(UserWarning, match="moved it aside"):
        results.write_records([kernel_record()], tmp_path)
    assert (path.parent / f"{name}.corrupt-0").read_bytes() == content
    assert len(list(results.iter_records(tmp_path))) == 1


def test_reading_reports_invalid_records_and_files(tmp_path):
    good = kernel_record()
    bad = copy.deepcopy(good)
    bad["id"] = "k-badbadbad"
    bad["metrics"].pop("reps")
    d = tmp_path / "kernel" / "hw"
    d.mkdir(parents=True)
    (d / "x.json").write_text(json.dumps([good, bad]))
    (d / "broken.json").write_text("{not json")
    report = results.load_report(tmp_path)
    text = "\n".join(map(str, report))
    assert "broken.json: is not valid JSON" in text
    assert "x.json: record 1 id=k-badbadbad norm=layernorm: metrics.reps is missing" in text
    with pytest.warns(UserWarning) as caught:
        found = list(results.iter_records(tmp_path))
    messages = [str(w.message) for w in caught]
    assert any("metrics.reps is missing" in m for m in messages)
    assert any("broken.json: is not valid JSON" in m for m in messages)
    assert [r["id"] for _, r in found] == [good["id"]]
    with pytest.raises(results.InvalidRecordError):
        list(results.iter_records(tmp_path, errors="raise"))


def test_load_returns_flat_dataframes(tmp_path):
    results.write_records([kernel_record(), kernel_record(dtype="bfloat16"), accuracy_record(),
                           accuracy_record(seed=1)], tmp_path)
    k = results.load(tmp_path, kind="kernel")
    assert len(k) == 2
    for col in ("norm", "backend", "dtype", "pass", "shape", "time_median_s", "gbps", "pct_of_ceiling",
                "err_y_max_abs", "hardware_id", "hw_cpu", "record_path"):
        assert col in k.columns, col
    assert set(k["dtype"]) == {"float32", "bfloat16"}
    a = results.load(tmp_path, kind="accuracy")
    assert sorted(a["seed"]) == [0, 1]
    assert {"task", "metric", "final", "curve", "recipe"} <= set(a.columns)
    assert a["record_path"].str.endswith("accuracy/synthetic/cpu-test-2c/layernorm.json.gz").all()
    with pytest.raises(FileNotFoundError, match="normbench bench"):
        results.load(tmp_path / "missing")



def test_git_dirty_ignores_results_but_not_code(tmp_path, monkeypatch):
    import importlib
    import subprocess

    prov = importlib.import_module("normbench.records.provenance")  # the package exports a function of that name

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("[]")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    monkeypatch.setattr(prov, "_REPO", tmp_path)

    def dirty():
        prov.git_commit.cache_clear()
        return prov.git_commit()[1]

    try:
        assert dirty() is False
        (tmp_path / "results" / "r.json").write_text("[1]")
        assert dirty() is False, "writing records must not mark the code dirty"
        (tmp_path / "code.py").write_text("x = 2\n")
        assert dirty() is True
    finally:
        prov.git_commit.cache_clear()


@pytest.mark.parametrize("command", ["bench", "best"])
def test_a_measuring_command_names_the_commit_it_started_from(tmp_path, monkeypatch, command):
    """A commit made while ``bench`` runs (its first records not yet written) is not what its records name: the
    commit is read when a measuring command starts. A reading command (``best``) does not run git at all."""
    import importlib
    import subprocess

    from normbench import cli

    prov = importlib.import_module("normbench.records.provenance")

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "start")
    start = git("rev-parse", "HEAD")
    monkeypatch.setattr(prov, "_REPO", tmp_path)
    monkeypatch.delenv(prov.GIT_COMMIT_ENV, raising=False)
    prov.git_commit.cache_clear()
    args = cli.build_parser().parse_args([command] + (["--norm", "rmsnorm"] if command == "bench" else []))
    named = []

    def run(_args):   # the command's work: a commit lands before its first record is written
        (tmp_path / "code.py").write_text("x = 2\n")
        git("commit", "-qam", "during the run")
        named.append(prov.provenance(device="cpu")["git_commit"])
        return 0

    args.func = run
    try:
        assert cli._run(args) == 0
        if command == "bench":
            assert named == [start] and git("rev-parse", "HEAD") != start
        else:
            assert named == [git("rev-parse", "HEAD")]
    finally:
        prov.git_commit.cache_clear()


def _edge_cases():
    """Records on which jsonschema and jsonschema-rs could differ (JSON Schema's 1.0-is-an-integer, Python objects JSON
    has not, Python's and Rust's regular expressions), each a variant of a valid record."""
    k, a = kernel_record, accuracy_record
    return [
        (k, lambda r: r["metrics"].update(reps=20.0)), (k, lambda r: r["config"].update(threads=True)),
        (k, lambda r: r["config"].update(shape=[8.0, 16])), (k, lambda r: r.update(schema_version=2.0)),
        (k, lambda r: r["provenance"]["hardware"].update(gpu_memory_gb=80.0)),   # a number may be 80.0
        (k, lambda r: r["metrics"].update(peak_mem_bytes=float("nan"))), (k, lambda r: r["metrics"].update(
            time_iqr_s=float("inf"))),
        (k, lambda r: r["config"].update(shape=(8, 16))), (k, lambda r: r["norm"].update(layouts=("tokens",))),
        (k, lambda r: r["provenance"].update(plugins={1: "x"})), (k, lambda r: r["provenance"].update(
            plugins={"x": float("nan")})),
        (k, lambda r: r["metrics"].update(bytes_moved=2 ** 70)), (k, lambda r: r["config"].update(threads=2 ** 64)),
        (k, lambda r: r["norm"].update(name="layernorm\n")), (k, lambda r: r.update(impl_hash="0123456789abcdef\n")),
        (k, lambda r: r["norm"].update(title="\ud800")), (k, lambda r: r["norm"].update(title="ünïcode ✓")),
        (k, lambda r: r.update(flags=["noisy"], flag_reasons={"noisy": "\x1c\x1d"})),
        (k, lambda r: r.update(flags=["noisy"], flag_reasons={"noisy": "\u2003"})),
        (k, lambda r: r.update(flags=["noisy"], flag_reasons={"noisy": "\u200b"})),
        (k, lambda r: r.update(flags=["noisy", "noisy"], flag_reasons={"noisy": "x"})),
        (k, lambda r: r["provenance"].update(timestamp="not a date")), (k, lambda r: r["config"].update(
            bytes_model={"formula": 3})),
        (k, lambda r: r["metrics"]["err"].update(y={"max_abs": -0.0})), (k, lambda r: r["metrics"].update(
            ceiling_gbps=0)),
        (a, lambda r: r["metrics"]["curve"].append([20.0, 1.0, None])),
        (a, lambda r: r["metrics"]["curve"].append([20, 1.0, None, 4])),
        (a, lambda r: r["metrics"]["curve"].append((20, 1.0, None))),
        (a, lambda r: r["config"].update(seed=1.0)), (a, lambda r: r["config"].update(seed=-3)),
        (a, lambda r: r["config"].update(recipe={"lr": float("inf")})),
    ]


@pytest.mark.parametrize("i", range(len(_edge_cases())))
def test_the_fast_validator_rejects_exactly_what_the_reference_rejects(i, monkeypatch):
    pytest.importorskip("jsonschema_rs")
    make, breakage = _edge_cases()[i]
    rec = make()
    breakage(rec)
    monkeypatch.setenv("NORMBENCH_VALIDATOR", "jsonschema")
    reference = results.validate_record(rec)
    monkeypatch.setenv("NORMBENCH_VALIDATOR", "auto")
    assert results.validate_record(rec) == reference
    if reference and not any("is newer than" in p for p in reference):
        structural = schema.structure_problems(rec)
        assert not structural or not schema._fast_valid(rec)   # the fast path never calls a rejected record valid
    monkeypatch.setenv("NORMBENCH_VALIDATOR", "both")   # and both together agree (this raises where they do not)
    assert results.validate_record(rec) == reference


def test_the_fast_validator_is_used_where_installed_and_agrees_on_the_committed_records(monkeypatch,
                                                                                         committed_results):
    pytest.importorskip("jsonschema_rs")
    from normbench.records import iter_records

    recs = [r for _, r in iter_records(committed_results)]   # not the working tree's (the main job adds to it)
    assert recs and schema._fast_validator() is not None
    assert all(schema._fast_valid(r) for r in recs)   # the committed records never need the slow path
    monkeypatch.setenv("NORMBENCH_VALIDATOR", "jsonschema")
    assert all(results.validate_record(r) == [] for r in recs[::50])


def test_without_jsonschema_rs_the_reference_alone_decides(monkeypatch):
    rec = kernel_record()
    rec["metrics"]["reps"] = 20.0
    monkeypatch.setattr(schema, "_fast_validator", lambda: None)
    monkeypatch.setenv("NORMBENCH_VALIDATOR", "auto")
    assert not schema._fast_valid(kernel_record())
    assert results.validate_record(rec) == ["metrics.reps must be an integer; got 20.0"]
    assert results.validate_record(kernel_record()) == []


def test_nesting_limit_and_compact_expansion_match_their_references():
    """``store._too_deep`` (level by level) against a recursive depth, at the limit and past it, through dicts and
    lists; ``store.expand`` gives each record its own provenance and norm (a plain deep copy: equal, not shared)."""
    from normbench.records import store

    def depth(o):   # the reference: the deepest value's depth (the record itself at 0)
        kids = list(o.values()) if isinstance(o, dict) else o if isinstance(o, list) else []
        return 1 + max(map(depth, kids)) if kids else 0

    for n in (0, 1, 2, store.MAX_DEPTH - 1, store.MAX_DEPTH, store.MAX_DEPTH + 1, store.MAX_DEPTH + 5):
        for leaf in (1, [], {}, "x"):
            o = leaf
            for i in range(n):
                o = {"k": o, "s": "v"} if i % 2 else [0, o]
            assert store._too_deep(o) == (depth(o) > store.MAX_DEPTH), (n, leaf)
    wide = {"a": [[[1]]], "b": {"c": [{"d": None}]}}
    assert not store._too_deep(wide) and store._too_deep(wide, limit=3) and not store._too_deep(wide, limit=4)
    recs = [kernel_record(), kernel_record()]
    recs[1]["id"] = recs[0]["id"] + "x"
    out = store.expand(json.loads(json.dumps(store.compact(recs))))
    assert out == recs
    out[0]["provenance"]["hardware"]["cpu"] = "edited"
    out[0]["norm"]["layouts"].append("edited")
    assert out[1]["provenance"]["hardware"]["cpu"] == recs[1]["provenance"]["hardware"]["cpu"]
    assert out[1]["norm"]["layouts"] == recs[1]["norm"]["layouts"]
