"""Fixtures of the multi-user tests (tests/support/fixtures/multiuser.py): real users, a
trainqd run by root as on the workstation, and directories the users can reach."""

from __future__ import annotations

from tests.support.fixtures.multiuser import accounts, shared_dir, workstation

__all__ = ["accounts", "shared_dir", "workstation"]
