"""The pages show a user what `trainq` shows them: through the forwarder each user starts,
trainqd sees that user (SO_PEERCRED of the forwarder), so another's hidden fields stay
hidden and another's log stays closed, and a user cannot use someone else's forwarder."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

import psutil
import pytest
from playwright.sync_api import Browser

from tests.daemon import Daemon
from tests.helpers import wait_for
from tests.multiuser.accounts import Accounts, User
from tests.multiuser.support import SYSTEM_PYTHON, submit_as
from tests.ui.support import TOKEN_HEADER, forwarder, screenshot, until

pytestmark = [pytest.mark.ui, pytest.mark.multiuser]


def as_user(user: User, daemon: Daemon, *limits: str) -> Any:
    """Starts the forwarder as `user`, under `prlimit` `limits` if any (`--nofile=N`)."""

    def start(argv: list[str]) -> subprocess.Popen[str]:
        if limits:
            argv = ["prlimit", *limits, "--", *argv]
        return user.popen(argv, stdout=subprocess.PIPE, text=True, env=daemon.env, cwd="/")

    return start


def test_another_users_hidden_fields_stay_hidden_in_the_pages(
    workstation: Daemon, accounts: Accounts, browser: Browser
) -> None:
    secret = f"hf_{uuid.uuid4().hex}"
    spec = {
        "command": ["sh", "-c", "echo log line $HF_TOKEN"],
        "environment": {"HF_TOKEN": secret},
        "hyperparameters": {"lr": "0.25"},
    }
    job = submit_as(workstation, accounts.alice, spec)
    workstation.wait_state(job["id"], "COMPLETED")
    route = f"#/job/{job['id']}"

    with forwarder(workstation, as_user(accounts.alice, workstation)) as alices:
        page = alices.open(browser, route)
        until(lambda: secret in page.locator("#log").inner_text(), "alice's own log")
        assert secret in page.locator("#spec").inner_text()  # she sees her job whole

    with forwarder(workstation, as_user(accounts.bob, workstation)) as bobs:
        page = bobs.open(browser, route)
        until(lambda: page.locator("#log").get_attribute("data-refused") == "403", "refusal")
        until(lambda: "completed" in page.locator("#states").inner_text(), "the states")
        # Her metrics are hers too: a short line, not an error, and the page goes on.
        refused = page.locator("#job-metrics[data-refused='403']")
        until(lambda: refused.count() == 1, "the metrics refused")
        assert refused.inner_text() == "Its metrics are not yours to see."
        assert workstation.get(f"/v1/jobs/{job['id']}/metrics").status_code == 200
        shown = page.locator("#spec").inner_text()
        assert "env HF_TOKEN\n<hidden>" in shown
        assert "0.25" not in shown
        assert secret not in page.content()
        screenshot(page, "job-seen-by-another-user")


_KNOCK = """
import http.client, sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], headers=dict(h.split(": ", 1) for h in sys.argv[2:]))
try:
    urllib.request.urlopen(request, timeout=10)
    print(200)
except urllib.error.HTTPError as exc:
    print(exc.code)
except (urllib.error.URLError, http.client.RemoteDisconnected, ConnectionError):
    print("closed")
"""

# A stranger wearing the forwarder out: more idle connections than it may have descriptors.
_FLOOD = """
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(int(sys.argv[2])):
    try:
        held.append(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5))
    except OSError:
        pass
print(len(held), flush=True)
sys.stdin.read()
"""
FORWARDER_FILES = 1024  # a usual per-process limit of open files


def test_another_user_cannot_use_a_users_forwarder(workstation: Daemon, accounts: Accounts) -> None:
    """Not even the public files: the forwarder closes another user's connections unread."""
    with forwarder(workstation, as_user(accounts.alice, workstation)) as alices:
        for path in ("/v1/jobs", "/v1/gpus", "/v1/health", "/ui/", "/ui/app.js"):
            knock = accounts.bob.run([SYSTEM_PYTHON, "-I", "-c", _KNOCK, alices.origin + path])
            assert knock.stdout.strip() == "closed", (path, knock.stdout, knock.stderr)
            with_token = f"{TOKEN_HEADER}: {alices.token}"
            stolen = accounts.bob.run(
                [SYSTEM_PYTHON, "-I", "-c", _KNOCK, alices.origin + path, with_token]
            )
            assert stolen.stdout.strip() == "closed", (path, stolen.stdout, stolen.stderr)
        mine = accounts.alice.run(
            [SYSTEM_PYTHON, "-I", "-c", _KNOCK, alices.origin + "/v1/gpus", with_token]
        )
        assert mine.stdout.strip() == "200", mine.stderr
        assert workstation.get("/v1/health").status_code == 200


def test_another_users_flood_does_not_keep_the_owner_out(
    workstation: Daemon, accounts: Accounts
) -> None:
    limited = as_user(accounts.alice, workstation, f"--nofile={FORWARDER_FILES}")
    with forwarder(workstation, limited) as alices:
        port = alices.origin.rsplit(":", 1)[1]
        with accounts.bob.popen(
            [SYSTEM_PYTHON, "-I", "-c", _FLOOD, port, str(FORWARDER_FILES + 200)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as flood:
            assert int(flood.stdout.readline()) > FORWARDER_FILES  # he connected, and holds
            # None of his is kept open: closed as accepted, well before a request head's
            # timeout would have closed them.
            forwarder_process = psutil.Process(alices.proc.pid)
            wait_for(lambda: forwarder_process.num_fds() < 64, timeout=15, what="his closed")
            with_token = f"{TOKEN_HEADER}: {alices.token}"
            for path in ("/ui/", "/v1/gpus", "/v1/jobs"):
                mine = accounts.alice.run(
                    [SYSTEM_PYTHON, "-I", "-c", _KNOCK, alices.origin + path, with_token]
                )
                assert mine.stdout.strip() == "200", (path, mine.stderr)
            # Nothing of his reached trainqd as her: her own share of connections is whole.
            assert workstation.get("/v1/health").status_code == 200
            flood.stdin.close()


def test_the_timeline_shows_another_users_job_as_the_api_shows_it_to_the_reader(
    workstation: Daemon, accounts: Accounts, browser: Browser
) -> None:
    secret = f"hf_{uuid.uuid4().hex}"
    spec = {"command": ["sh", "-c", f"echo {secret}"], "gpus": 1, "name": "alices-run"}
    job = submit_as(workstation, accounts.alice, spec)
    workstation.wait_state(job["id"], "COMPLETED")
    [attempt] = workstation.job(job["id"])["attempts"]

    with forwarder(workstation, as_user(accounts.bob, workstation)) as bobs:
        page = bobs.open(browser, "#/queue")
        [gpu] = attempt["gpus"]
        link = page.locator(f"#timeline g[data-gpu='{gpu}'] g[data-job='{job['id']}'] a")
        until(lambda: link.count() == 1, "her bar on his timeline")
        label = link.get_attribute("aria-label") or ""
        who = accounts.alice.name
        assert label.startswith(f"job {job['id']} ({who}, alices-run) completed, attempt 1:")
        assert secret not in page.content()  # her command stays hers
        screenshot(page, "queue-timeline-seen-by-another-user")
    assert workstation.get("/v1/health").status_code == 200
