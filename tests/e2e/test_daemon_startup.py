"""What trainqd refuses to start with, and how it says so: a bad configuration exits 78
(EX_CONFIG, which the systemd unit does not retry) and any other refusal exits 1, each with
exactly one line on stderr and no traceback. One daemon per state directory and per socket;
a socket left by a daemon that died is replaced, anything else at the socket's path is not.
The configuration file's keys apply, and flags override them."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import TRAINQD, Daemon, pids_alive, python_job, supervised
from tests.support.waiting import wait_for
from trainqd.main import EX_CONFIG

REFUSED = 1  # any start refused for another reason than the configuration


started = supervised


def trainqd(*args: str | Path, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run trainqd to its end. An empty configuration unless `args` name one (the last
    --config wins): a host's /etc/trainq/trainqd.toml must not take part."""
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    return subprocess.run(
        [TRAINQD, "--config", os.devnull, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def refusal(done: subprocess.CompletedProcess[str], status: int) -> str:
    """The one line a refused start printed, checked for everything else being right."""
    assert done.returncode == status, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("trainqd: "), done.stderr
    assert done.stderr.endswith("\n"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.removeprefix("trainqd: ").rstrip("\n")


def subdir(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir()
    return path


def paths(base: Path) -> list[str]:
    return ["--socket", str(base / "s"), "--state-dir", str(base / "state")]


# -- bad configurations -------------------------------------------------------------------

BAD_FILES = {
    "unknown key": ('colour = "blue"\n', "colour: unknown key"),
    "unknown table": ("[scheduler]\ncpu_slots = 2\n", "scheduler: unknown key"),
    "value out of range": ("cpu_slots = 0\n", "cpu_slots: Input should be greater than"),
    "value of the wrong type": ("socket_mode = 660\n", "socket_mode: Input should be a valid"),
    "not an octal mode": ('socket_mode = "0999"\n', "socket_mode: '0999' is not an octal mode"),
    "bad gpus spec": ('gpus = "fake:0"\n', "gpus: 'fake:0' is not one of auto, nvml"),
    "relative path": ('state_dir = "var/trainq"\n', "state_dir: var/trainq must be an absolute"),
    "unknown engine": ('default_engine = "lxc"\n', "default_engine: Input should be"),
    "malformed TOML": ("gpus = \n", "Invalid value (at line 1, column 8)"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_configuration_file_stops_trainqd_with_one_line(base: Path, case: str) -> None:
    text, problem = BAD_FILES[case]
    config = base / "trainqd.toml"
    config.write_text(text)
    line = refusal(trainqd(*paths(base), "--config", config), EX_CONFIG)
    assert line.startswith(f"{config}: {problem}"), line
    assert not (base / "state").exists()  # refused before touching anything


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--gpus", "tpu:2"], "command line: gpus: 'tpu:2' is not one of auto, nvml"),
        (["--cpu-slots", "0"], "command line: cpu_slots: Input should be greater than"),
    ],
)
def test_a_bad_flag_value_stops_trainqd_with_one_line(
    base: Path, flags: list[str], problem: str
) -> None:
    config = base / "trainqd.toml"
    config.write_text("")
    line = refusal(trainqd(*paths(base), "--config", config, *flags), EX_CONFIG)
    assert line.startswith(problem), line


def test_an_abbreviated_flag_is_refused_not_guessed(base: Path) -> None:
    """`--gpu` is a typo of `--gpus`, not a way to write it: argparse would take it."""
    done = subprocess.run(
        [TRAINQD, *paths(base), "--gpu", "fake:4"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert "unrecognized arguments: --gpu fake:4" in done.stderr
    assert not (base / "state").exists()


def test_a_missing_configuration_file_stops_trainqd(base: Path) -> None:
    missing = base / "nowhere.toml"
    assert refusal(trainqd(*paths(base), "--config", missing), EX_CONFIG) == (
        f"{missing}: no such file"
    )


def test_a_directory_given_as_the_configuration_file_stops_trainqd(base: Path) -> None:
    assert refusal(trainqd(*paths(base), "--config", base), EX_CONFIG) == f"{base}: is a directory"


@pytest.mark.parametrize("key", ["admin_group", "socket_group"])
def test_a_group_that_does_not_exist_is_a_configuration_error(base: Path, key: str) -> None:
    config = base / "trainqd.toml"
    config.write_text(f'{key} = "tq-no-such-group"\n')
    line = refusal(trainqd(*paths(base), "--gpus", "none", "--config", config), EX_CONFIG)
    assert key in line
    assert "tq-no-such-group" in line


def test_the_file_applies_and_flags_override_it(base: Path) -> None:
    daemon = Daemon(
        base, gpus="fake:3", config={"gpus": "fake:2", "cpu_slots": 3, "socket_mode": "0640"}
    )
    with started(daemon):
        health = daemon.get("/v1/health").json()
        assert (health["gpu_backend"], health["gpus"]) == ("fake", 3)  # --gpus wins
        assert health["cpu_slots"] == 3  # from the file
        assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o640


# -- one daemon per state directory and per socket ----------------------------------------


def test_a_second_daemon_on_the_same_state_dir_is_refused(base: Path) -> None:
    with started(Daemon(subdir(base, "first"))) as first:
        assert first.proc is not None
        rival = ["--socket", str(base / "other.sock"), "--state-dir", str(first.state_dir)]
        line = refusal(trainqd(*rival, "--gpus", "none", "--config", first.config_file), REFUSED)
        assert line == f"another trainqd (pid {first.proc.pid}) is already using {first.state_dir}"
        assert not (base / "other.sock").exists()
        assert first.get("/v1/health").status_code == 200


def test_a_socket_another_daemon_accepts_on_is_refused_and_left_alone(base: Path) -> None:
    with started(Daemon(base)) as first:
        assert first.proc is not None
        rival = ["--socket", str(first.socket), "--state-dir", str(base / "other-state")]
        line = refusal(trainqd(*rival, "--gpus", "none", "--config", first.config_file), REFUSED)
        assert line == (
            f"another process (pid {first.proc.pid}) is accepting on {first.socket}; "
            "is trainqd already running?"
        )
        # The refused daemon's clean-up did not take the first one's socket away.
        assert first.get("/v1/health").status_code == 200


def test_the_socket_of_a_daemon_that_died_is_replaced(base: Path) -> None:
    daemon = Daemon(base)
    with started(daemon):
        daemon.kill()  # SIGKILL: no clean-up, the socket file stays behind
        assert stat.S_ISSOCK(daemon.socket.lstat().st_mode)
        with socket.socket(socket.AF_UNIX) as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(str(daemon.socket))
        daemon.start()
        assert daemon.get("/v1/health").json()["status"] == "ok"
    assert not daemon.socket.exists()  # and a clean stop removes it


@pytest.mark.parametrize("kind", ["regular file", "directory", "symlink to a live socket"])
def test_something_else_at_the_socket_path_is_never_replaced(base: Path, kind: str) -> None:
    with started(Daemon(subdir(base, "live"))) as live:
        target = base / "sock"
        if kind == "regular file":
            target.write_text("precious\n")
        elif kind == "directory":
            target.mkdir()
        else:
            target.symlink_to(live.socket)
        done = trainqd("--socket", target, "--state-dir", base / "state", "--gpus", "none")
        assert refusal(done, REFUSED) == (
            f"{target} exists and is not a socket; refusing to replace it"
        )
        assert os.path.lexists(target)
        if kind == "regular file":
            assert target.read_text() == "precious\n"
        assert live.get("/v1/health").status_code == 200


def test_a_socket_directory_others_could_tamper_with_is_refused(base: Path) -> None:
    shared = base / "open"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, no sticky bit: anyone could swap the socket
    done = trainqd("--socket", shared / "s", "--state-dir", base / "state", "--gpus", "none")
    assert refusal(done, REFUSED) == (
        f"socket directory {shared} is writable by others (mode 0777) without the sticky bit; "
        "refusing to use it"
    )


def test_a_socket_path_too_long_for_unix_sockets_is_refused(base: Path) -> None:
    deep = base / ("d" * 100) / "trainq.sock"
    done = trainqd("--socket", deep, "--state-dir", base / "state", "--gpus", "none")
    length = len(os.fsencode(deep))
    assert refusal(done, REFUSED) == (
        f"socket path {deep} is {length} bytes; unix sockets allow 107"
    )


def test_sigterm_stops_trainqd_cleanly(base: Path) -> None:
    daemon = Daemon(base)
    with started(daemon):
        assert daemon.stop(signal.SIGTERM) == 0
    assert not daemon.socket.exists()
    assert "Traceback" not in daemon.log()


# -- what the host's shutdown does to running jobs ---------------------------------------


def running_sleeper(daemon: Daemon) -> tuple[dict[str, Any], int, int]:
    """A running job whose trainer sleeps: (record, trainer pid, monitor pid)."""
    job = daemon.submit(python_job("sleeper.py", gpus=1))
    pid_file = Path(job["job_dir"]) / "output" / "data" / "pid"
    trainer_pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=20))
    stat_line = Path(f"/proc/{trainer_pid}/stat").read_text()
    monitor_pid = int(stat_line.rsplit(")", 1)[1].split()[1])
    return job, trainer_pid, monitor_pid


def test_jobs_ended_by_the_hosts_shutdown_run_again(base: Path) -> None:
    """At shutdown systemd stops trainqd (alone, KillMode=process), then sends SIGTERM to
    every process left: monitors and trainers at once. Nobody stopped the job; like a
    preemption it goes back to the queue and resumes from its checkpoint."""
    daemon = Daemon(base, gpus="fake:1", config={"default_stop_grace_seconds": 5})
    with started(daemon):
        job, trainer_pid, monitor_pid = running_sleeper(daemon)
        assert daemon.stop(signal.SIGTERM) == 0
        for pid in (monitor_pid, trainer_pid):
            os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pids_alive([monitor_pid, trainer_pid]), what="the job to end")
        daemon.start()
        again = daemon.wait_state(job["id"], "RUNNING", "STOPPED")
        assert again["state"] == "RUNNING", again
        assert [a["number"] for a in again["attempts"]] == [1, 2]
        first = again["attempts"][0]
        assert (first["outcome"], first["retried"]) == ("interrupted", True)
        # The first attempt had its graceful stop and saved its checkpoint for the second.
        checkpoint = Path(again["job_dir"]) / "checkpoints" / "on-sigterm"
        assert checkpoint.read_text() == "1"
        assert daemon.cli("stop", "--grace", "0", str(job["id"])).returncode == 0
        daemon.wait_state(job["id"])
