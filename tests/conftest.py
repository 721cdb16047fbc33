"""Shared pytest fixtures: a deterministic CPU environment for every test."""

from __future__ import annotations

import os

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def one_thread():
    """One torch thread for the test: on a shared machine several OpenMP threads per process spin and run slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _both_validators():
    """Every record any test validates goes through both validators (``normbench.records.schema``: jsonschema, the
    reference, and jsonschema-rs, the fast path), which raise if the fast path accepts what the reference rejects:
    every bad-record and hostile-record test is also a test of the fast path."""
    old = os.environ.get("NORMBENCH_VALIDATOR")
    os.environ["NORMBENCH_VALIDATOR"] = "both"
    yield
    if old is None:
        os.environ.pop("NORMBENCH_VALIDATOR", None)
    else:
        os.environ["NORMBENCH_VALIDATOR"] = old


@pytest.fixture(autouse=True, scope="session")
def _no_xdist_env_for_children():
    """Under pytest-xdist (``-n``), a worker's ``PYTEST_XDIST_*`` variables would leak into the pytest and ASV
    processes the tests start, and pytest-benchmark there would think it runs under xdist and disable itself."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PYTEST_XDIST_")}
    yield
    os.environ.update(saved)


@pytest.fixture(autouse=True, scope="session")
def _check_cache(tmp_path_factory):
    """normbench's caches go to a temporary directory, never the user's ~/.cache/normbench, which the main job
    (scripts/main.sh) uses: ``NORMBENCH_CACHE_DIR`` (the check gate's verdicts, the CPU ceiling, text data) and
    ``NORMBENCH_CACHE`` (training checkpoints, vision data: a test's interrupted run left a checkpoint there that
    the main job's training run of the same configuration would have resumed)."""
    keys = ("NORMBENCH_CACHE_DIR", "NORMBENCH_CACHE")
    old = {k: os.environ.get(k) for k in keys}
    base = tmp_path_factory.mktemp("normbench-cache")
    os.environ.update({k: str(base) for k in keys})
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory):
    """The demo records' site, built once for the site tests (test_site.py reads its files, test_site_browser.py
    drives it in Chromium): ``(root, report)`` with ``root/results``, ``root/docs`` and ``root/site``. Its tables
    are "big" above 30 rows (first 10 rows in the page, every row in a data file) and page 20 rows at a time, so
    the data-file path is exercised by the demo's kernel leaderboard."""
    import test_site_support as sup

    from normbench.site import build_site, tables

    root = tmp_path_factory.mktemp("demo")
    sup.write_demo(root / "results")
    docs = root / "docs"
    docs.mkdir()
    (docs / "measurement.md").write_text("# Measurement\n\nBytes: `2·N·C·s`. See [ref](https://example.org).\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tables, "PAGE_ROWS", 20)
        mp.setattr(tables, "INLINE_MAX", 30)
        mp.setattr(tables, "PREVIEW", 10)
        report = build_site(root / "results", root / "site", docs=docs)
    return root, report


@pytest.fixture(scope="session")
def committed_results(tmp_path_factory):
    """``results/`` as committed at the checked-out commit (``git archive HEAD results``), never the working tree's:
    a user's own runs (the main job appends its records to ``results/``) must not turn the suite red. Skipped
    outside a git checkout."""
    import shutil
    import subprocess
    import tarfile
    from io import BytesIO
    from pathlib import Path

    if shutil.which("git") is None or not os.path.isdir(os.path.join(REPO, ".git")) and not os.path.isfile(
            os.path.join(REPO, ".git")):
        pytest.skip("not a git checkout: the committed records cannot be told from the working tree's")
    out = tmp_path_factory.mktemp("committed")
    archive = subprocess.run(["git", "-C", REPO, "archive", "--format=tar", "HEAD", "results"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return Path(out) / "results"
