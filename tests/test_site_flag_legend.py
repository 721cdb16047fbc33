"""The kernel leaderboard's flag legend (normbench/site/pages/base.py's FLAG_LABELS and FLAG_MEANINGS): every flag
of the schema with a human label and its one-line meaning on hover, the flags issue #48 added (rehearsal, low_clock,
host_sync) included."""

from __future__ import annotations

import html
import re

import test_site_support as sup

from normbench import results
from normbench.records.schema import FLAGS
from normbench.site import build_site
from normbench.site.pages.base import FLAG_LABELS, FLAG_MEANINGS


def test_every_flag_has_a_label_and_a_meaning_on_the_built_legend(tmp_path):
    res = tmp_path / "results"
    rec = sup.kernel("rmsnorm", "eager", [16, 64], 1e-6, ceiling=1e6)
    results.add_flag(rec, "rehearsal", "measured in a rehearsal (NORMBENCH_REHEARSE=normal)")
    results.add_flag(rec, "low_clock", "the clock did not reach 95% of NVML's maximum SM clock")
    results.write_records([rec], res)
    build_site(res, tmp_path / "site", charts=False, jobs=1, cache=False)
    page = (tmp_path / "site" / "kernels.html").read_text()
    badge = r'<span class="flag flag-(\w+)" title="([^"]*)">([^<]*)</span>'
    para = page[page.index("A badge marks a flagged record"):]
    para = para[:para.index("</p>")]
    legend = {m.group(1): (html.unescape(m.group(2)), html.unescape(m.group(3))) for m in re.finditer(badge, para)}
    assert set(legend) == set(FLAGS)
    for flag in FLAGS:
        title, label = legend[flag]
        assert title == f"{flag}: {FLAG_MEANINGS[flag]}" and FLAG_MEANINGS[flag].strip()
        assert label == FLAG_LABELS.get(flag, flag)
    for flag, label in (("rehearsal", "rehearsal (simulated GPU)"), ("low_clock", "low clock"),
                        ("host_sync", "syncs with host")):
        assert legend[flag][1] == label  # a human label, not the raw name
    # the record's own badges (outside the legend): the same labels, the reason on hover
    badges = {m.group(1): (html.unescape(m.group(2)), html.unescape(m.group(3)))
              for m in re.finditer(badge, page.replace(para, ""))}
    assert badges["rehearsal"] == ("rehearsal: measured in a rehearsal (NORMBENCH_REHEARSE=normal)",
                                   "rehearsal (simulated GPU)")
    assert badges["low_clock"][1] == "low clock"
