"""Fixtures of the browser tests: a trainqd with fake GPUs whose readings a test rewrites,
its `trainq ui` forwarder, and one headless chromium per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.support.daemon import Daemon, running_daemon, scratch_dir
from tests.support.fixtures.multiuser import accounts, workstation
from tests.support.ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Forwarder,
    SocketForward,
    forwarder,
    write_gpus,
)

__all__ = ["accounts", "workstation"]  # the multi-user fixtures, for the privacy tests


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, not per session: while playwright's sync API is open its event loop counts
    # as running in the thread, and a later module on the same worker could not anyio.run.
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def gpu_file() -> Iterator[Path]:
    folder = scratch_dir("tqui")
    path = folder / "gpus.json"
    write_gpus(path, [(37, 1234), (81, 40960)])
    yield path
    path.unlink(missing_ok=True)
    folder.rmdir()


@pytest.fixture
def box(gpu_file: Path) -> Iterator[Daemon]:
    """trainqd with two fake GPUs read from `gpu_file`, sampled every half second."""
    config = {"gpu_sample_seconds": 0.5, "default_stop_grace_seconds": 2}
    with running_daemon(gpus=f"fake:{gpu_file}", config=config) as daemon:
        yield daemon


@pytest.fixture
def ui(box: Daemon) -> Iterator[Forwarder]:
    with forwarder(box) as running:
        yield running


@pytest.fixture
def forward(box: Daemon) -> Iterator[SocketForward]:
    """`box`'s socket on a loopback port, as `ssh -L` forwards it: no token asked."""
    made = SocketForward(box.socket)
    try:
        yield made
    finally:
        made.close()
