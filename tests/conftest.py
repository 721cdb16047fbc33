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
