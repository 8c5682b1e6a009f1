"""Fixtures of the unit tests: one module at a time, in this process, starting no process."""

from __future__ import annotations

from tests.support.fixtures.apistub import stub
from tests.support.fixtures.cli import cli_environment

__all__ = ["cli_environment", "stub"]
