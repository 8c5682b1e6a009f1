"""A page of another site changes nothing through a forward of the socket.

`ssh -L 8080:/run/trainq/trainq.sock box` (README, "Web pages") makes http://localhost:8080
the user at trainqd. Any page the laptop's browser opens may send it a POST with no
preflight: a `no-cors` fetch whose body has no Content-Type, or a plain form. Its Host is
`localhost:8080`, a local name, so only where the request comes from tells it apart:
trainqd refuses a request that changes something when the browser says another origin sent
it. A real chromium opens the attacker's page, on another port of the loopback address.
"""

from __future__ import annotations

import http.server
import threading

import pytest
from playwright.sync_api import Browser

from tests.support.daemon import Daemon
from tests.support.ui import SocketForward

pytestmark = pytest.mark.ui

# The attacker's page: submit a job as whoever forwards the socket, and stop one of theirs.
ATTACK = """<!doctype html><body><script>
window.done = (async () => {
  const target = "http://localhost:%(port)d";
  const spec = JSON.stringify({command: ["touch", "/tmp/planted"], name: "planted"});
  await fetch(target + "/v1/jobs", {method: "POST", mode: "no-cors", body: new Blob([spec])});
  await fetch(target + "/v1/jobs/%(victim)d/stop", {method: "POST", mode: "no-cors"});
  return "sent";
})();
</script></body>"""


class AttackerSite:
    """A web server of the attacker's on 127.0.0.1, serving one page."""

    def __init__(self, page: str) -> None:
        body = page.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_of_another_site_cannot_submit_or_stop_through_a_forward(
    box: Daemon, forward: SocketForward, browser: Browser
) -> None:
    victim = box.submit({"command": ["sleep", "600"], "name": "victim"})
    site = AttackerSite(ATTACK % {"port": forward.port, "victim": victim["id"]})
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(site.url)
        assert page.evaluate("window.done") == "sent"
        jobs = box.get("/v1/jobs", params={"all": "1"}).json()["jobs"]
        assert [job["name"] for job in jobs] == ["victim"]  # nothing planted
        assert box.job(victim["id"])["state"] in {"PENDING", "RUNNING"}  # not stopped

        # The user's own page, same origin, still acts.
        page.goto(f"http://localhost:{forward.port}/ui/")
        stop = f"/v1/jobs/{victim['id']}/stop"
        status = page.evaluate(f'async () => (await fetch("{stop}", {{method: "POST"}})).status')
        assert status == 202
    finally:
        context.close()
        site.close()
    assert box.wait_state(victim["id"], timeout=30)["state"] == "STOPPED"
    assert box.get("/v1/health").status_code == 200  # and trainqd serves on
