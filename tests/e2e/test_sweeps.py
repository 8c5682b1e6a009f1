"""Sweeps with real processes: `trainq submit --sweep` queues a grid as one group in one
request; `ls`, `stop` and `wait --group` act on the group; the list form of POST /v1/jobs
refuses a bad list whole, with one line naming what is wrong; the Python library does the
same with `submit_many`, `list(group=...)`, `stop_group` and `wait_group`."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import TRAINERS, Daemon, running_daemon
from trainq import Client, InvalidRequest, InvalidSpec, NotFound
from trainq.core.errors import ExitCode

SLEEPER = [sys.executable, str(TRAINERS / "sleeper.py"), "60"]
# Exits with its hyperparameter `code`: one point of a sweep can fail while the others pass.
EXIT_WITH_HP = [
    sys.executable,
    "-c",
    "import json, os, sys; sys.exit(int(json.loads(os.environ['SM_HPS'])['code']))",
]


WIDE = ",".join(str(n) for n in range(101))  # 101 values


@pytest.fixture
def capped() -> Iterator[Daemon]:
    """A daemon that takes at most 5 jobs in one request."""
    with running_daemon(gpus="fake:2", config={"max_jobs_per_submit": 5}) as d:
        yield d


def total_jobs(daemon: Daemon) -> int:
    body = daemon.get("/v1/jobs?all=true&limit=1").json()
    return int(body["total"])


def refused(daemon: Daemon, body: object, code: str) -> str:
    response = daemon.post("/v1/jobs", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert "\n" not in error["message"]
    return str(error["message"])


def test_a_bad_list_is_refused_whole_with_one_line(capped: Daemon) -> None:
    good = {"command": ["true"]}
    assert "empty" in refused(capped, [], "invalid_request")
    too_many = refused(capped, [good] * 6, "invalid_request")
    assert too_many.startswith("6 jobs in one request; at most 5"), too_many
    assert refused(capped, [good, {"gpus": "x", "command": ["true"]}, good], "invalid_spec") == (
        "jobs[1]: gpus: Input should be a valid integer"
    )
    assert refused(capped, [good, good, 7], "invalid_spec") == (
        "jobs[2]: a spec is a JSON object, not a number"
    )
    # Admission (what the host can run) names the index too.
    assert refused(capped, [good, {"command": ["true"], "gpus": 3}], "invalid_spec") == (
        "jobs[1]: the job asks for 3 GPUs but this host has 2"
    )
    assert refused(capped, [{"command": ["true"], "working_dir": "/nonexistent"}], "invalid_spec")
    huge = capped.post(
        "/v1/jobs",
        content=b"[" + b" " * (16 << 20) + b"]",
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413, huge.text
    assert total_jobs(capped) == 0  # nothing of any of them was queued
    status = capped.post("/v1/jobs", json=[good] * 5)
    assert status.status_code == 201, status.text
    answer = status.json()
    ids = [job["id"] for job in answer["jobs"]]
    assert ids == list(range(1, 6))
    assert answer["group_id"] == 1
    assert {job["group_id"] for job in answer["jobs"]} == {1}


def test_sweep_syntax_errors_are_one_line(shared_daemon: Daemon, tmp_path: Path) -> None:
    for flags, wanted in [
        (["--sweep", "lr="], "no values after '='"),
        (["--sweep", "=1"], "missing the hyperparameter's name"),
        (["--sweep", "lr"], "expected KEY=V1,V2"),
        (["--sweep", "lr=1,,2"], "an empty value"),
        (["--sweep", "lr=1,1"], "value '1' is given twice"),
        (["--sweep", "lr=1", "--sweep", "lr=2"], "--sweep lr is given twice"),
        (
            ["--sweep", f"a={WIDE}", "--sweep", f"b={WIDE}"],
            "10201 jobs in one request; at most 10000",
        ),
        (["--sweep", f"a={WIDE}", "--sweep", f"b={WIDE}", "--sweep", f"c={WIDE}"], "1,030,301"),
    ]:
        done = shared_daemon.cli("submit", *flags, "--", "true", cwd=tmp_path)
        assert done.returncode == ExitCode.USAGE, (flags, done)
        assert done.stderr.count("\n") == 1, done.stderr
        assert wanted in done.stderr, (flags, done.stderr)
    assert shared_daemon.cli("ls", "--all", "--json").stdout.count('"id"') == 0


def test_submit_sweep_then_ls_stop_and_wait_by_group(daemon: Daemon, tmp_path: Path) -> None:
    alone = daemon.submit({"command": SLEEPER, "gpus": 4})["id"]  # holds every GPU
    done = daemon.cli(
        "submit", "--name", "mn", "--gpus", "1", "--hp", "lr=9", "--hp", "seed=1",
        "--sweep", "lr=0.1,0.01,0.001", "--sweep", "batch=32,64", "--json",
        "--", *SLEEPER, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    group = answer["group_id"]
    jobs = answer["jobs"]
    assert [job["id"] for job in jobs] == list(range(group, group + 6))
    assert [job["name"] for job in jobs] == [f"mn-{n}" for n in range(1, 7)]
    points = [job["spec"]["hyperparameters"] for job in jobs]
    assert points[0] == {"lr": "0.1", "batch": "32", "seed": "1"}  # over the spec's own
    assert points[5] == {"lr": "0.001", "batch": "64", "seed": "1"}
    assert {job["state"] for job in jobs} == {"PENDING"}

    listed = daemon.cli("ls", "--group", str(group), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in json.loads(listed.stdout)["jobs"]] == [j["id"] for j in jobs]
    table = daemon.cli("ls", "--group", str(group))
    assert "mn-6" in table.stdout
    assert f"\n{alone} " not in table.stdout

    stopped = daemon.cli("stop", "--group", str(group))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped 6 jobs of group {group}\n"
    waited = daemon.cli("wait", "--group", str(group))
    assert waited.returncode == ExitCode.STOPPED, waited
    assert f"group {group}: 6 STOPPED" in waited.stderr
    assert daemon.job(alone)["state"] == "RUNNING"  # not of the group

    missing = daemon.cli("wait", "--group", "9999")
    assert missing.returncode == ExitCode.NOT_FOUND, missing
    assert missing.stderr == "trainq: no group 9999\n"
    assert daemon.cli("stop", "--group", "9999").returncode == ExitCode.NOT_FOUND
    neither = daemon.cli("stop")
    assert neither.returncode == ExitCode.USAGE
    assert "JOB... (or filters: --group" in neither.stderr


def test_wait_group_exits_zero_only_if_every_job_completed(daemon: Daemon, tmp_path: Path) -> None:
    passed = daemon.cli(
        "submit", "--sweep", "code=0", "--sweep", "x=1,2,3", "--wait", "--", *EXIT_WITH_HP,
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert passed.returncode == ExitCode.OK, passed
    assert "3 COMPLETED" in passed.stderr
    mixed = daemon.cli(
        "submit", "--sweep", "code=0,3", "--max-retries", "0", "--", *EXIT_WITH_HP, cwd=tmp_path
    )
    group = int(mixed.stdout.split()[0])
    waited = daemon.cli("wait", "--group", str(group), timeout=60)
    assert waited.returncode == ExitCode.FAILED, waited
    assert "1 COMPLETED, 1 FAILED" in waited.stderr


def test_the_python_library_submits_and_waits_for_a_group(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tq = Client(daemon.socket)
    group = tq.submit_many(
        [{"hyperparameters": {"code": code}} for code in ("0", "0")], command=EXIT_WITH_HP
    )
    assert [job.group_id for job in group.jobs] == [group.group_id] * 2
    assert [job.id for job in tq.list(include_ended=True, group=group.group_id)] == [
        job.id for job in group.jobs
    ]
    ended = tq.wait_group(group.group_id)
    assert [job.state for job in ended] == ["COMPLETED", "COMPLETED"]
    sleepers = tq.submit_many([{"command": SLEEPER}] * 3)
    result = tq.stop_group(sleepers.group_id, grace_seconds=1)
    assert sorted(result.stopped) == [job.id for job in sleepers.jobs]
    assert {job.state for job in tq.wait_group(sleepers.group_id)} == {"STOPPED"}
    with pytest.raises(InvalidRequest, match="empty"):
        tq.submit_many([])
    with pytest.raises(InvalidSpec, match=r"^jobs\[1\]: "):
        tq.submit_many([{"command": ["true"]}, {"command": ["true"], "gpus": -1}])
    with pytest.raises(NotFound, match="no group 9999"):
        tq.stop_group(9999)


def test_a_sweep_of_ten_thousand_is_one_request(daemon: Daemon, tmp_path: Path) -> None:
    values = ",".join(str(n) for n in range(100))
    done = daemon.cli(
        "submit", "--gpus", "4", "--sweep", f"a={values}", "--sweep", f"b={values}",
        "--", *SLEEPER, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ids = [int(line) for line in done.stdout.split()]
    assert ids == list(range(1, 10_001))
    assert done.stderr == "trainq: 10000 jobs submitted as group 1\n"
    listed = daemon.cli("ls", "--group", "1", "--json")
    assert json.loads(listed.stdout)["total"] == 10_000
    stopped = daemon.cli("stop", "--group", "1", "--grace", "0")
    assert stopped.stdout == "stopped 10000 jobs of group 1\n", stopped.stderr


def test_one_large_body_at_a_time_per_user(shared_daemon: Daemon) -> None:
    """A list may be megabytes; a user sends one such body at a time (the others get a
    `busy` 503, which the client retries), so what one user makes trainqd hold is bounded."""
    body = json.dumps([{"command": ["true"], "gpus": 9}] * 100_000).encode()  # 3.2 MB
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    with socket.socket(socket.AF_UNIX) as first, socket.socket(socket.AF_UNIX) as second:
        first.connect(str(shared_daemon.socket))
        # 2 MiB, not the whole: once sendall returns, trainqd has read all but what the
        # socket buffers (a few hundred KiB), so past the usual 1 MiB limit.
        first.sendall(head + body[: 2 << 20])
        second.connect(str(shared_daemon.socket))
        second.sendall(head + body)
        answer = second.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b'"code":"busy"' in answer
    # Once the first is gone, a large body goes through (refused for its content alone).
    status = shared_daemon.post(
        "/v1/jobs", content=body, headers={"content-type": "application/json"}
    )
    assert status.status_code == 400, status.text
    assert "jobs in one request" in status.json()["error"]["message"]
