"""The model catalog, free-form shapes and `bench --model` planning (no timing here).

The catalog (normbench/catalog/models.json) is checked against stored copies of the config.json values each model
publishes (tests/fixtures/model_configs/<model>.json, in the real schema): every value an entry cites must equal the
stored one, and deriving the sites from the stored config must give the entry's sites exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normbench import catalog
from normbench.measure.shapes import ShapeError, by_label, parse_shape, shape_from_dims

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"
REQUIRED = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-8b", "qwen3-235b-a22b", "deepseek-v3",
            "gemma-3-27b", "mistral-7b", "olmo-2-7b", "gpt2", "vit-b16", "vit-l16", "resnet-50", "flux.1-dev")


# --- free-form shapes ---------------------------------------------------------------------------------------------

def test_free_form_shapes_have_one_label_and_reuse_grid_labels():
    a, b = parse_shape("140x4096"), parse_shape("1x140x4096")
    assert a == b and a.label == "tokens-1x140x4096" and a.shape_class == "custom" and a.dims == (1, 140, 4096)
    assert parse_shape(a.label) == a  # a custom label reads back (the suites pass labels around)
    assert parse_shape("tokens:1x140x4096") == a
    assert parse_shape("2x2048x4096") is not None and parse_shape("2x2048x4096").label == "llm-4096x4096"
    assert parse_shape("images:32x256x56x56").label == "resnet50-s1"
    assert parse_shape("llm-4096x4096") == by_label("llm-4096x4096")
    assert shape_from_dims("tokens", (8, 1, 4096)).label == "tokens-8x1x4096"


def test_same_free_form_case_same_record_id():
    from normbench.measure.planning import case_id, plan

    ids = [case_id(c, "cpu-test") for s in ("140x4096", "1x140x4096")
           for c in plan(norms=["rmsnorm"], backends=["eager"], dtypes=["float32"], passes=["fwd"],
                         shapes=[parse_shape(s)], device="cpu")]
    assert len(ids) == 2 and ids[0] == ids[1]


@pytest.mark.parametrize("text,problem", [
    ("0x4096", "dimension 0 must be positive"),
    ("-3x4096", "dimension -3 must be positive"),
    ("12xabc", "'abc' of '12xabc' is not a number"),
    ("video:2x3", "unsupported layout 'video'"),
    ("images:8x3x4", "an images shape has 4 dims"),
    ("8x32x32x32", "an images shape is written images:NxCxHxW"),
    ("nope", "unknown shape 'nope'"),
])
def test_bad_shapes_are_named(text, problem):
    with pytest.raises(ShapeError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_shape(text)


def _no_records(out: Path) -> bool:
    return not out.exists() or not list(out.rglob("*.json*"))


@pytest.mark.parametrize("argv,problem", [
    (["--shape", "0x4096"], "dimension 0 must be positive"),
    (["--shape", "4096xfoo"], "is not a number"),
    (["--norm", "add_rmsnorm", "--shape", "images:2x8x4x4"], "add_rmsnorm does not support the images layout"),
    (["--shape", "1x1000000x100000"], "too big for this device's free memory"),
])
def test_bench_refuses_bad_shapes_and_writes_nothing(tmp_path, capsys, argv, problem):
    from normbench.cli import main

    out = tmp_path / "res"
    rc = main(["bench", *argv, "--device", "cpu", "--dtype", "float32", "--pass", "fwd", "--out", str(out),
               "--no-progress"] + ([] if "--norm" in argv else ["--norm", "rmsnorm"]))
    err = capsys.readouterr().err
    assert rc == 2 and problem in err
    assert _no_records(out)
    if "too big" in problem:
        assert "needs about" in err and "GiB (float64 reference included)" in err  # the estimate is printed


def test_memory_estimate_counts_the_float64_reference():
    from normbench.measure.memory import estimate_case_bytes

    fwd32 = estimate_case_bytes(1000, 1, 4, backward=False)
    assert fwd32 == 1000 * (2 * 4 + 4 * 8 + 16)  # measured tensors + float64 reference (the largest part)
    assert estimate_case_bytes(1000, 2, 2, backward=True) > estimate_case_bytes(1000, 1, 2, backward=True)


# --- the catalog --------------------------------------------------------------------------------------------------

def test_catalog_has_the_models_the_issue_lists():
    keys = [m.key for m in catalog.models()]
    for k in REQUIRED:
        assert k in keys


@pytest.mark.parametrize("key", REQUIRED)
def test_catalog_entry_matches_the_stored_config(key):
    stored = json.loads((CONFIGS / f"{key}.json").read_text())
    model = catalog.get(key)
    cfg = catalog.text_config(stored)
    for k, v in model.config.items():  # every cited value is the published one
        assert cfg[k] == v, (key, k)
    family, arch, sites = catalog.sites_from_config(stored, key)
    assert (family, arch) == (model.family, model.architecture)
    assert [s.to_dict() for s in sites] == [s.to_dict() for s in model.sites]
    assert model.config_url.startswith("https://huggingface.co/") and model.config_url.endswith("config.json")
    for s in model.sites:
        assert s.source.get("width"), (key, s.name)  # every width names where it comes from


def test_catalog_file_is_what_the_generator_derives():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "catalog_from_configs.py"
    spec = importlib.util.spec_from_file_location("catalog_from_configs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = json.loads((Path(catalog.__file__).parent / "models.json").read_text())
    assert committed == mod.build(CONFIGS)


def test_sites_of_known_architectures():
    qwen = {s.name: s for s in catalog.get("qwen3-8b").sites}
    assert qwen["q_norm"].width == 128 and qwen["q_norm"].rows_per_token == 32
    assert qwen["k_norm"].rows_per_token == 8  # GQA: k heads counted apart
    ds = {s.name: s for s in catalog.get("deepseek-v3").sites}
    assert ds["q_a_layernorm"].width == 1536 and ds["kv_a_layernorm"].width == 512
    olmo = {s.name: s for s in catalog.get("olmo-2-7b").sites}
    assert olmo["q_norm"].width == 4096 and "input_layernorm" not in olmo
    gemma = {s.name for s in catalog.get("gemma-3-27b").sites}
    assert {"pre_feedforward_layernorm", "post_feedforward_layernorm"} <= gemma
    llama = {s.name: s for s in catalog.get("llama-3.1-8b").sites}
    assert llama["residual_add+norm"].norm == "add_rmsnorm" and llama["residual_add+norm"].width == 4096
    resnet = catalog.get("resnet-50")
    assert sum(s.count for s in resnet.sites) == 53  # ResNet-50's BatchNorms: stem + 3*16 blocks + 4 shortcuts


def test_regimes_give_prefill_and_decode_shapes():
    shapes = {(ss.site.name, ss.regime): ss.dims for ss in catalog.site_shapes(catalog.get("qwen3-8b"))}
    assert shapes[("input_layernorm", "prefill-1x2048")] == (1, 2048, 4096)
    assert shapes[("input_layernorm", "prefill-8x4096")] == (8, 4096, 4096)
    assert shapes[("q_norm", "decode-8")] == (8, 32, 128)
    for b in (1, 8, 32, 128, 256):
        assert shapes[("input_layernorm", f"decode-{b}")] == (b, 1, 4096)
    quick = {ss.regime for ss in catalog.site_shapes(catalog.get("qwen3-8b"), quick=True)}
    assert "prefill-8x4096" not in quick and "decode-256" in quick


def test_model_config_derives_a_model_not_in_the_catalog(tmp_path):
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "head_dim": 128,
           "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 28, "rms_norm_eps": 1e-06,
           "_name_or_path": "Qwen/Qwen3-0.6B"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = catalog.from_config_file(p)
    assert m.key == "qwen3-0.6b" and {s.width for s in m.sites} == {1024, 128}
    del cfg["head_dim"]
    p.write_text(json.dumps(cfg))
    with pytest.raises(catalog.ConfigError, match="lacks 'head_dim'"):
        catalog.from_config_file(p)
    p.write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(catalog.ConfigError, match="model_type 'mamba' is not one"):
        catalog.from_config_file(p)


def test_cli_models_and_model_plan(tmp_path, capsys):
    from normbench.cli import main

    assert main(["models", "llama-3.1-8b"]) == 0
    out = capsys.readouterr().out
    assert "input_layernorm" in out and "hidden_size" in out and "huggingface.co/meta-llama" in out
    assert main(["models", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {m["model"] for m in doc["models"]} >= set(REQUIRED)
    assert main(["bench", "--model", "llama-3.1-8b", "--quick", "--device", "cpu", "--backend", "eager",
                 "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "rmsnorm/eager/tokens-8x1x4096/float32/fwd/hot" in listed
    assert "add_rmsnorm/eager/tokens-1x2048x4096/bfloat16/fwd/hot" in listed
    assert not any("8x4096x4096" in c for c in listed)  # --quick leaves the big prefill out
    assert len(listed) == len(set(listed))  # a shape several sites share is measured once
    # a norm the model's sites do not use is refused, named
    assert main(["bench", "--model", "llama-3.1-8b", "--norm", "layernorm", "--device", "cpu", "--list"]) == 2
    assert "has no site computed by layernorm" in capsys.readouterr().err
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    assert main(["bench", "--model-config", str(cfg), "--device", "cpu", "--list"]) == 2
    assert "lacks 'hidden_size'" in capsys.readouterr().err


def test_suite_grid_from_a_model_and_from_free_form_shapes(monkeypatch):
    from normbench.measure import kernel_suite as suite

    monkeypatch.setenv("NORMBENCH_PYTEST_SHAPES", "140x4096,images:32x256x56x56")
    g = suite.grid("small", env_prefix="NORMBENCH_PYTEST")
    assert g[2] == ["tokens-1x140x4096", "resnet50-s1"]
    monkeypatch.delenv("NORMBENCH_PYTEST_SHAPES")
    monkeypatch.setenv("NORMBENCH_PYTEST_MODEL", "qwen3-8b")
    g = suite.grid("small", env_prefix="NORMBENCH_PYTEST")
    assert g[0] == ["rmsnorm", "add_rmsnorm"] and "tokens-8x32x128" in g[2] and g[4] == ["fwd"]
    monkeypatch.setattr(suite, "gate", lambda norm, backend, device: None)
    with pytest.raises(suite.Unsupported, match="no site of the model computes add_rmsnorm"):
        suite.case_for("add_rmsnorm", "eager", "tokens-8x32x128", "float32", "fwd", "pytest")
    assert suite.case_for("rmsnorm", "eager", "tokens-8x32x128", "float32", "fwd", "pytest").shape.dims == (8, 32, 128)
    monkeypatch.delenv("NORMBENCH_PYTEST_MODEL")
    suite.grid("small", env_prefix="NORMBENCH_PYTEST")  # resets the model's pairs


def test_memory_estimate_of_a_head_to_head_set_counts_each_backend_that_runs_here():
    from normbench.measure.planning import memory_estimates, plan

    cases = plan(norms=["rmsnorm"], backends=["eager", "native", "triton"], dtypes=["float32"], passes=["fwd"],
                 shapes=[parse_shape("64x4096")], device="cpu")
    [(_, alone)] = memory_estimates(cases)
    [(_, together)] = memory_estimates(cases, together=True)
    assert together == alone + 2 * 64 * 4096 * 4  # native's own input and output; triton does not run on a CPU
