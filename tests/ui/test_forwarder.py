"""`trainq ui`'s boundary: only the holder of the printed token reaches the API through it,
only on loopback, only to read, and always as the user who started it; the token never
leaves the page's own origin. Every refusal leaves trainqd (and the forwarder) serving."""

from __future__ import annotations

import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Browser

from tests.support.daemon import TRAINQ, Daemon
from tests.support.ui import TOKEN_HEADER, Forwarder, fetch, open_page, until

pytestmark = pytest.mark.ui


def test_api_requests_without_the_token_are_refused(box: Daemon, ui: Forwarder) -> None:
    job = box.submit({"command": ["true"]})
    for path in (
        "/v1/jobs",
        f"/v1/jobs/{job['id']}",
        "/v1/events",
        "/v1/gpus",
        "/ui/x/../../v1/gpus",
    ):
        assert fetch(ui.origin + path)[0] == 403, path
        assert fetch(ui.origin + path, {TOKEN_HEADER: "guess"})[0] == 403, path
        assert fetch(f"{ui.origin}{path}?token={ui.token}")[0] == 403, path  # a header only
        assert fetch(ui.origin + path, {"Cookie": f"token={ui.token}"})[0] == 403, path
    # The pages' own files are public; the right token opens the API; trainqd kept serving.
    assert fetch(ui.origin + "/ui/")[0] == 200
    status, body = fetch(ui.origin + "/v1/gpus", ui.headers())
    assert status == 200
    assert '"backend":"fake"' in body
    assert box.get("/v1/health").status_code == 200


def test_the_token_leaves_the_address_and_is_no_cookie(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    page = open_page(browser, ui.url)  # as printed
    page.wait_for_selector("#gpus")
    assert page.url == f"{ui.origin}/ui/#/box"
    assert page.context.cookies() == []
    # A browser that never had the URL gets the page's files and the refusal, no data.
    stranger = open_page(browser, ui.origin + "/ui/#/box")
    until(lambda: "no token" in stranger.locator("main").inner_text(), "the refusal")
    assert stranger.locator("#gpus").count() == 0


def test_another_listener_on_loopback_learns_no_token(ui: Forwarder, browser: Browser) -> None:
    """Cookies go to every port of a host: a local user's own listener, visited by the
    browser that holds the pages, must not receive the token."""
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            heard.append(conn.recv(65536))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    page = ui.open(browser, "#/box")
    page.wait_for_selector("#gpus")
    page.goto(f"http://127.0.0.1:{listener.getsockname()[1]}/ui/")
    thread.join(timeout=10)
    listener.close()
    assert heard
    assert ui.token.encode() not in heard[0]


def test_it_relays_reads_only(box: Daemon, ui: Forwarder) -> None:
    request = urllib.request.Request(  # noqa: S310 (http on loopback)
        ui.origin + "/v1/jobs",
        data=b'{"command": ["true"]}',
        headers={**ui.headers(), "Content-Type": "application/json"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310
        status = 200
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 405
    assert box.get("/v1/jobs?all=1").json()["jobs"] == []  # nothing was submitted


def test_it_listens_on_loopback_alone(ui: Forwarder) -> None:
    listening = [
        c.laddr
        for c in psutil.Process(ui.proc.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert [address.ip for address in listening] == ["127.0.0.1"]


def test_without_a_daemon_it_says_so_in_one_line_and_prints_no_url(tmp_path: Path) -> None:
    done = subprocess.run(
        [TRAINQ, "--socket", str(tmp_path / "none.sock"), "ui"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "cannot reach trainqd" in done.stderr
