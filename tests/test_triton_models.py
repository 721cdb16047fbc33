"""Models select a norm's Triton backend by name: same loss and gradients as eager (Triton's CPU interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import normbench

pytest.importorskip("triton")

_SCRIPT = textwrap.dedent("""
    import torch
    from normbench.models import build_model
    from normbench.tasks import get_task

    task = get_task("synth-lm")
    opts = dict(n_layer=1, n_head=2, n_embd=24, seq_len=8)
    out = {}
    for backend in ("eager", "triton"):
        torch.manual_seed(0)
        built = build_model("gpt", task, "rmsnorm", placement="pre_ln", backend=backend, **opts)
        model = built.module
        kinds = sorted({type(m).__name__ for m in model.modules() if "Norm" in type(m).__name__})
        idx = torch.randint(0, task.vocab_size, (2, 8), generator=torch.Generator().manual_seed(1))
        logits = model(idx)
        logits = logits[0] if isinstance(logits, tuple) else logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx.reshape(-1))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        out[backend] = (loss.item(), grads, kinds, list(model.state_dict()))
    (le, ge, ke, se), (lt, gt, kt, st) = out["eager"], out["triton"]
    assert se == st, "state_dict keys differ between backends"
    assert "TritonNorm" in kt and "TritonNorm" not in ke, (ke, kt)
    assert abs(le - lt) < 1e-5 * max(1.0, abs(le)), (le, lt)
    worst = max(float((ge[n] - gt[n]).abs().max()) / (1e-6 + float(ge[n].abs().max())) for n in ge)
    assert set(ge) == set(gt) and worst < 1e-4, worst
    print("OK", le, lt, worst)
""")


def test_gpt_with_triton_rmsnorm_matches_eager():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]


def test_triton_backend_without_gpu_is_a_clear_error():
    code = ("import normbench\nfrom normbench.models import build_model\nfrom normbench.tasks import get_task\n"
            "try:\n    build_model('gpt', get_task('synth-lm'), 'layernorm', backend='triton')\n"
            "except normbench.BackendUnavailable as e:\n    print('UNAVAILABLE', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if "UNAVAILABLE" not in res.stdout:
        import torch
        assert torch.cuda.is_available(), res.stdout + res.stderr
    else:
        assert "no CUDA GPU" in res.stdout and "TRITON_INTERPRET=1" in res.stdout


def test_backend_applies_to_activation_norms_only():
    from normbench.models import build_model
    from normbench.tasks import get_task

    with pytest.raises(ValueError, match="activation norms"):
        build_model("gpt", get_task("synth-lm"), "weight_norm", backend="triton")
    assert "triton" in normbench.get_norm("rmsnorm").backends
