"""What every page module shares: the ``Page`` and ``SiteInfo`` types, where each page lives (its file, relative
to the site root), the navigation, and the texts of flags and timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from normbench.records.schema import bound_by
from normbench.site.fmt import fmt_time
from normbench.site.records import norm_stem, slug

#: The flag the reader (``normbench.results.records_that_count``) gives a migrated v1 record (``check: null``): it
#: never passed ``normbench check``, so it is shown and never ranked.
LEGACY = "legacy"

FLAG_LABELS = {LEGACY: "unchecked (legacy)", "stale": "stale code", "host_bound": "host-bound",
               "rehearsal": "rehearsal (simulated GPU)", "low_clock": "low clock", "host_sync": "syncs with host"}

#: Each flag's meaning in one line (docs/measurement.md, "Flags"): the legend's hover text.
FLAG_MEANINGS = {
    "non_finite": "the output or a gradient held NaN or inf in the float64 check: invalid, shown as failed",
    "fell_back": "torch.compile did not stay compiled",
    "noisy": "the machine was busy or the repetitions spread wide (the noise checks)",
    "host_bound": "the GPU's queue ran dry behind the host: the time includes the host's",
    "suspect": "faster than the copy ceiling (a cache-resident case: than its same-size copy) allows",
    "unchecked": "the backend has not passed the check gate (normbench check)",
    "forced": "measured although the check gate refused it",
    "diverged": "the training run diverged",
    "tuning": "a learning-rate search run on the validation split",
    "rehearsal": "measured in a rehearsal on a simulated GPU: CPU tensors, the simulation's times, no GPU's",
    "low_clock": "the GPU's clock did not ramp in the warm-up, or a timed batch ran below 90 % of its maximum",
    "host_sync": "the timed call synchronises with the device",
    "stale": "the code that made it has since changed",
    LEGACY: "a migrated record without a check verdict",
}

PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}

NAV = (
    ("index.html", "Overview"),
    ("kernels.html", "Kernels"),
    ("models.html", "By model"),
    ("devices.html", "Devices"),
    ("norms.html", "Norms"),
    ("softmax.html", "Softmax"),
    ("accuracy.html", "Accuracy"),
    ("claims.html", "Claims"),
    ("methodology.html", "Methodology"),
)

#: (page name, file in docs/, heading) of the methodology pages (a page says so when its file is missing).
DOCS = (("measurement", "measurement.md", "Measurement"), ("accuracy", "accuracy.md", "Accuracy"),
        ("kernels", "kernels.md", "Kernels"), ("norms", "norms.md", "The norm zoo"),
        ("softmax", "softmax.md", "Softmax"), ("site", "site.md", "The leaderboard site"))



def norm_file(name: str) -> str:
    """The page of a norm, relative to the site root."""
    return f"norms/{norm_stem(name)}.html"



def device_file(hw: str) -> str:
    return f"devices/{slug(hw)}.html"



def figures_file(hw: str) -> str:
    """A machine's width figures, one section per norm on many machines (``MANY_MACHINES``), drawn in the browser."""
    return f"devices/{slug(hw)}--figures.html"



def norm_compare_file(name: str) -> str:
    """A norm across devices."""
    return norm_file(name)[:-len(".html")] + "--devices.html"



def download_stem(hw: str) -> str:
    """A device's download files, without their suffix (``.csv.gz``, ``.parquet``), relative to the site root."""
    return f"downloads/{slug(hw)}"



def norm_device_file(name: str, hw: str) -> str:
    """The figures of a norm on one device, beside the norm's page (same depth, so figures are shared)."""
    return norm_file(name)[:-len(".html")] + f"--{slug(hw)}.html"



def _s(v) -> str:
    return v if isinstance(v, str) else ""



def flag_badges(flags: dict) -> list[tuple[str, str, str]]:
    """(label, flag, reason) per flag, for the templates' badges."""
    return [(FLAG_LABELS.get(f, f), f, why) for f, why in sorted(flags.items())]



def bound_text(r: dict) -> str | None:
    """A kernel row's GPU time against its host time, and which bounds the call (None without a host time)."""
    if not r.get("host"):
        return None
    who = ("the host bounds the call: issued one after another (a decode step without CUDA graphs) these calls run "
           "at the host's pace" if r["bound"] == "host" else "the GPU bounds the call: the host's launches keep up")
    return f"GPU time {fmt_time(r['time'])} (CUDA events), host time per call {fmt_time(r['host'])}: {who}"



def timing_text(rec: dict) -> str | None:
    """A kernel record page's line on GPU time and host time (None where the record has no host time)."""
    if rec.get("kind") != "kernel":
        return None
    met = rec.get("metrics") or {}
    return bound_text({"time": met.get("time_median_s"), "host": met.get("host_s"), "bound": bound_by(rec)})



@dataclass
class SiteInfo:
    built: str
    version: str
    n_records: int
    n_rejected: int
    taken: str



@dataclass
class Page:
    path: str                  # relative to the site root
    template: str
    title: str
    ctx: dict = field(default_factory=dict)
    active: str = ""
    lead: str = ""
    crumbs: list = field(default_factory=list)
    charts: bool = False       # the page has figures: load the chart scripts
    part: str | None = None    # not a page: a part another page loads on demand (``build`` writes the rendered HTML
                               # as a data file, ``tables.data_script("nbPart", (part,), html)``)

    @property
    def up(self) -> str:
        return "../" * self.path.count("/")
