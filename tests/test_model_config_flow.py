"""#49: a model outside the catalog, from its ``config.json`` alone, through the whole flow on real files: ``bench
--model-config`` writes records, ``best --model-config --json`` reads them back through the real reader and answers
per site, and ``apply_policy`` on the transformers model built from the same config replaces every norm site with the
answer (outputs unchanged). Backends ``a`` and ``b`` (both compute what eager computes, ``b`` twice over) keep it fast;
the bench runs in this process (``--executor inprocess``) so it sees them."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from contextlib import redirect_stdout

import pytest
import torch
from test_policy import _close
from torch import nn

from normbench.discovery import REGISTRY
from normbench.policy import PolicyNorm, apply_policy
from normbench.registry import Backend, adopt_state

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "head_dim": 16,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "rms_norm_eps": 1e-06, "vocab_size": 64, "_name_or_path": "acme/tiny-qwen3"}


class _Twice(nn.Module):
    """What the eager module computes, computed ``n`` times (the last result returned): ``b`` does twice ``a``'s
    work, so a head-to-head measurement names ``a``."""

    def __init__(self, eager, n):
        super().__init__()
        adopt_state(self, eager)
        self.__dict__["eager"], self.__dict__["n"] = eager, n

    def forward(self, x):
        for p, q in zip(self.eager._parameters.values(), self._parameters.values()):
            assert p is q
        y = None
        for _ in range(self.n):
            y = self.eager.forward(x)
        return y


@pytest.fixture
def backends(monkeypatch):
    spec = REGISTRY.get("rmsnorm")
    extra = (Backend("a", build=lambda e, s: _Twice(e, 1)), Backend("b", build=lambda e, s: _Twice(e, 8)))
    monkeypatch.setitem(REGISTRY.specs, "rmsnorm", dataclasses.replace(
        spec, extra_backends=spec.extra_backends + extra))


def _cli(*args) -> tuple[int, str]:
    from normbench.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def test_a_model_outside_the_catalog_from_its_config_json(tmp_path, backends):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG))
    results = tmp_path / "results"
    rc, _ = _cli("bench", "--model-config", str(cfg), "--device", "cpu", "--norm", "rmsnorm", "--backend", "a",
                 "b", "--regime", "decode-1", "prefill-1x2048", "--dtype", "float32", "--pass", "fwd", "--quick",
                 "--executor", "inprocess", "--force", "--no-progress", "--out", str(results))
    assert rc == 0
    assert list((results / "kernel").glob("*/rmsnorm.json.gz")), "bench wrote no records"
    rc, doc = _cli("best", "--model-config", str(cfg), "--results", str(results), "--norm", "rmsnorm", "--regime",
                   "decode-1", "prefill-1x2048", "--dtype", "float32", "--pass", "fwd", "--json")
    assert rc == 0
    policy = json.loads(doc)
    assert policy["model"] == "tiny-qwen3"
    rows = [r for r in policy["answers"] if r["site"]]
    assert {r["site"].split(" ")[0] for r in rows} >= {"input_layernorm", "post_attention_layernorm", "q_norm",
                                                      "k_norm"}, rows
    assert {e["backend"] for e in policy["policy"]} == {"a"}, [(e["shape"], e["status"], e["backend"])
                                                             for e in policy["policy"]]

    from normbench._compat import import_transformers

    tr = import_transformers()
    config = tr.Qwen3Config(**{k: v for k, v in CONFIG.items() if not k.startswith("_") and k != "architectures"})
    torch.manual_seed(0)
    model = tr.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    ref = copy.deepcopy(model)
    report = apply_policy(model, policy)
    sites = {n: m for n, m in model.named_modules() if isinstance(m, PolicyNorm)}
    norms = [n for n, m in ref.named_modules() if type(m).__name__.endswith("RMSNorm")]
    assert sorted(sites) == sorted(norms) and not report.left, str(report)
    for shape in ((1, 1), (1, 9)):
        ids = torch.randint(0, 64, shape)
        with torch.no_grad():
            assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
