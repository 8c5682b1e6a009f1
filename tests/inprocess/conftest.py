"""Fixtures of the in-process tests: the real scheduler, API and store on one event loop,
with fake GPUs and fake monitors (tests/support/inprocess.py)."""

from __future__ import annotations

from tests.support.fixtures.store import store

__all__ = ["store"]
