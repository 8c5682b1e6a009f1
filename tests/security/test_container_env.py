"""A container job's environment holds the job's variables and trainq's, nothing of
trainqd's own, and none of its values is ever on a command line (docs/security.md,
"Environment").

The attacks: a hyperparameter name with a line break, which would put a bare
`REGISTRY_TOKEN` line in the --env-file (the engine fills such a line from its own
environment, trainqd's); and values that do not fit an --env-file line, which went on the
engine's command line, where every local user reads them in `ps`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.accounts import Accounts, User
from tests.support.containers import Engine, attempt_log, container_job, engine_daemon, ml_path
from tests.support.daemon import Daemon
from tests.support.users import http_as, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers

TOKEN = "registry-secret-7c2a"
PROXY_SECRET = "proxy-secret-51be"
MARKER = "argv-marker-e03d"


def refused_in_one_line(daemon: Daemon, user: User, spec: dict[str, object]) -> str:
    status, answer = http_as(daemon, user, "POST", "/v1/jobs", spec)
    assert status == 400, answer
    message = str(answer["error"]["message"])
    assert "\n" not in message, message
    return message


def test_trainqds_environment_never_reaches_a_container(
    engine: Engine, submitter: User, accounts: Accounts
) -> None:
    secrets = {
        "REGISTRY_TOKEN": TOKEN,
        "HTTPS_PROXY": f"http://trainq:{PROXY_SECRET}@127.0.0.1:9",
    }
    with engine_daemon(engine, {**engine.env, **secrets}, "podman") as daemon:
        injected = {"x\nREGISTRY_TOKEN": "1"}
        message = refused_in_one_line(
            daemon, submitter, container_job("contract_dump.py", hyperparameters=injected)
        )
        assert "control character" in message, message
        assert daemon.get("/v1/jobs?all=true").json()["jobs"] == []

        spec = container_job("contract_dump.py", hyperparameters={"lr": "0.1"})
        status, job = http_as(daemon, submitter, "POST", "/v1/jobs", spec)
        assert status == 201, job
        done = daemon.wait_state(job["id"], timeout=60)
        assert done["state"] == "COMPLETED", attempt_log(daemon, job["id"])
        report = json.loads(
            ml_path(daemon, job["id"], "output", "data", "contract.json").read_text()
        )
        env = report["env"]
        assert "REGISTRY_TOKEN" not in env
        leaked = [k for k, v in env.items() if TOKEN in v or PROXY_SECRET in v]
        assert leaked == [], leaked
        assert env["SM_HP_LR"] == "0.1"
        assert trainq_as(daemon, accounts.bob, "ls").returncode == 0


def command_lines_holding(needle: bytes) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]!r}")
    return found


def test_no_value_goes_on_a_command_line(
    podman_daemon: Daemon, submitter: User, accounts: Accounts
) -> None:
    # A value of the job's own that no --env-file line can hold: refused, not put on argv.
    message = refused_in_one_line(
        podman_daemon,
        submitter,
        container_job("exit_with.py", "0", environment={"API_KEY": f"first\n{MARKER}"}),
    )
    assert "API_KEY" in message, message

    # trainq's own variables that no line can hold (SM_TRAINING_ENV over 64 KiB with these
    # hyperparameters; SM_HP_NOTE with a line break) reach the container all the same, and
    # no process shows them on its command line while it runs.
    hyperparameters = {f"p{n:02d}": MARKER + chr(ord("a") + n) * 2480 for n in range(13)}
    hyperparameters["note"] = f"two\nlines {MARKER}"
    spec = container_job("until_released.py", "/opt/ml/checkpoints/release",
                         hyperparameters=hyperparameters)  # fmt: skip
    status, job = http_as(podman_daemon, submitter, "POST", "/v1/jobs", spec)
    assert status == 201, job
    pid_file = ml_path(podman_daemon, job["id"], "output", "data", "pid")
    wait_for(pid_file.exists, timeout=60, what="the trainer to start")
    assert command_lines_holding(MARKER.encode()) == []
    assert trainq_as(podman_daemon, accounts.bob, "ls").returncode == 0
    ml_path(podman_daemon, job["id"], "checkpoints", "release").touch()
    done = podman_daemon.wait_state(job["id"], timeout=60)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job["id"])
