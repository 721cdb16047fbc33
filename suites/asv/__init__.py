"""ASV benchmarks for normbench (see kernels.py); run from the repository root with ``asv run``."""
