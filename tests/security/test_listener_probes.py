"""Nothing a client of the metrics port does can end trainqd or take its descriptors.

trainqd listens on TCP when `metrics_listen` is set: anyone who can reach the port is a
client, and port scanners, health probes and load balancers connect and close without a
word. Against a real root trainqd, this probes the port as a hostile network would:
connect-and-close, resets, half-open connections, a request sent a byte a second, a flood
of connections held open, and a flood while trainqd is out of descriptors (its open-files
limit lowered under it, so `accept()` fails with EMFILE). After each, trainqd must still run,
hold a bounded number of descriptors, answer a scrape, and answer another user's `trainq ls`.
"""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import struct
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

MAX_SCRAPE_CONNECTIONS = 16  # scrape_listener.MAX_CONNECTIONS
REQUEST_TIMEOUT = 5.0  # scrape_listener.REQUEST_TIMEOUT
FLOOD = 400
# Descriptors trainqd may gain while a flood is held: its scrape connections and a margin
# for what it opens meanwhile on its own account (the database, a GPU sample).
HELD_AT_MOST = MAX_SCRAPE_CONNECTIONS + 16


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def listening(accounts: Accounts) -> Iterator[tuple[Daemon, tuple[str, int]]]:
    port = _free_port()
    config = {"admin_group": ADMINS, "metrics_listen": f"127.0.0.1:{port}"}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        yield daemon, ("127.0.0.1", port)


def _connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.settimeout(10)
    return sock


def _scrape(address: tuple[str, int]) -> bytes:
    """A whole GET /metrics: the status line and headers, then everything to the close."""
    with _connect(address) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        return _read_to_end(sock)


def _read_to_end(sock: socket.socket) -> bytes:
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


def _assert_serving(daemon: Daemon, accounts: Accounts, address: tuple[str, int]) -> None:
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, f"trainqd died: {daemon.log()[-2000:]}"
    assert _scrape(address).startswith(b"HTTP/1.1 200")
    done = trainq_as(daemon, accounts.bob, "ls")
    assert done.returncode == 0, done.stderr


def _descriptors(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return psutil.Process(daemon.proc.pid).num_fds()


def test_connect_and_close_and_resets_end_nothing(
    listening: tuple[Daemon, tuple[str, int]], accounts: Accounts
) -> None:
    daemon, address = listening
    for _ in range(50):  # nc -z: connect, close at once
        _connect(address).close()
    for _ in range(50):  # a reset instead of a close
        sock = _connect(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    _assert_serving(daemon, accounts, address)


def test_half_open_clients_are_answered_or_closed(
    listening: tuple[Daemon, tuple[str, int]], accounts: Accounts
) -> None:
    daemon, address = listening
    for _ in range(20):  # half a request, then the client's writing end shut
        with _connect(address) as sock:
            sock.sendall(b"GET /metr")
            sock.shutdown(socket.SHUT_WR)
            assert _read_to_end(sock) == b""
    # Its whole request sent, then its writing end shut: it still reads, so it gets its answer.
    with _connect(address) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert _read_to_end(sock).startswith(b"HTTP/1.1 200")
    # Connected, says nothing, never closes: trainqd closes it.
    with _connect(address) as sock:
        sock.settimeout(REQUEST_TIMEOUT * 4)
        assert _read_to_end(sock) == b""
    _assert_serving(daemon, accounts, address)


def test_a_request_sent_a_byte_a_second_is_cut_off(
    listening: tuple[Daemon, tuple[str, int]], accounts: Accounts
) -> None:
    daemon, address = listening
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(address) as sock:
        closed = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # reset by trainqd: cut off
                closed = True
                break
            readable, _, _ = select.select([sock], [], [], 1.0)  # a byte a second
            if readable and sock.recv(65536) == b"":
                closed = True
                break
        assert closed, "trainqd waited for a request dribbled in over its whole length"
    _assert_serving(daemon, accounts, address)


def test_a_flood_holds_a_bounded_number_of_descriptors(
    listening: tuple[Daemon, tuple[str, int]], accounts: Accounts
) -> None:
    daemon, address = listening
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * FLOOD)), hard))
    before = _descriptors(daemon)
    held: list[socket.socket] = []
    try:
        for _ in range(FLOOD):  # connections completed by the kernel, then held silent
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(address)
            held.append(sock)
        # trainqd takes what it may; let it try for a moment, then count.
        wait_for(
            lambda: _descriptors(daemon) >= before + MAX_SCRAPE_CONNECTIONS // 2,
            timeout=10,
            what="trainqd to take its share of the flood",
        )
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            grown = _descriptors(daemon) - before
            assert grown <= HELD_AT_MOST, f"trainqd holds {grown} more descriptors"
            time.sleep(0.1)
        done = trainq_as(daemon, accounts.bob, "ls")
        assert done.returncode == 0, done.stderr
    finally:
        for sock in held:
            sock.close()
    # Once the flood is gone, its slots come back: scrapes are answered again.
    wait_for(
        lambda: _scrape_or_none(address),
        timeout=REQUEST_TIMEOUT * 4,
        what="a scrape after the flood",
    )
    _assert_serving(daemon, accounts, address)


def _scrape_or_none(address: tuple[str, int]) -> bool:
    try:
        return _scrape(address).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def test_running_out_of_descriptors_pauses_accepting_and_ends_nothing(
    listening: tuple[Daemon, tuple[str, int]], accounts: Accounts
) -> None:
    daemon, address = listening
    assert daemon.proc is not None
    trainqd = psutil.Process(daemon.proc.pid)
    limits = trainqd.rlimit(psutil.RLIMIT_NOFILE)
    # Room for nothing more: every accept() fails with EMFILE, on the port and the socket.
    trainqd.rlimit(psutil.RLIMIT_NOFILE, (trainqd.num_fds(), limits[1]))
    held: list[socket.socket] = []
    try:
        for _ in range(50):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(address)
            held.append(sock)
        for _ in range(5):  # the API socket too
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                unix.connect(str(daemon.socket))
            held.append(unix)
        wait_for(
            lambda: "Too many open files" in daemon.log(),
            timeout=10,
            what="trainqd to meet EMFILE",
        )
        assert daemon.proc.poll() is None, f"trainqd died: {daemon.log()[-2000:]}"
    finally:
        for sock in held:
            sock.close()
        trainqd.rlimit(psutil.RLIMIT_NOFILE, limits)
    _assert_serving(daemon, accounts, address)
