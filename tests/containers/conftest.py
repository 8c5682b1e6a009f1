"""Fixtures of the container tests (tests/support/fixtures/containers.py): a real podman and
the test images, the real docker CLI against podman's service, trainqd daemons on each, and
a non-root submitter."""

from __future__ import annotations

from tests.support.fixtures.containers import (
    docker_daemon,
    docker_service,
    engine,
    podman_daemon,
    submitter,
)

__all__ = ["docker_daemon", "docker_service", "engine", "podman_daemon", "submitter"]
