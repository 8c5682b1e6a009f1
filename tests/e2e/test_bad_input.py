"""Bad input gets one clear line and a non-zero exit, and loses nothing (issue: core, item 7)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import TRAINQ, Daemon, running_daemon


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["submit", "--gpus", "9", "--", "true"], 2, "asks for 9 GPUs but this host has 4"),
        (["submit", "--gpus", "lots", "--", "true"], 2, "--gpus"),
        (["submit", "--gpus", "-1", "--", "true"], 2, "gpus"),
        (
            ["submit", "--channel", "train=/no/such/dir", "--", "true"],
            2,
            "/no/such/dir does not exist",
        ),
        (["submit", "--channel", "a/b=/tmp", "--", "true"], 2, "channel name 'a/b'"),
        (["submit", "--channel", "..=/tmp", "--", "true"], 2, "'..'"),
        (["submit", "--name", "../x", "--", "true"], 2, "job name"),
        (["submit", "--channel", "train", "--", "true"], 2, "NAME=PATH"),
        (["submit", "--hp", "novalue", "--", "true"], 2, "expected KEY=VALUE"),
        (["submit", "--bogus", "--", "true"], 2, "--bogus"),
        (["submit"], 2, "--"),
        (["show", "999"], 4, "no job 999"),
        (["stop", "999"], 4, "no job 999"),
        (["show", "abc"], 2, "abc"),
        (["frobnicate"], 2, "frobnicate"),
    ],
)
def test_cli_refusals(
    shared_daemon: Daemon, tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    result = shared_daemon.cli(*args, cwd=tmp_path)
    assert result.returncode == code, result
    assert says in one_line(result)
    assert result.stdout == ""


def test_malformed_spec_files(daemon: Daemon, tmp_path: Path) -> None:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('name = "x"\ngpus = \n')
    result = daemon.cli("submit", "-f", str(bad_toml))
    assert result.returncode == 2
    assert "bad.toml" in one_line(result)
    unknown_key = tmp_path / "spec.toml"
    unknown_key.write_text('command = ["true"]\ngpu = 2\n')
    result = daemon.cli("submit", "-f", str(unknown_key))
    assert result.returncode == 2
    assert "gpu: unknown key" in one_line(result)
    misspelt_command = tmp_path / "typo.toml"
    misspelt_command.write_text('comand = ["true"]\ngpus = 1\n')
    result = daemon.cli("submit", "-f", str(misspelt_command))
    assert result.returncode == 2
    assert one_line(result) == "trainq: spec: comand: unknown key"
    missing = daemon.cli("submit", "-f", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2
    assert "nope.toml" in one_line(missing)
    # Nothing of these reached the queue.
    assert daemon.get("/v1/jobs", params={"all": "true"}).json()["jobs"] == []


def test_a_daemon_that_is_not_running(tmp_path: Path) -> None:
    result = subprocess.run(
        [TRAINQ, "--socket", str(tmp_path / "none.sock"), "ls"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 7
    line = one_line(result)
    assert "cannot reach trainqd" in line
    assert "trainqd" in line.split("Start it with", 1)[1]


def test_malformed_requests_get_4xx_and_the_daemon_goes_on(daemon: Daemon) -> None:
    bad_json = daemon.post(
        "/v1/jobs", content=b'{"command": [', headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["code"] == "invalid_request"
    wrong_types = daemon.post("/v1/jobs", json={"command": "true", "gpus": "two"})
    assert wrong_types.status_code == 400
    assert wrong_types.json()["error"]["code"] == "invalid_spec"
    huge = daemon.post(
        "/v1/jobs",
        content=b"{" + b" " * (2 << 20) + b"}",
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413
    unknown = daemon.get("/v1/nothing")
    assert unknown.status_code == 404
    wrong_method = daemon.get("/v1/jobs/1/stop")
    assert wrong_method.status_code == 405
    bad_stop = daemon.post("/v1/jobs/1/stop", json={"grace_seconds": -1})
    assert bad_stop.status_code in (400, 404)
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(daemon.socket))
        raw.sendall(b"GARBAGE\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")
    # Still serving, and nothing was queued.
    assert daemon.get("/v1/health").json()["status"] == "ok"
    assert daemon.submit({"command": [sys.executable, "-c", "pass"]})["id"] == 1


def test_a_gpu_job_on_a_host_without_gpus(tmp_path: Path) -> None:
    """The quick start's job on a trainqd started without `--gpus fake:4` on a host with
    no GPU: one line that says why, in good English."""
    with running_daemon(gpus="none") as daemon:
        result = daemon.cli("submit", "--gpus", "1", "--", "true", cwd=tmp_path)
    assert result.returncode == 2
    assert one_line(result) == (
        "trainq: the job asks for 1 GPU but this host has none that trainq manages "
        "(GPU backend: none)"
    )
