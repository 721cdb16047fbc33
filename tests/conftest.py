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
def _check_cache(tmp_path_factory):
    """The check gate's cache (normbench.check) goes to a temporary directory, never the user's ~/.cache."""
    old = os.environ.get("NORMBENCH_CACHE_DIR")
    os.environ["NORMBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("normbench-cache"))
    yield
    if old is None:
        os.environ.pop("NORMBENCH_CACHE_DIR", None)
    else:
        os.environ["NORMBENCH_CACHE_DIR"] = old
