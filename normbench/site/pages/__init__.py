"""The leaderboard's pages as (path, template, context): the data each page shows, shaped for its template.

No HTML here: the templates in ``templates/`` render every value autoescaped, tables are ``tables.Table`` data and
figures come from ``charts`` (Vega-Lite specs rendered to static SVG).

One ``Site`` object makes every page of a build. Its parts, one module each: ``core`` (the rows by machine and norm,
what is memoised per build and kept between builds, the build's jobs), ``figures`` (the width figures), and one module
per kind of page: ``overview``, ``kernels`` (the leaderboard and the kernel records table), ``devices``, ``norms``,
``models``, ``accuracy``, ``claims`` (with softmax), ``records`` (with the rejected records), ``downloads`` and
``methodology``. ``base`` holds what they share (``Page``, the pages' file names, flag texts).

The bounds below are read here by every module at the time of use (``pages.MANY_MACHINES``), so a test or a tool
that sets one on this package changes every page that reads it.
"""

from __future__ import annotations

#: A norm's page shows its figures for every device while they hold at most this many points in all (each point
#: is in the SVG and in the spec); beyond that each device's figures are one click away on their own page.
INLINE_POINTS = 1500
#: The same bound for a norm's device-comparison page (its further figures are listed, not drawn).
COMPARE_POINTS = 3000
#: A norm measured on more machines than this has no page per machine (``norms/<norm>--<device>.html``: figures and
#: records, and their data file): its page lists each machine's best results and loads a machine's every record of
#: the norm on demand, from the machine's one kernel data file (``data/km-<device>.js``, written with its device
#: page), so a submitted machine adds no file per norm (issue #38: 100 machines x 29 norms were 2,900 pages).
MANY_MACHINES = 12
#: The machines whose best results the overview shows in a many-machine site (the highest best share of the ceiling
#: first): the page does not grow with the machines (at 200 machines it was 2.5 MB); the matrix holds every machine,
#: its first rows in the page and the rest in ``data/matrix.js``, and each machine's page has its every record.
TOP_MACHINES = 10

# The page modules read the bounds above from this package: imported after them.
from normbench.site.pages.accuracy import AccuracyPages, _metric_label  # noqa: E402
from normbench.site.pages.base import (  # noqa: E402
    DOCS,
    FLAG_LABELS,
    LEGACY,
    NAV,
    PASS_ORDER,
    Page,
    SiteInfo,
    bound_text,
    device_file,
    download_stem,
    figures_file,
    flag_badges,
    norm_compare_file,
    norm_device_file,
    norm_file,
    timing_text,
)
from normbench.site.pages.claims import ClaimPages  # noqa: E402
from normbench.site.pages.core import SiteCore  # noqa: E402
from normbench.site.pages.devices import DevicePages  # noqa: E402
from normbench.site.pages.downloads import DownloadPages  # noqa: E402
from normbench.site.pages.figures import Figures, LazyFigure, _na  # noqa: E402
from normbench.site.pages.kernels import KernelPages  # noqa: E402
from normbench.site.pages.methodology import MethodologyPages, _bytes_models, read_docs  # noqa: E402
from normbench.site.pages.models import ModelPages  # noqa: E402
from normbench.site.pages.norms import NormPages  # noqa: E402
from normbench.site.pages.overview import OverviewPage  # noqa: E402
from normbench.site.pages.records import RecordPages, _flat, _text  # noqa: E402


class Site(OverviewPage, KernelPages, DevicePages, NormPages, ModelPages, AccuracyPages, ClaimPages, RecordPages,
           DownloadPages, MethodologyPages, Figures, SiteCore):
    """All pages of one build: ``pages()`` yields Page objects; ``data_files`` collects the big tables' rows."""


__all__ = [
    "COMPARE_POINTS", "DOCS", "FLAG_LABELS", "INLINE_POINTS", "LEGACY", "MANY_MACHINES", "NAV", "PASS_ORDER",
    "TOP_MACHINES", "LazyFigure", "Page", "Site", "SiteCore", "SiteInfo", "bound_text", "device_file",
    "download_stem", "figures_file", "flag_badges", "norm_compare_file", "norm_device_file", "norm_file",
    "read_docs", "timing_text", "_bytes_models", "_flat", "_metric_label", "_na", "_text",
]
