"""Each command end to end against the API stub on a real socket: what it asks trainqd,
what it prints, and its exit status. Ctrl-C and a closed pipe use a real `trainq` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.apistub import ApiStub, Reply, Seen
from tests.helpers import wait_for

from trainq.cli import main
from trainq.client import following

RUNNING_JOB: dict[str, Any] = {
    "id": 5,
    "name": "resnet-a",
    "state": "RUNNING",
    "priority": 0,
    "owner": {"uid": 0, "user": "root"},
    "runtime": "subprocess",
    "gpus": [0],
    "job_dir": "/var/lib/trainq/jobs/5/ml",
    "attempts": [],
    "created_at": "2026-05-01T12:00:00Z",
    "started_at": "2026-05-01T12:00:01Z",
    "spec": {"gpus": 1, "command": ["python3", "train.py"]},
}


def ended(state: str, **reasons: str) -> dict[str, Any]:
    return {**RUNNING_JOB, "state": state, "ended_at": "2026-05-01T12:03:01Z", **reasons}


def events(*states: str, first_id: int = 1) -> list[bytes]:
    return [
        json.dumps(
            {"id": first_id + i, "job_id": 5, "time": "2026-05-01T12:00:00Z", "to_state": s}
        ).encode()
        + b"\n"
        for i, s in enumerate(states)
    ]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINQ_DEBUG", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def trainq(stub: ApiStub, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--socket", stub.socket_path, *argv])
    out, err = capsys.readouterr()
    return status, out, err


# --- submit ---


def test_submit_prints_the_id_and_sends_the_merged_spec(
    stub: ApiStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub.on("POST", "/v1/jobs", Reply(201, {**RUNNING_JOB, "state": "PENDING"}))
    (tmp_path / "job.toml").write_text(
        'name = "from-file"\ngpus = 4\n[hyperparameters]\nlr = "0.1"\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/opt/conda/bin:/usr/bin")
    argv = [
        "submit",
        "-f",
        "job.toml",
        "--gpus",
        "1",
        "--hp",
        "epochs=3",
        "--channel",
        "train=data",
    ]
    status, out, err = trainq(stub, capsys, *argv, "--", "python3", "train.py", "--lr", "1")
    assert (status, out, err) == (0, "5\n", "")
    assert stub.seen[0].body == {
        "name": "from-file",
        "gpus": 1,
        "hyperparameters": {"lr": "0.1", "epochs": "3"},
        "command": ["python3", "train.py", "--lr", "1"],
        "channels": {"train": {"source": f"{tmp_path}/data"}},
        "working_dir": str(tmp_path),
        "environment": {"PATH": "/opt/conda/bin:/usr/bin"},
    }


def test_submit_with_nothing_to_run(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = trainq(stub, capsys, "submit", "--gpus", "1")
    assert (status, out) == (2, "")
    assert err.startswith("trainq: nothing to run: put the job's command after `--` ")
    assert not stub.seen


def test_submit_json_prints_the_record_as_it_came(
    stub: ApiStub, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.on("POST", "/v1/jobs", Reply(201, {**RUNNING_JOB, "future_field": [1, 2]}))
    status, out, _ = trainq(stub, capsys, "submit", "--json", "--", "true")
    assert status == 0
    assert json.loads(out) == {**RUNNING_JOB, "future_field": [1, 2]}
    assert out.startswith('{\n  "id": 5,\n')


def test_a_rejected_spec_is_the_daemons_one_line(
    stub: ApiStub, capsys: pytest.CaptureFixture[str]
) -> None:
    message = "spec: gpus: this host has 2 GPUs, the job asks for 4"
    stub.on("POST", "/v1/jobs", Reply(400, {"error": {"code": "invalid_spec", "message": message}}))
    assert trainq(stub, capsys, "submit", "--gpus", "4", "--", "true") == (
        2,
        "",
        f"trainq: {message}\n",
    )


@pytest.mark.parametrize(
    ("final", "status", "line"),
    [
        (ended("COMPLETED"), 0, "trainq: job 5 COMPLETED\n"),
        (ended("FAILED", failure_reason="Traceback (most recent call last):\nKeyError: 'x'"), 1,
         "trainq: job 5 FAILED: KeyError: 'x'...\n"),
        (ended("STOPPED", stop_reason="time limit (60 s) reached"), 3,
         "trainq: job 5 STOPPED: time limit (60 s) reached\n"),
    ],
)  # fmt: skip
def test_submit_wait_exits_as_the_job_ended(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], final: dict[str, Any], status: int, line: str
) -> None:
    stub.on("POST", "/v1/jobs", Reply(201, {**RUNNING_JOB, "state": "PENDING"}))
    stub.on("GET", "/v1/events", Reply(chunks=events("PENDING", "RUNNING", final["state"])))
    stub.on("GET", "/v1/jobs/5", Reply(body=final))
    assert trainq(stub, capsys, "submit", "--wait", "--", "true") == (status, "5\n", line)
    assert stub.requests_to("/v1/events")[0].query == {"job": "5", "since": "0"}


# --- wait ---


def test_wait_for_a_job_that_already_ended(
    stub: ApiStub, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.on("GET", "/v1/jobs/5", Reply(body=ended("FAILED", failure_reason="exit code 2")))
    assert trainq(stub, capsys, "wait", "5") == (1, "", "trainq: job 5 FAILED: exit code 2\n")
    assert not stub.requests_to("/v1/events")


def test_wait_outlasts_a_daemon_restart(
    stub: ApiStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(following, "RECONNECT_INTERVAL", 0.01)
    streams = iter([events("RUNNING", first_id=7), [b"\n", *events("COMPLETED", first_id=9)]])
    answers = iter([RUNNING_JOB, ended("COMPLETED")])
    stub.on("GET", "/v1/events", lambda _seen: Reply(chunks=next(streams)))
    stub.on("GET", "/v1/jobs/5", lambda _seen: Reply(body=next(answers)))
    status, out, err = trainq(stub, capsys, "wait", "5")
    assert (status, out) == (0, "")
    assert err == (
        "trainq: trainqd closed the events stream; still waiting for job 5 (reconnecting)\n"
        "trainq: job 5 COMPLETED\n"
    )
    assert [seen.query["since"] for seen in stub.requests_to("/v1/events")] == ["0", "7"]


def test_wait_gives_up_on_a_daemon_that_stays_away(
    stub: ApiStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(following, "RECONNECT_INTERVAL", 0.01)
    monkeypatch.setattr(following, "RECONNECT_SECONDS", 0.1)
    stub.on("GET", "/v1/jobs/5", Reply(body=RUNNING_JOB))
    stub.on("GET", "/v1/events", lambda _seen: Reply(chunks=[]))  # accepted, then closed
    status, out, err = trainq(stub, capsys, "wait", "5")
    assert (status, out) == (7, "")
    assert err == (
        "trainq: trainqd closed the events stream; still waiting for job 5 (reconnecting)\n"
        "trainq: gave up waiting for job 5 after 0.1 s without trainqd; "
        "last error: trainqd closed the events stream\n"
    )
    assert len(stub.requests_to("/v1/events")) > 2


def test_wait_for_an_unknown_job(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.on(
        "GET", "/v1/jobs/99", Reply(404, {"error": {"code": "not_found", "message": "no job 99"}})
    )
    assert trainq(stub, capsys, "wait", "99") == (4, "", "trainq: no job 99\n")


# --- stop, ls, show, logs, gpus, health ---


def test_stop(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.on("POST", "/v1/jobs/5/stop", Reply(202, {**RUNNING_JOB, "state": "STOPPING"}))
    assert trainq(stub, capsys, "stop", "5", "--grace", "1m") == (0, "STOPPING\n", "")
    assert trainq(stub, capsys, "stop", "5") == (0, "STOPPING\n", "")
    assert [seen.body for seen in stub.seen] == [{"grace_seconds": 60.0}, {}]


def test_stop_someone_elses_job(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    message = "job 5 belongs to bob; only bob or an admin may stop it"
    stub.on(
        "POST", "/v1/jobs/5/stop", Reply(403, {"error": {"code": "forbidden", "message": message}})
    )
    assert trainq(stub, capsys, "stop", "5") == (5, "", f"trainq: {message}\n")


def test_ls(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.on(
        "GET",
        "/v1/jobs",
        Reply(body={"jobs": [RUNNING_JOB, ended("FAILED", failure_reason="boom")]}),
    )
    status, out, err = trainq(stub, capsys, "ls", "--user", "root")
    assert (status, err) == (0, "")
    assert [line.split()[:3] for line in out.splitlines()] == [
        ["ID", "NAME", "STATE"], ["5", "resnet-a", "RUNNING"], ["5", "resnet-a", "FAILED"]
    ]  # fmt: skip
    assert stub.seen[0].query == {"all": "false", "user": "root"}
    trainq(stub, capsys, "ls", "--state", "failed")
    assert stub.seen[1].query == {"all": "true", "state": "FAILED"}  # an ended state implies --all


def test_ls_json_and_nothing_to_list(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.on("GET", "/v1/jobs", Reply(body={"jobs": []}))
    assert trainq(stub, capsys, "ls", "--json") == (0, '{\n  "jobs": []\n}\n', "")
    assert trainq(stub, capsys, "ls") == (
        0, "", "trainq: no jobs (`trainq ls --all` lists ended ones too)\n"
    )  # fmt: skip


def test_show(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.on("GET", "/v1/jobs/5", Reply(body=RUNNING_JOB))
    status, out, _ = trainq(stub, capsys, "show", "5")
    assert status == 0
    assert out.startswith("Job 5  resnet-a\n")
    assert "/var/lib/trainq/jobs/5/ml" in out
    assert json.loads(trainq(stub, capsys, "show", "5", "--json")[1]) == RUNNING_JOB
    everything = trainq(stub, capsys, "show", "5", "--all-fields")[1]
    assert len(everything.splitlines()) > len(out.splitlines())


def test_logs_streams_bytes(stub: ApiStub, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    output = [b"epoch 1 loss 0.9\n", b"\xff\xfe not utf-8\n", b"epoch 2"]
    stub.on("GET", "/v1/jobs/5/logs", Reply(chunks=iter(output), content_type="text/plain"))
    status = main(["--socket", stub.socket_path, "logs", "5", "-f", "--stderr", "--attempt", "2"])
    assert (status, capsysbinary.readouterr().out) == (0, b"".join(output))
    query = {"follow": "true", "stream": "stderr", "attempt": "2", "tail": "10"}  # -f: the end
    assert stub.seen[0].query == query


def test_gpus_and_health(stub: ApiStub, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = {"index": 0, "uuid": "GPU-a", "name": "Fake", "memory_total_mib": 1024, "available": True}
    stub.on("GET", "/v1/gpus", Reply(body={"backend": "fake", "gpus": [gpu]}))
    health = {"status": "ok", "version": "0.1.0", "pid": 1, "uid": 0, "gpu_backend": "fake",
              "started_at": "2026-05-01T12:00:00Z", "gpus": 1, "cpu_slots": 2,
              "jobs": {}}  # fmt: skip
    stub.on("GET", "/v1/health", Reply(body=health))
    status, out, _ = trainq(stub, capsys, "gpus")
    assert (status, out.splitlines()[1].split()[:3]) == (0, ["0", "Fake", "GPU-a"])
    status, out, _ = trainq(stub, capsys, "health")
    assert status == 0
    assert out.startswith("trainqd 0.1.0 ok, up ")
    assert out.endswith("; 1 GPUs (fake), 2 CPU slots; jobs: none\n")


def test_an_unexpected_answer_is_one_line_not_a_traceback(
    stub: ApiStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.on("POST", "/v1/jobs", Reply(201, ["not", "a", "record"]))
    status, out, err = trainq(stub, capsys, "submit", "--", "true")
    assert (status, out) == (1, "")
    assert err.startswith("trainq: unexpected error: TypeError: ")
    assert err.endswith(" (run with TRAINQ_DEBUG=1 for a traceback)\n")
    assert err.count("\n") == 1
    monkeypatch.setenv("TRAINQ_DEBUG", "1")
    assert "Traceback (most recent call last)" in trainq(stub, capsys, "submit", "--", "true")[2]


# --- real processes: Ctrl-C and a reader that goes away ---


# `python -m trainq`, with Ctrl-C as at a terminal even where these tests run with SIGINT
# ignored (a shell's background job), which the child would inherit and keep.
INTERRUPTIBLE_TRAINQ = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'trainq'; runpy.run_module('trainq', run_name='__main__', alter_sys=True)"
)


def trainq_process(stub: ApiStub, *argv: str, **popen: Any) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-c", INTERRUPTIBLE_TRAINQ, "--socket", stub.socket_path, *argv]
    return subprocess.Popen(command, stderr=subprocess.PIPE, **popen)


def test_ctrl_c_while_waiting_leaves_the_job_running(stub: ApiStub) -> None:
    hang_up = threading.Event()

    def live_events(_seen: Seen) -> Reply:
        def chunks() -> Iterator[bytes]:
            yield from events("RUNNING")
            hang_up.wait(10)

        return Reply(chunks=chunks())

    stub.on("GET", "/v1/jobs/5", Reply(body={**RUNNING_JOB, "state": "PENDING"}))
    stub.on("GET", "/v1/events", live_events)
    process = trainq_process(stub, "wait", "5", stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: stub.requests_to("/v1/events"), what="trainq to follow the events")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    finally:
        hang_up.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert err.decode() in {
        # whether the RUNNING event had been read when the signal came
        "trainq: stopped waiting; job 5 (RUNNING) keeps running (`trainq stop 5` stops it)\n",
        "trainq: stopped waiting; job 5 (PENDING) keeps running (`trainq stop 5` stops it)\n",
    }


def test_a_closed_pipe_ends_quietly(stub: ApiStub) -> None:
    many = [{**RUNNING_JOB, "id": i} for i in range(1, 2000)]
    stub.on("GET", "/v1/jobs", Reply(body={"jobs": many}))
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -1` after its line
    try:
        process = trainq_process(stub, "ls", "--json", stdout=write_end)
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=20)
    assert (process.returncode, err) == (141, b"")
