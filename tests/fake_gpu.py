"""A fake GPU timeline for the GPU timers' CPU tests: the interface of ``normbench.device.CudaOps`` over a simulated
host clock and one in-order CUDA stream. The model now lives in ``normbench.rehearsal`` (a rehearsal's simulated
device is built on it); its docstring states the model, and nothing about what a timer should report."""

from normbench.rehearsal import FakeEvent, FakeGPU

__all__ = ["FakeEvent", "FakeGPU"]
