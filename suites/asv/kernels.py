"""ASV benchmarks of every norm x backend x shape x dtype x pass, thin declarations over ``normbench.measure``.

``Kernel`` times one pass with ASV's own timer (``time_``) and process peak memory (``peakmem_``).
``Metrics`` runs the normbench measurement core over the whole grid once (``setup_cache``), writes full normbench
records (with GPU fields ASV's machine file lacks) to ``.asv/normbench/records`` and reports GB/s, percent of the
DRAM copy ceiling, percent of a same-size copy (compare this one across sizes: a small case's data sits in a cache,
which the DRAM ceiling's does not) and memory above the inputs as ``track_`` benchmarks. ``normbench ingest-asv``
turns both into normbench records. The grid is chosen by ``NORMBENCH_ASV_GRID`` (small, quick, full) and
``NORMBENCH_ASV_NORMS``.
"""

import os
from pathlib import Path

from normbench.measure import suite

# Side records go next to ASV's results (results_dir ".asv/results" in asv.conf.json, two levels up from here).
os.environ.setdefault(suite.SIDECAR_ENV, str(Path(__file__).resolve().parents[2] / ".asv" / "normbench"))
PARAMS = suite.grid(env_prefix="NORMBENCH_ASV")


class Kernel:
    """ASV-timed passes (``time_kernel``) and ASV's process peak memory (``peakmem_kernel``).

    ``bwd`` is timed over one retained autograd graph, since ASV cannot run the forward untimed between calls.
    """

    params = PARAMS
    param_names = suite.PARAM_NAMES
    rounds = 1
    repeat = (1, 10, 5.0)
    warmup_time = 0.2
    timeout = 900

    def setup_cache(self):
        # Names every normbench commit has (``asv continuous`` imports this file into older commits' environments
        # too): the package's lazy ``make_context`` and ``suite.default_device``, not the module they live in.
        from normbench.measure import make_context
        from normbench.measure.timers import TimerSettings

        ctx = make_context(suite.default_device(), TimerSettings.quick(), command=["asv", "run"])
        suite.write_machine_sidecar(ctx)
        suite.write_impl_sidecar(PARAMS)
        return {"hardware_id": ctx.provenance["hardware_id"]}

    def setup(self, cache, norm, backend, shape, dtype, pass_):
        try:
            case = suite.case_for(norm, backend, shape, dtype, pass_, harness="asv")
            self.prep, fn, pre, sync = suite.prepare(case, retain_graph=True)
        except suite.Unsupported as exc:
            raise NotImplementedError(str(exc)) from None

        def run():
            fn()
            sync()

        self.run = run

    def time_kernel(self, cache, norm, backend, shape, dtype, pass_):
        self.run()

    def peakmem_kernel(self, cache, norm, backend, shape, dtype, pass_):
        self.run()


class Metrics:
    """GB/s, percent of the measured DRAM copy ceiling, percent of a same-size copy and memory above the inputs, from
    the normbench core. ``track_pct_of_same_size_copy`` is the one to compare across sizes (issue #28)."""

    params = PARAMS
    param_names = suite.PARAM_NAMES
    rounds = 1
    repeat = 1
    number = 1
    timeout = 3600

    def setup_cache(self):
        from normbench.measure.asv_ingest import measure_grid

        return measure_grid(PARAMS)

    setup_cache.timeout = 3600

    def setup(self, cache, norm, backend, shape, dtype, pass_):
        key = suite.combo_key(norm, backend, shape, dtype, pass_)
        if key not in cache["results"]:
            raise NotImplementedError(cache["skipped"].get(key, "not measured"))
        self.result = cache["results"][key]

    def track_gbps(self, cache, norm, backend, shape, dtype, pass_):
        return self.result["gbps"]

    track_gbps.unit = "GB/s"

    def track_pct_of_ceiling(self, cache, norm, backend, shape, dtype, pass_):
        pct = self.result["pct_of_ceiling"]
        return float("nan") if pct is None else pct

    track_pct_of_ceiling.unit = "%"

    def track_pct_of_same_size_copy(self, cache, norm, backend, shape, dtype, pass_):
        # GB/s as a share of a copy_ of the case's own bytes, timed the same way in the same run: the percentage to
        # compare across sizes (a cache-resident case's pct_of_ceiling measures its cache against DRAM).
        pct = self.result.get("pct_of_same_size_copy")
        return float("nan") if pct is None else pct

    track_pct_of_same_size_copy.unit = "%"

    def track_peak_mem_above_inputs(self, cache, norm, backend, shape, dtype, pass_):
        peak = self.result["peak_mem_bytes"]
        return float("nan") if peak is None else peak

    track_peak_mem_above_inputs.unit = "bytes"
