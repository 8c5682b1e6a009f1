"""A site that rebinds its own name to 127.0.0.1 reads nothing of trainq's.

`ssh -L 8080:/run/trainq/trainq.sock box` (README, "Web pages") forwards a laptop's port to
the socket as the user, without a token: any page the laptop's browser opens could name its
own host, let its DNS answer 127.0.0.1 and read http://its-host:8080/v1/jobs as the same
origin. Its requests carry its own name as Host; trainqd refuses every request whose Host is
not a local name, and `trainq ui` every one not for its own address. A real chromium, its
resolver told that rebind.example is 127.0.0.1, tries both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.support.daemon import Daemon
from tests.support.ui import CHROMIUM, CHROMIUM_ARGS, Forwarder, SocketForward, fetch

pytestmark = pytest.mark.ui

EVIL = "rebind.example"


@pytest.fixture(scope="module")
def rebinding_browser(browser: Browser) -> Iterator[Browser]:
    """A chromium whose resolver answers 127.0.0.1 for the attacker's name (started by the
    session's Playwright: one per thread)."""
    rules = f"--host-resolver-rules=MAP {EVIL} 127.0.0.1"
    launched = browser.browser_type.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, rules])
    try:
        yield launched
    finally:
        launched.close()


def test_a_rebound_page_reads_nothing_through_a_forwarded_socket(
    box: Daemon, forward: SocketForward, rebinding_browser: Browser
) -> None:
    job = box.submit({"command": ["true"], "name": "private-run"})
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        # The forward works for its user, as README says: the page and the API by name.
        assert page.goto(f"http://localhost:{forward.port}/ui/") is not None
        status, body = fetch(f"http://localhost:{forward.port}/v1/jobs/{job['id']}")
        assert status == 200
        assert "private-run" in body
        # The same port under the attacker's name: the page, and the API it would read.
        for path in ("/ui/", "/v1/jobs", f"/v1/jobs/{job['id']}", "/v1/gpus"):
            response = page.goto(f"http://{EVIL}:{forward.port}{path}")
            assert response is not None
            assert response.status == 403, path
            assert "private-run" not in page.content()
            assert "not a local name" in page.content(), path
    finally:
        context.close()
    assert box.get("/v1/health").status_code == 200  # and trainqd serves on


def test_a_rebound_page_reads_nothing_through_the_forwarder(
    box: Daemon, ui: Forwarder, rebinding_browser: Browser
) -> None:
    port = ui.origin.rsplit(":", 1)[1]
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        for path in ("/ui/", "/ui/app.js", "/v1/gpus"):
            response = page.goto(f"http://{EVIL}:{port}{path}")
            assert response is not None
            assert response.status == 403, path
            assert "not this forwarder's address" in page.content(), path
    finally:
        context.close()
    status, _ = fetch(ui.origin + "/v1/gpus", ui.headers())
    assert status == 200
