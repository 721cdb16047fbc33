"""The baseline adapters, one module per library (``normbench.measure.baselines`` registers them).

One module per library, so a baseline's implementation hash covers exactly its adapter: ``_base`` (shared by all)
and its library's module, with the norm's own sources and the library's version (``normbench.measure.core.impl_hash``).
"""
