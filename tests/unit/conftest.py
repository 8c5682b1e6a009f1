"""Fixtures of the unit tests: one module at a time, in this process, starting no process."""

from __future__ import annotations

from tests.support.fixtures.apistub import stub

__all__ = ["stub"]
