"""Fixtures of the end-to-end tests: real `trainqd` and `trainq` processes and real trainers
(the `daemon` and `shared_daemon` fixtures are every tier's, in tests/conftest.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import scratch_dir


@pytest.fixture
def base() -> Iterator[Path]:
    """A short directory for sockets (sun_path holds 108 bytes; pytest's tmp_path is long)."""
    path = scratch_dir("tqs")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
