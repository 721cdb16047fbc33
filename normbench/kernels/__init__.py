"""Fast implementations of the norms: fused Triton kernels (``triton_backend``), imported only when used.

Importing this package never imports Triton. ``normbench.kernels.triton_backend.unavailable()`` says whether
the kernels can run here; the kernel modules themselves (``_rownorm``, ``_pointwise``, ``_groupnorm``) import
Triton and must be imported after ``TRITON_INTERPRET`` is set, because Triton decides between the compiler and
its CPU interpreter when ``@triton.jit`` runs. ``python -m normbench.kernels.aot`` compiles them for a GPU target
without a GPU and reports registers and spills. See ``docs/kernels.md``.
"""
