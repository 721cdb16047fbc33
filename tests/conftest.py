"""Shared pytest fixtures: a deterministic CPU environment for every test."""

from __future__ import annotations

import os

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield
