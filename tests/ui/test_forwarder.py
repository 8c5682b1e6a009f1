"""`trainq ui`'s boundary: only the holder of the printed token gets through, only on
loopback, only reads, and always as the user who started it. Every refusal leaves trainqd
(and the forwarder) serving."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Browser

from tests.daemon import TRAINQ, Daemon
from tests.ui.support import COOKIE_NAME, Forwarder, fetch, open_page

pytestmark = pytest.mark.ui


def test_requests_without_the_token_are_refused(box: Daemon, ui: Forwarder) -> None:
    job = box.submit({"command": ["true"]})
    for path in ("/ui/", "/v1/jobs", f"/v1/jobs/{job['id']}", "/v1/events"):
        assert fetch(ui.origin + path)[0] == 403, path
        assert fetch(f"{ui.origin}{path}?token=guess")[0] == 403, path
        cookie = {"Cookie": f"{COOKIE_NAME}=guess"}
        assert fetch(ui.origin + path, cookie)[0] == 403, path
    # The right one still opens the pages, and trainqd kept serving its socket.
    status, _ = fetch(ui.page_url())
    assert status == 303
    status, body = fetch(ui.origin + "/v1/gpus", {"Cookie": f"{COOKIE_NAME}={ui.token}"})
    assert status == 200
    assert '"backend":"fake"' in body
    assert box.get("/v1/health").status_code == 200


def test_the_token_becomes_a_cookie_and_leaves_the_address(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    page = open_page(browser, ui.page_url("#/box"))
    page.wait_for_selector("#gpus")
    assert "token" not in page.url
    cookies = page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        (COOKIE_NAME, True, "Strict")
    ]
    # A browser that never had the URL gets the refusal, not the page.
    stranger = open_page(browser, ui.origin + "/ui/")
    assert "no token" in stranger.locator("body").inner_text()


def test_it_relays_reads_only(box: Daemon, ui: Forwarder) -> None:
    cookie = {"Cookie": f"{COOKIE_NAME}={ui.token}"}
    request = urllib.request.Request(  # noqa: S310 (http on loopback)
        ui.origin + "/v1/jobs",
        data=b'{"command": ["true"]}',
        headers={**cookie, "Content-Type": "application/json"},
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
