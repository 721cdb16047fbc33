"""The overview's norm x device matrix (and each device's page) never says only "unranked": a norm measured on a
machine without a ranked record there says why in the cell ("unranked: no same-size copy", "unranked: flagged
(suspect)"), and the cell's title counts the records behind each reason (issue #50)."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

import test_site_support as sup

from normbench.results import write_records
from normbench.site import build_site

REPO = Path(__file__).resolve().parents[1]


class _Cells(HTMLParser):
    """(text, title of its link) of every cell of the table ``table_id``."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.depth, self.cells, self._cell = table_id, 0, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and (self.depth or a.get("id") == self.table_id):
            self.depth += 1
        elif self.depth and tag == "td":
            self._cell = ["", None]
        elif self._cell is not None and tag == "a":
            self._cell[1] = a.get("title")

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth -= 1
        elif tag == "td" and self._cell is not None:
            self.cells.append((self._cell[0].strip(), self._cell[1]))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0] += data


def matrix_cells(page: Path) -> list[tuple[str, str | None]]:
    p = _Cells("matrix")
    p.feed(page.read_text(encoding="utf-8"))
    assert p.cells, page
    return p.cells


def unranked(cells):
    return [(text, title) for text, title in cells if text.startswith("unranked")]


def test_the_committed_results_overview_says_why_each_cell_is_unranked(tmp_path):
    """The committed records (read as the site reads them): cpu-amd-epyc-2c's quick cases are cache-resident and
    older than the same-size copy, so its cells say so instead of a bare "unranked". The kernel records alone: the
    matrix shows nothing else."""
    shutil.copytree(REPO / "results" / "kernel", tmp_path / "results" / "kernel")
    build_site(tmp_path / "results", tmp_path / "site", charts=False, cache=False)
    for page in ("index.html", "devices.html"):
        cells = unranked(matrix_cells(tmp_path / "site" / page))
        assert cells, page
        assert all(text != "unranked" for text, _ in cells), page
        assert {text for text, _ in cells} == {"unranked: no same-size copy"}, page
        for _, title in cells:
            assert " none ranked: " in title and "without a same-size copy" in title, title
            n = int(title.split(" record(s) of ")[0])
            counted = sum(int(part.split(" ")[0]) for part in title.split(" none ranked: ")[1].split("; "))
            assert counted == n, title   # every record is counted under one reason
    device = next((tmp_path / "site" / "devices").glob("cpu-amd-epyc-2c-*.html"))
    text = device.read_text(encoding="utf-8")
    assert "unranked: no same-size copy" in text and ">unranked<" not in text


def test_a_norm_whose_every_record_is_flagged_says_which_flags(tmp_path):
    recs = [sup.kernel("layernorm", "eager", [64, 512], 2e-5),
            sup.kernel("rmsnorm", "eager", [64, 512], 2e-5, suspect=True),
            sup.kernel("rmsnorm", "eager", [128, 512], 4e-5, suspect=True),
            sup.kernel("dyt", "eager", [64, 512], 2e-5, legacy=True)]
    write_records(recs, tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "site", charts=False, cache=False)
    cells = matrix_cells(tmp_path / "site" / "index.html")
    assert not any(text == "unranked" for text, _ in cells)
    why = dict(unranked(cells))
    assert set(why) == {"unranked: flagged (suspect)", "unranked: flagged (unchecked (legacy))"}, cells
    assert why["unranked: flagged (suspect)"].startswith("2 record(s) of rmsnorm on cpu-test-cpu-9000-8c, none "
                                                         "ranked: 2 flagged (suspect)")
    assert any(" % " in text for text, _ in cells)   # layernorm's record is ranked
    device = next((tmp_path / "site" / "devices").glob("cpu-test-cpu-9000-8c*.html")).read_text(encoding="utf-8")
    assert "unranked: flagged (suspect)" in device and ">unranked<" not in device
