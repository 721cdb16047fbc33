"""Plugins through the ``normbench.norms`` entry-point group: the example package and deliberately broken ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

EXAMPLE = Path(REPO) / "examples" / "normbench-l1norm"


def _run(args, path_dirs, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "NORMBENCH_DISABLE_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path_dirs)
    # These plugins neither hang nor crash: no worker process needed (test_plugin_safety covers isolation).
    env["NORMBENCH_EXECUTOR"] = "inprocess"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "normbench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _fake_dist(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """A minimal installed distribution: dist-info with entry points, plus its modules, on a sys.path dir."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[normbench.norms]\n{lines}\n")
    for name, src in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(src))


_SPEC_HEAD = """
import torch
from torch import nn
from normbench import NormSpec, Paper
P = Paper("A paper", "Someone", 2024, "https://example.org/paper")
def spec(name, cls):
    return NormSpec(name=name, title=name, paper=P, family="features", kind="activation", layouts=("tokens",),
                    formula="y = f(x)", factory=lambda c, layout="tokens", **kw: cls(c))
"""


@pytest.fixture(scope="module")
def broken_plugins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    _fake_dist(root, "nb_import_error", {"import_error": "nb_import_error_mod:SPEC"},
               {"nb_import_error_mod": "raise ImportError('this plugin needs a package that is not installed')"})
    _fake_dist(root, "nb_invalid", {"invalid_spec": "nb_invalid_mod:SPEC"}, {"nb_invalid_mod": _SPEC_HEAD + """
SPEC = NormSpec(name="invalid_spec", title="x", paper=P, family="features", kind="not-a-kind", layouts=("tokens",),
                formula="y", factory=lambda c, layout="tokens": nn.Identity())
"""})
    _fake_dist(root, "nb_wrong_shape", {"wrong_shape": "nb_wrong_shape_mod:SPEC"},
               {"nb_wrong_shape_mod": _SPEC_HEAD + """
class Halve(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        return (x * self.w)[..., : x.shape[-1] // 2]
SPEC = spec("wrong_shape", Halve)
"""})
    _fake_dist(root, "nb_nan", {"nan_norm": "nb_nan_mod:SPEC"}, {"nb_nan_mod": _SPEC_HEAD + """
class NaNNorm(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        return x * self.w / (x - x).sum(-1, keepdim=True)
SPEC = spec("nan_norm", NaNNorm)
"""})
    _fake_dist(root, "nb_good", {"good_norm": "nb_good_mod:SPEC"}, {"nb_good_mod": _SPEC_HEAD + """
class Good(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
SPEC = spec("good_norm", Good)
"""})
    return root


def test_broken_plugins_are_reported_and_skipped(broken_plugins):
    res = _run(["list", "--json"], [broken_plugins])
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    names = {n["name"] for n in data["norms"]}
    assert {"good_norm", "wrong_shape", "nan_norm", "layernorm", "dyt"} <= names
    errors = {e["name"]: e for e in data["errors"]}
    assert "ImportError" in errors["import_error"]["error"] and "not installed" in errors["import_error"]["error"]
    assert "nb_import_error" in errors["import_error"]["source"]
    assert "kind" in errors["invalid_spec"]["error"]
    good = next(n for n in data["norms"] if n["name"] == "good_norm")
    assert good["package"] == "nb_good" and good["package_version"] == "0.1"

    text = _run(["list"], [broken_plugins])
    assert text.returncode == 0 and "good_norm" in text.stdout
    assert "import_error" in text.stderr and "skipped" in text.stderr


def test_check_names_each_failure_and_keeps_going(broken_plugins):
    res = _run(["check", "good_norm", "wrong_shape", "nan_norm", "rmsnorm", "--json"], [broken_plugins])
    assert res.returncode == 1
    report = {n["norm"]: n for n in json.loads(res.stdout)["norms"]}
    assert report["good_norm"]["passed"] and report["rmsnorm"]["passed"]
    shape_fail = [f for f in report["wrong_shape"]["failures"] if f["check"].startswith("shape")]
    assert shape_fail and "(4, 5, 16)" in shape_fail[0]["detail"]
    assert any(f["check"].startswith("finite") for f in report["nan_norm"]["failures"])

    text = _run(["check", "nan_norm", "good_norm"], [broken_plugins])
    assert text.returncode == 1
    assert "FAIL nan_norm" in text.stdout and "ok   good_norm" in text.stdout
    assert "non-finite" in text.stdout


def test_unknown_plugin_name_explains_why(broken_plugins):
    res = _run(["check", "import_error"], [broken_plugins])
    assert res.returncode == 2
    assert "failed to load" in res.stderr and "ImportError" in res.stderr


def test_env_var_turns_plugins_off(broken_plugins):
    res = _run(["list", "--json"], [broken_plugins], {"NORMBENCH_DISABLE_PLUGINS": "1"})
    data = json.loads(res.stdout)
    names = {n["name"] for n in data["norms"]}
    assert "good_norm" not in names and "layernorm" in names
    assert data["errors"] == []


@pytest.mark.slow
def test_example_plugin_installs_lists_and_passes_check(tmp_path):
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(EXAMPLE)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    res = _run(["list", "--json"], [target])
    assert res.returncode == 0, res.stderr
    norm = next(n for n in json.loads(res.stdout)["norms"] if n["name"] == "l1_layernorm")
    assert norm["package"] == "normbench-l1norm" and norm["package_version"] == "0.1.0"
    assert norm["paper"]["url"] == "https://arxiv.org/abs/1803.01814"
    chk = _run(["check", "l1_layernorm"], [target])
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert "ok   l1_layernorm" in chk.stdout


def test_example_plugin_matches_float64_formula():
    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        import torch
        from normbench_l1norm import L1LayerNorm
    finally:
        sys.path.pop(0)
    torch.manual_seed(0)
    m = L1LayerNorm(10)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 7, 10, dtype=torch.float64)
    mu = x.mean(-1, keepdim=True)
    ref = (x - mu) / ((torch.pi / 2) ** 0.5 * (x - mu).abs().mean(-1, keepdim=True) + 1e-5)
    ref = ref * m.weight.double() + m.bias.double()
    torch.testing.assert_close(m.double()(x), ref)
