"""The ASV set-up a maintainer can trust on a shared machine (issue #40), checked without running ASV: the default
grid has a forward case, the timed benchmarks run in two processes per commit that the README's ``asv continuous``
interleaves, its default ``-b`` set is the drift-normalised one, and ``RefClock`` (the timer of ``time_in_refs``)
counts a pass in calls of a reference op measured around it, so drift of the machine cancels; the reference is torch's
op of the norm's kind and never runs the code under test."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO as _REPO

from normbench.measure import kernel_suite as suite

pytest.importorskip("asv_runner")
REPO = Path(_REPO)


def _kernels(monkeypatch, tmp_path):
    for key in ("NORMBENCH_ASV_GRID", "NORMBENCH_ASV_NORMS", "NORMBENCH_ASV_SHAPES", "NORMBENCH_ASV_MODEL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(suite.SIDECAR_ENV, str(tmp_path / "sidecar"))
    spec = importlib.util.spec_from_file_location("nb_asv.kernels", REPO / "suites" / "asv" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "nb_asv.kernels", mod)  # ASV's benchmark objects look their module up
    spec.loader.exec_module(mod)
    return mod


def _readme_continuous() -> str:
    """The README's recommended ``asv continuous`` command line."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")  # shell line continuations joined
    lines = [ln for ln in text.splitlines() if "asv continuous" in ln and "time_in_refs" in ln]
    assert lines, "README.md lost its `asv continuous ... -b ...` command"
    return lines[0]


def test_default_asv_config_interleaves_two_rounds_of_fwd_and_fwd_bwd(monkeypatch, tmp_path):
    from asv_runner.benchmarks.time import TimeBenchmark

    mod = _kernels(monkeypatch, tmp_path)
    for cls in (mod.Kernel, mod.Relative):
        assert {"fwd", "fwd+bwd"} <= set(cls.params[4]), cls  # a 5x forward must not be diluted into fwd+bwd alone
        assert "rmsnorm" in cls.params[0]
    # As ASV itself reads the attributes: two rounds (processes per commit), the reference clock as the timer.
    for cls, name in ((mod.Kernel, "time_kernel"), (mod.Relative, "time_in_refs")):
        bench = TimeBenchmark(f"kernels.{cls.__name__}.{name}", getattr(cls, name), [cls])
        assert bench.rounds >= (4 if cls is mod.Relative else 2), name  # judged: each commit in 3+ windows
    rel = TimeBenchmark("kernels.Relative.time_in_refs", mod.Relative.time_in_refs, [mod.Relative])
    assert rel.timer is mod.REF_CLOCK
    # ASV refuses to interleave rounds in an existing environment; asv.conf.json must build one per commit.
    conf = json.loads("\n".join(ln for ln in (REPO / "asv.conf.json").read_text().splitlines()
                                if not ln.lstrip().startswith("//")))
    assert conf["environment_type"] != "existing"

    cmd = _readme_continuous()
    assert re.search(r"--interleave-(rounds|processes)\b", cmd), cmd
    regex = re.search(r"-b\s+'([^']+)'", cmd).group(1)
    judged = ["kernels.Relative.time_in_refs('rmsnorm', 'eager', 'quick-8x128x512', 'float32', 'fwd')"]
    not_judged = ["kernels.Kernel.time_kernel", "kernels.Kernel.peakmem_kernel", "accuracy.TextTasks.time_step",
                  "accuracy.ImageTasks.peakmem_train", "kernels.Metrics.track_pct_of_ceiling"]
    assert all(re.search(regex, b) for b in judged), regex
    assert not any(re.search(regex, b) for b in not_judged), regex


class _FakeTime:
    """A process_time that only the fake pass and reference advance."""

    def __init__(self):
        self.t = 0.0

    def process_time(self):
        return self.t


def test_ref_clock_counts_a_pass_in_reference_calls_measured_around_it(monkeypatch, tmp_path):
    mod = _kernels(monkeypatch, tmp_path)
    fake = _FakeTime()
    speed = {"ref": 1e-3, "pass": 3e-3}  # seconds per call, changed below as a drifting machine would

    def ref():
        fake.t += speed["ref"]

    def run_pass():
        fake.t += speed["pass"]

    clock = mod.RefClock()
    clock.start(ref, fake.process_time)

    def sample():  # as timeit does: read, run, read
        t0 = clock()
        run_pass()
        return clock() - t0

    assert sample() == pytest.approx(3.0)
    speed.update(ref=2e-3, **{"pass": 6e-3})  # the whole machine twice as slow: the count does not move
    assert sample() == pytest.approx(3.0)
    t0 = clock()  # references of 2 ms measured at this reading
    fake.t += 9e-3  # a 9 ms pass, during which the machine slows down further
    speed["ref"] = 4e-3  # references of 4 ms at the next reading: the pass counts 9 / mean(2, 4)
    assert clock() - t0 == pytest.approx(3.0)
    speed["pass"] = 5 * 12e-3  # a 5x slower pass (12 ms = 3 references before): 5x the count
    assert sample() == pytest.approx(15.0)
    readings = [clock() for _ in range(3)]
    assert readings == sorted(readings)  # monotonic, as ASV asks of a timer
    with pytest.raises(RuntimeError, match="start"):
        mod.RefClock()()
    # a sample of several calls (the quick cases' calls are sub-millisecond) counts one call's time
    speed.update(ref=1e-3, **{"pass": 3e-3})
    clock.start(ref, fake.process_time, per=4)
    t0 = clock()
    for _ in range(4):
        run_pass()
    assert clock() - t0 == pytest.approx(3.0)


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwd+bwd"])
def test_reference_is_torchs_own_op_and_never_the_code_under_test(monkeypatch, tmp_path, pass_):
    """The yardstick runs torch's op of the norm's kind (checked against the formula in float64) and does not move
    when normbench's norm does: a planted 5x slower RMSNorm must leave the reference's calls unchanged."""
    import torch

    mod = _kernels(monkeypatch, tmp_path)
    assert [mod.reference_kind(n) for n in ("rmsnorm", "add_rmsnorm", "layernorm", "dyt", "derf", "softmax",
                                            "groupnorm")] == ["rms_norm", "rms_norm", "layer_norm", "tanh", "erf",
                                                              "softmax", "layer_norm"]
    x = torch.randn(4, 16, dtype=torch.float64)
    for kind in ("rms_norm", "layer_norm", "tanh", "erf", "softmax"):
        ref = mod.reference_pass(kind, x, pass_, lambda: None)
        ref()  # warm: the lazy imports of a first call are not the code it runs
        files = set()

        def seen(frame, event, arg, files=files):
            if event == "call":
                files.add(frame.f_code.co_filename)

        sys.setprofile(seen)
        try:
            ref()
        finally:
            sys.setprofile(None)
        assert not [f for f in files if "/normbench/" in f], (kind, files)  # no normbench code timed as the yardstick
    # what the named op computes: RMS over the last dimension (weight 1), as the RMS family's formula
    got = torch.nn.functional.rms_norm(x, (16,), torch.ones(16, dtype=x.dtype), 1e-6)
    torch.testing.assert_close(got, x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
