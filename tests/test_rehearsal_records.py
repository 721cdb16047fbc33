"""Records measured in a rehearsal (``NORMBENCH_REHEARSE=normal``: the simulated GPU of ``normbench.device``) go
through the real bench, its writers and its readers: every one carries the ``rehearsal`` flag naming the scenario and
a provenance that says simulated, and ``best``, ``claims`` and the site never rank them. The same records with that
flag taken off (and ``noisy``, which a busy test machine adds) are ranked by the same readers, so what keeps them
out is the flag. Nothing here asserts a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.records.store import iter_records, write_records

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ("8x64", "16x64", "32x64")
HW = "gpu-simulated-gpu-rehearsal-normal"


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rehearsed")
    env = {**os.environ, "NORMBENCH_REHEARSE": "normal", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "normbench.cli", "bench", "--norm", "rmsnorm", "layernorm",
                          "--backend", "eager", "native", "--shape", *SHAPES, "--dtype", "float32", "--pass", "fwd",
                          "--device", "cuda", "--quick", "--executor", "inprocess", "--no-progress",
                          "--out", str(out)], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def _records(root: Path) -> list[dict]:
    return [rec for _path, rec in iter_records(root, errors="raise")]


def _rewrite(records: list[dict], root: Path, drop: tuple[str, ...]) -> Path:
    """The records with the flags ``drop`` taken off, written by the real writer under ``root``."""
    out = []
    for rec in records:
        rec = json.loads(json.dumps(rec))
        rec["flags"] = [f for f in rec["flags"] if f not in drop]
        rec["flag_reasons"] = {f: why for f, why in rec["flag_reasons"].items() if f not in drop}
        out.append(rec)
    write_records(out, root)
    return root


def _cli(capsys, *argv) -> str:
    from normbench.cli import main

    capsys.readouterr()
    rc = main(list(argv))
    text = capsys.readouterr().out
    assert rc in (0, 1), rc
    return text


def test_rehearsal_records_are_flagged_and_say_simulated(rehearsed):
    recs = _records(rehearsed)
    assert len(recs) == 9  # rmsnorm eager + native, layernorm eager, at three shapes
    for rec in recs:
        assert rec["config"]["device"] == "cuda" and rec["provenance"]["hardware_id"] == HW
        assert "rehearsal" in rec["flags"]
        assert "NORMBENCH_REHEARSE=normal" in rec["flag_reasons"]["rehearsal"]
        assert "simulated" in rec["provenance"]["simulated"] and "Simulated" in rec["provenance"]["hardware"]["gpu"]
    run = subprocess.run([sys.executable, "-m", "normbench.cli", "validate", str(rehearsed)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert run.returncode == 0 and "0 problem(s)" in run.stdout


def _best(capsys, root: Path) -> list[dict]:
    out = []
    for shape in SHAPES:
        doc = json.loads(_cli(capsys, "best", "--shape", shape, "--norm", "rmsnorm", "--results", str(root),
                              "--json"))
        out += [a for a in doc["answers"] if a["hardware_id"] == HW]
    assert len(out) == len(SHAPES)
    return out


def test_best_never_ranks_rehearsal_records(rehearsed, tmp_path, capsys):
    kept = _rewrite(_records(rehearsed), tmp_path / "kept", ("noisy",))
    for a in _best(capsys, kept):
        assert a["status"] == "flagged" and any("rehearsal" in r for r in a["reasons"]), a
    bare = _rewrite(_records(rehearsed), tmp_path / "bare", ("noisy", "rehearsal"))
    assert {a["status"] for a in _best(capsys, bare)} <= {"winner", "tie", "undecided"}   # ranked without the flag


def _speed_rows(capsys, root: Path) -> list[dict]:
    doc = json.loads(_cli(capsys, "claims", "--results", str(root), "--json"))
    rows = [row for claim in (doc if isinstance(doc, list) else doc.get("claims", doc.get("results", [])))
            for row in claim.get("rows", claim.get("comparisons", []))
            if row.get("type") == "speed" and {row.get("a"), row.get("b")} == {"rmsnorm", "layernorm"}]
    assert rows
    return rows


def test_claims_never_read_rehearsal_records(rehearsed, tmp_path, capsys):
    kept = _rewrite(_records(rehearsed), tmp_path / "kept", ("noisy",))
    for row in _speed_rows(capsys, kept):
        assert row["hardware"] is None and "no unflagged kernel records" in row["reason"], row
    bare = _rewrite(_records(rehearsed), tmp_path / "bare", ("noisy", "rehearsal"))
    assert any(row["hardware"] == HW and row["n_a"] == len(SHAPES) for row in _speed_rows(capsys, bare))


def _site_rows(capsys, root: Path, out: Path) -> list[str]:
    _cli(capsys, "site", "build", "--results", str(root), "--out", str(out))
    html = "".join((out / "norms" / f"{norm}.html").read_text() for norm in ("rmsnorm", "layernorm"))
    return [row.split(">", 1)[0] for row in html.split("<tr ")[1:] if f'data-f-hardware="{HW}"' in row]


def test_the_site_never_ranks_rehearsal_records(rehearsed, tmp_path, capsys):
    kept = _rewrite(_records(rehearsed), tmp_path / "kept", ("noisy",))
    rows = _site_rows(capsys, kept, tmp_path / "site")
    assert len(rows) == 9 and all('data-f-ranked="flagged"' in r for r in rows)
    assert "every record is flagged" in (tmp_path / "site" / "index.html").read_text()
    bare = _rewrite(_records(rehearsed), tmp_path / "bare", ("noisy", "rehearsal"))
    rows = _site_rows(capsys, bare, tmp_path / "site-bare")
    assert len(rows) == 9 and all('data-f-ranked="ranked"' in r for r in rows)
