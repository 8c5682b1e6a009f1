"""Fixtures of the Slurm tests: a real single-host Slurm for the session
(tests/support/fixtures/slurm.py), with the multi-user tests' real users and the container
tests' engine and images, for jobs of ordinary users and container jobs through trainqd's
Slurm back end."""

from __future__ import annotations

from tests.support.fixtures.containers import engine
from tests.support.fixtures.multiuser import accounts, shared_dir
from tests.support.fixtures.slurm import slurm

__all__ = ["accounts", "engine", "shared_dir", "slurm"]
