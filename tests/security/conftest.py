"""Fixtures of the adversarial tests: the multi-user tests' real users and root trainqd, and
the container tests' real engine and images, used here to attack the trust boundary that
docs/security.md describes. Each test tries what a hostile local user would and asserts that
it fails and that trainqd goes on serving the other users."""

from __future__ import annotations

from tests.support.fixtures.containers import (
    docker_daemon,
    docker_service,
    engine,
    podman_daemon,
    submitter,
)
from tests.support.fixtures.multiuser import accounts, shared_dir, workstation

__all__ = [
    "accounts",
    "docker_daemon",
    "docker_service",
    "engine",
    "podman_daemon",
    "shared_dir",
    "submitter",
    "workstation",
]
