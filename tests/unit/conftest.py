"""Fixtures of the unit tests: one module at a time, in this process, starting no process."""

from __future__ import annotations

import os
import subprocess
from typing import Any, NoReturn

import pytest

from tests.support.fixtures.apistub import stub
from tests.support.fixtures.cli import cli_environment

__all__ = ["cli_environment", "stub"]


def _refused(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("a unit test starts no process: its place is tests/integration")


@pytest.fixture(autouse=True)
def _no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way this process could start another fails the test that tries."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refused)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, _refused)
    for name in [n for n in dir(os) if n.startswith("exec") or n.startswith("spawn")]:
        monkeypatch.setattr(os, name, _refused)
