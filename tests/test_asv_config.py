"""The ASV set-up a maintainer can trust on a shared machine (issue #40), checked without running ASV: the default
grid has a forward case, the timed benchmarks run in two processes per commit that the README's ``asv continuous``
interleaves, its default ``-b`` set is the drift-normalised one, and ``CopyClock`` (the timer of ``time_in_copies``)
counts a pass in copies measured around it, so drift of the machine cancels."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO as _REPO

from normbench.measure import suite

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
    lines = [ln for ln in text.splitlines() if "asv continuous" in ln and "time_in_copies" in ln]
    assert lines, "README.md lost its `asv continuous ... -b ...` command"
    return lines[0]


def test_default_asv_config_interleaves_two_rounds_of_fwd_and_fwd_bwd(monkeypatch, tmp_path):
    from asv_runner.benchmarks.time import TimeBenchmark

    mod = _kernels(monkeypatch, tmp_path)
    for cls in (mod.Kernel, mod.Relative):
        assert {"fwd", "fwd+bwd"} <= set(cls.params[4]), cls  # a 5x forward must not be diluted into fwd+bwd alone
        assert "rmsnorm" in cls.params[0]
    # As ASV itself reads the attributes: two rounds (processes per commit), the copy clock as the timer.
    for cls, name in ((mod.Kernel, "time_kernel"), (mod.Relative, "time_in_copies")):
        bench = TimeBenchmark(f"kernels.{cls.__name__}.{name}", getattr(cls, name), [cls])
        assert bench.rounds >= 2, name
    rel = TimeBenchmark("kernels.Relative.time_in_copies", mod.Relative.time_in_copies, [mod.Relative])
    assert rel.timer is mod.COPY_CLOCK
    # ASV refuses to interleave rounds in an existing environment; asv.conf.json must build one per commit.
    conf = json.loads("\n".join(ln for ln in (REPO / "asv.conf.json").read_text().splitlines()
                                if not ln.lstrip().startswith("//")))
    assert conf["environment_type"] != "existing"

    cmd = _readme_continuous()
    assert re.search(r"--interleave-(rounds|processes)\b", cmd), cmd
    regex = re.search(r"-b\s+'([^']+)'", cmd).group(1)
    judged = ["kernels.Relative.time_in_copies('rmsnorm', 'eager', 'quick-8x128x512', 'float32', 'fwd')"]
    not_judged = ["kernels.Kernel.time_kernel", "kernels.Kernel.peakmem_kernel", "accuracy.TextTasks.time_step",
                  "accuracy.ImageTasks.peakmem_train", "kernels.Metrics.track_pct_of_ceiling"]
    assert all(re.search(regex, b) for b in judged), regex
    assert not any(re.search(regex, b) for b in not_judged), regex


class _FakeTime:
    """A process_time that only the fake pass and copy advance."""

    def __init__(self):
        self.t = 0.0

    def process_time(self):
        return self.t


def test_copy_clock_counts_a_pass_in_copies_measured_around_it(monkeypatch, tmp_path):
    mod = _kernels(monkeypatch, tmp_path)
    fake = _FakeTime()
    speed = {"copy": 1e-3, "pass": 3e-3}  # seconds per call, changed below as a drifting machine would

    def copy():
        fake.t += speed["copy"]

    def run_pass():
        fake.t += speed["pass"]

    clock = mod.CopyClock()
    clock.start(copy, fake.process_time)

    def sample():  # as timeit does: read, run, read
        t0 = clock()
        run_pass()
        return clock() - t0

    assert sample() == pytest.approx(3.0)
    speed.update(copy=2e-3, **{"pass": 6e-3})  # the whole machine twice as slow: the count does not move
    assert sample() == pytest.approx(3.0)
    t0 = clock()  # copies of 2 ms measured at this reading
    fake.t += 9e-3  # a 9 ms pass, during which the machine slows down further
    speed["copy"] = 4e-3  # copies of 4 ms at the next reading: the pass counts 9 / mean(2, 4) copies
    assert clock() - t0 == pytest.approx(3.0)
    speed["pass"] = 5 * 12e-3  # a 5x slower pass (12 ms = 3 copies before): 5x the count
    assert sample() == pytest.approx(15.0)
    readings = [clock() for _ in range(3)]
    assert readings == sorted(readings)  # monotonic, as ASV asks of a timer
    with pytest.raises(RuntimeError, match="start"):
        mod.CopyClock()()
