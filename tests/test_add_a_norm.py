"""Adding a built-in norm as docs/architecture.md's checklist says ("Adding a built-in norm") changes no other norm's
implementation hash, so no committed record goes stale.

In a copy of the ``normbench`` package (nothing is written under normbench/): the sample norm's own module
(``norms/sample_centred.py``), its own kernel subpackage (``kernels/sample_centred/``: a builder and a kernel module,
declared in ``Backend.sources``) and its spec in ``norms/specs.py`` with ``centring`` declared (what
``bytes_model.CENTRING`` lists for the older built-ins). Every (norm, backend) hash is the same before and after, the
committed records' stale count through the real reader is the same, and an edit to the sample's own files moves the
sample's hashes alone. The rule's reason is checked too: a backend without ``sources`` hashes every ``.py`` beside its
builder, so a new file there would have moved it; every built-in backend declares its sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIBS = {"torch": "2.x", "triton": "3.x"}   # fixed: the hashes compared are of the sources alone

NORM_MODULE = '''"""A sample norm (tests/test_add_a_norm.py): y = w * (x - mean(x)), over the C features."""

from __future__ import annotations

import torch
from torch import nn


class SampleCentred(nn.Module):
    def __init__(self, num_features: int, layout: str = "tokens"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x - x.mean(-1, keepdim=True))
'''

KERNEL_MODULE = '''"""The sample norm's kernel (a Triton kernel in a real norm; plain torch here)."""

import torch


def centred(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return weight * (x - x.mean(-1, keepdim=True))
'''

BUILDER_MODULE = '''"""The sample norm's backend: its builder (its kernel ``_kernel`` is in the spec's ``sources``)."""

from torch import nn

from normbench.kernels.sample_centred import _kernel
from normbench.registry import adopt_state


class Fused(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        adopt_state(self, module)

    def forward(self, x):
        return _kernel.centred(x, self.weight)


def build(module: nn.Module, spec) -> nn.Module:
    return Fused(module)
'''

SPEC = '''

SAMPLE_CENTRED = NormSpec(
    name="sample_centred", title="Sample centring norm",
    paper=Paper("A sample", "Nobody", 2026, "https://example.org/sample"), family="features", kind="activation",
    layouts=("tokens",), factory=_M + "sample_centred:SampleCentred", formula="y = w·(x − mean(x))",
    extra_backends=(Backend("fused", "normbench.kernels.sample_centred.builder:build",
                            sources=("normbench.kernels.sample_centred._kernel",)),),
    centring=True,
)
ALL = ALL + (SAMPLE_CENTRED,)
'''

#: Run in a fresh interpreter on a package tree (PYTHONPATH): every registered (norm, backend) hash, and with the
#: sample added, its hashes, its bytes model's statistics per row and its backend's output against eager.
PROBE = r'''
import json, sys
import torch
from normbench.discovery import REGISTRY
from normbench.measure import bytes_model as bm
from normbench.registry import Backend, NormSpec, _builder_module
libs = json.loads(sys.argv[1])
out = {"hashes": {f"{n}/{b}": REGISTRY.get(n).impl_hash(b, libraries=libs)
                  for n in REGISTRY.names() for b in REGISTRY.get(n).backends}}
# a Triton backend as a plugin would declare it, without ``sources``: every .py beside its builder is hashed
ln = REGISTRY.get("layernorm")
loose = NormSpec(**{**{f: getattr(ln, f) for f in ln.__dataclass_fields__},
                    "extra_backends": tuple(Backend(b.name, b.build, b.available) for b in ln.extra_backends)})
out["undeclared"] = loose.impl_hash("triton", libraries=libs)
out["builtins_declare_sources"] = [f"{n}/{b.name}" for n in REGISTRY.names() for b in REGISTRY.get(n).extra_backends
                                   if b.sources is None]
from normbench.norms import specs
sample = getattr(specs, "SAMPLE_CENTRED", None)
if sample is not None:
    REGISTRY.specs.setdefault(sample.name, sample)   # in-process: the installed entry points predate it
    out["sample"] = {b: sample.impl_hash(b, libraries=libs) for b in sample.backends}
    out["sample_stats_per_row"] = bm.stats_per_row(bm.formula_for(sample.family, sample.kind, sample.name),
                                                   sample.name)
    torch.manual_seed(0)
    x = torch.randn(4, 16)
    eager = sample.create(16)
    with torch.no_grad():
        eager.weight.mul_(torch.linspace(0.5, 2.0, 16))
    fused = REGISTRY.get("sample_centred")._backend("fused")
    from normbench.registry import resolve
    out["sample_same"] = bool(torch.allclose(resolve(fused.build)(eager, sample)(x), eager(x)))
if len(sys.argv) > 2:
    from normbench.results import records_that_count
    counted = records_that_count(sys.argv[2])
    out["stale"] = sorted(r["id"] for r in counted.records if "stale" in (r.get("flags") or []))
print(json.dumps(out))
'''


def _probe(tree: Path, results: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "NORMBENCH_DISABLE_PLUGINS": "1"}
    args = [sys.executable, "-c", PROBE, json.dumps(LIBS)] + ([str(results)] if results else [])
    r = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    shutil.copytree(REPO / "normbench", tree / "normbench", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _add_sample(tree: Path) -> None:
    nb = tree / "normbench"
    (nb / "norms" / "sample_centred.py").write_text(NORM_MODULE, encoding="utf-8")
    (nb / "kernels" / "sample_centred").mkdir()
    (nb / "kernels" / "sample_centred" / "__init__.py").write_text('"""The sample norm\'s kernels."""\n')
    (nb / "kernels" / "sample_centred" / "_kernel.py").write_text(KERNEL_MODULE, encoding="utf-8")
    (nb / "kernels" / "sample_centred" / "builder.py").write_text(BUILDER_MODULE, encoding="utf-8")
    with open(nb / "norms" / "specs.py", "a", encoding="utf-8") as f:
        f.write(SPEC)


def test_adding_a_norm_by_the_checklist_moves_no_other_hash(copy):
    repo = _probe(REPO, REPO / "results")
    before = _probe(copy)
    assert before["hashes"] == repo["hashes"]   # a copy hashes as the tree it copies (module names and bytes)
    assert not before["builtins_declare_sources"], before["builtins_declare_sources"]
    _add_sample(copy)
    after = _probe(copy, REPO / "results")
    assert after["hashes"] == before["hashes"]   # every existing (norm, backend): not one moved
    assert set(after["sample"]) == {"eager", "compile", "fused"} and after["sample_same"]
    assert after["sample_stats_per_row"] == 2   # the spec's ``centring``, not a name list
    # the committed records' stale judgement through the real reader: the same records as in the repository
    assert after["stale"] == repo["stale"]
    # its kernels in a subpackage: even a backend beside them that declares no sources does not move
    assert after["undeclared"] == before["undeclared"]

    # an edit to the sample's kernel moves its backend's hash, and no other
    with open(copy / "normbench" / "kernels" / "sample_centred" / "_kernel.py", "a", encoding="utf-8") as f:
        f.write("# edited\n")
    edited = _probe(copy)
    assert edited["hashes"] == before["hashes"]
    assert edited["sample"]["fused"] != after["sample"]["fused"]
    assert edited["sample"]["eager"] == after["sample"]["eager"]
    # an edit to its module moves its eager hash, and no other; a kernel module added flat in kernels/ would move a
    # backend there that declares no sources (every .py beside its builder): why new kernels declare them
    with open(copy / "normbench" / "norms" / "sample_centred.py", "a", encoding="utf-8") as f:
        f.write("# edited\n")
    (copy / "normbench" / "kernels" / "sample_flat.py").write_text('"""A kernel module added flat."""\n')
    edited2 = _probe(copy)
    assert edited2["hashes"] == before["hashes"]
    assert edited2["sample"]["eager"] != edited["sample"]["eager"]
    assert edited2["undeclared"] != before["undeclared"]


def test_a_norms_spec_says_whether_it_centres_and_the_bytes_model_reads_it(monkeypatch):
    """``NormSpec.centring`` (a norm added since the field), else ``bytes_model.CENTRING`` (the built-ins before it)."""
    import dataclasses

    from normbench.discovery import REGISTRY
    from normbench.measure import bytes_model as bm

    rms = REGISTRY.get("rmsnorm")
    specs = dict(REGISTRY.specs)
    for name, centring in (("centres_yes", True), ("centres_no", False), ("centres_unsaid", None)):
        specs[name] = dataclasses.replace(rms, name=name, centring=centring)
    monkeypatch.setattr(REGISTRY, "_specs", specs)
    formula = bm.formula_for(rms.family, rms.kind, rms.name)
    assert [bm.stats_per_row(formula, n) for n in ("centres_yes", "centres_no", "centres_unsaid")] == [2, 1, 1]
    assert bm.stats_per_row(formula, "layernorm") == 2 and bm.stats_per_row(formula, "rmsnorm") == 1   # the list
    assert bm.stats_per_row(formula, "centres_no", centring=True) == 2   # given: it wins
    assert bm.stats_per_row("pointwise", "centres_yes") == 0
    with pytest.raises(ValueError, match="centring"):
        dataclasses.replace(rms, centring="yes").validate()
