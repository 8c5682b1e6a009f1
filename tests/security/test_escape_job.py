"""A job's processes end with it, whatever they did to leave it: a double fork into a new
session with an empty environment (no TRAINQ_* variable to be found by) does not survive a
monitor killed by the job's owner into the job's next attempt, and a trainer cannot move
itself out of its attempt's cgroup."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, pids_alive
from tests.support.users import trainq_as
from tests.support.waiting import wait_for
from trainqd.monitor import cgroup, procfs

pytestmark = pytest.mark.multiuser

# Leaves a sleeper behind that shares nothing with the job but its cgroup: it is forked
# twice (its parent exits at once), in a session of its own, with an empty environment.
# Its pid goes into the model directory; then the trainer waits.
ESCAPE = (
    "setsid /bin/sh -c 'env -i /bin/sleep 555 </dev/null >/dev/null 2>&1 & echo $! > \"$1\"'"
    ' escape "$SM_MODEL_DIR/sleeper.tmp"'
    ' && mv "$SM_MODEL_DIR/sleeper.tmp" "$SM_MODEL_DIR/sleeper"'
    " && exec /bin/sleep 1000"
)


def submit(daemon: Daemon, user: User, cwd: Path, script: str, *flags: str) -> int:
    done = trainq_as(daemon, user, "submit", *flags, "--", "/bin/sh", "-c", script, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def sleeper_of(daemon: Daemon, job_id: int) -> tuple[int, int]:
    """The escaped sleeper: (pid, start ticks), once its trainer has reported it."""
    path = daemon.state_dir / "jobs" / str(job_id) / "ml" / "model" / "sleeper"
    pid = int(wait_for(lambda: path.exists() and path.read_text().strip(), timeout=20))
    ticks = procfs.start_ticks(pid)
    assert ticks is not None
    assert pids_alive([pid]) == [pid]
    # It did escape: no trainq variable left to be found by.
    assert Path(f"/proc/{pid}/environ").read_bytes() == b""
    return pid, ticks


def still_running(pid: int, ticks: int) -> bool:
    return procfs.start_ticks(pid) == ticks and bool(pids_alive([pid]))


def kill_if_running(pid: int, ticks: int) -> None:
    """The test's own cleanup, should the sleeper have escaped after all."""
    pidfd = procfs.signal_checked(pid, ticks, signal.SIGKILL)
    if pidfd is not None:
        os.close(pidfd)


def monitor_of(daemon: Daemon, job_id: int, attempt: int) -> int:
    path = daemon.state_dir / "jobs" / str(job_id) / "attempts" / f"{attempt}.monitor"
    info = wait_for(lambda: path.exists() and json.loads(path.read_text()), timeout=20)
    pid: int = info["monitor_pid"]
    return pid


def running_attempt(daemon: Daemon, job_id: int, number: int) -> dict[str, Any] | None:
    job = daemon.job(job_id)
    if job["state"] == "RUNNING" and len(job["attempts"]) == number:
        return job
    return None


def serves(daemon: Daemon, user: User) -> None:
    done = trainq_as(daemon, user, "ls", "--all")
    assert done.returncode == 0, done.stderr
    job_id = submit(daemon, user, Path("/"), "exit 0")
    assert daemon.wait_state(job_id, "COMPLETED")["state"] == "COMPLETED"


def test_an_escaped_process_dies_with_a_lost_monitor_before_the_retry(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    job_id = submit(workstation, alice, shared_dir, ESCAPE, "--gpus", "2")
    pid, ticks = sleeper_of(workstation, job_id)
    try:
        monitor = monitor_of(workstation, job_id, 1)
        assert os.getsid(pid) != os.getsid(monitor)  # out of the job's session, too
        # The monitor runs as her but holds root's descriptors for the cgroup: out of reach.
        peek = alice.run(["ls", f"/proc/{monitor}/fd"])
        assert peek.returncode != 0
        assert "Permission denied" in peek.stderr
        # The owner kills the monitor of her own job (it runs as her): the attempt is lost
        # and the job goes back to the queue for a second attempt on the same GPUs.
        killed = alice.run(["kill", "-KILL", str(monitor)])
        assert killed.returncode == 0, killed.stderr
        job = wait_for(lambda: running_attempt(workstation, job_id, 2), timeout=30)
        assert job["attempts"][0]["outcome"] == "lost"
        assert not still_running(pid, ticks), "the escaped sleeper outlived its attempt"
    finally:
        kill_if_running(pid, ticks)
    serves(workstation, bob)
    stopped = trainq_as(workstation, alice, "stop", "--grace", "0", str(job_id))
    assert stopped.returncode == 0, stopped.stderr
    workstation.wait_state(job_id, "STOPPED")


def test_a_trainer_cannot_move_out_of_its_attempts_cgroup(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    mount, _ = cgroup.v2_mount()
    tree = cgroup.subtree(str(workstation.state_dir / "jobs"))
    # Each target is a cgroup the trainer would rather be in: the top of the v2 tree,
    # trainqd's own, and trainqd's subtree of attempts.
    targets = [f"{mount}/cgroup.procs", f"{os.path.dirname(tree)}/cgroup.procs"]
    targets.append(f"{tree}/cgroup.procs")
    script = (
        'out="$SM_MODEL_DIR"; sed -n "s/^0:://p" /proc/self/cgroup > "$out/before"; '
        'for f in "$@"; do if echo $$ > "$f"; then echo "moved into $f"; fi; done '
        '> "$out/moves" 2> "$out/errors"; '
        'sed -n "s/^0:://p" /proc/self/cgroup > "$out/after"'
    )
    done = trainq_as(
        workstation,
        alice,
        "submit",
        "--wait",
        "--",
        "/bin/sh",
        "-c",
        script,
        "escape",
        *targets,
        cwd=shared_dir,
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split()[0])
    model = workstation.state_dir / "jobs" / str(job_id) / "ml" / "model"
    before = (model / "before").read_text().strip()
    assert before.endswith(f"/{cgroup.attempt_name(job_id, 1)}"), before
    assert (model / "after").read_text().strip() == before
    assert (model / "moves").read_text() == ""
    assert (model / "errors").read_text().count("Permission denied") == len(targets)
    # The attempt's cgroup went with it.
    assert not os.path.exists(os.path.join(tree, cgroup.attempt_name(job_id, 1)))
    serves(workstation, bob)
