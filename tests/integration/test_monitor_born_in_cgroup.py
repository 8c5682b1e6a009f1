"""A root fork server forks each monitor straight into its attempt's cgroup (clone3 with
CLONE_INTO_CGROUP), so that the monitor runs no instruction outside it and pays for no
migration; where that cannot be done it forks as before and the monitor moves itself in
(root and a cgroup v2 tree needed)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import cgroups
from tests.support.cgroups import monitor_gone, needs_v2, remove_attempt_cgroup
from tests.support.monitor import NOBODY, Attempt, attempt_of, give_to, python, run_as_nobody
from tests.support.waiting import wait_for
from trainqd.monitor import cgroup, spawn

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's")

# Runs argv[2:] with clone3 answered by errno argv[1] (as a container engine's default
# seccomp profile answers ENOSYS): a classic BPF filter on the syscall number alone.
SECCOMP = """
import ctypes, os, struct, sys
answer = int(sys.argv[1])
def insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)
filt = b"".join([
    insn(0x20, 0, 0, 0),                     # A = seccomp_data.nr
    insn(0x15, 0, 1, 435),                   # clone3?
    insn(0x06, 0, 0, 0x00050000 | answer),   # SECCOMP_RET_ERRNO | answer
    insn(0x06, 0, 0, 0x7FFF0000),            # SECCOMP_RET_ALLOW
])
buf = ctypes.create_string_buffer(filt, len(filt))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(filt) // 8, ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, a filter
os.execv(sys.argv[2], sys.argv[2:])
"""

# Forks into the cgroup argv[1]: the child says where it is, that a signal it raises comes
# to itself and that it can start and join a thread; the parent says what it got.
FORK_INTO = """
import json, os, signal, sys, threading
from trainqd.monitor import cgroupfork
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(os.getpid()))
read, write = os.pipe()
try:
    pid = cgroupfork.fork_into(fd)
except cgroupfork.Unavailable as exc:
    try:
        os.wait()
        child = "a child was made"
    except ChildProcessError:
        child = None
    print(json.dumps({"refused": str(exc), "lasting": exc.lasting, "child": child}))
    sys.exit(0)
if pid == 0:
    where = open("/proc/self/cgroup").read()
    signal.raise_signal(signal.SIGUSR1)
    thread = threading.Thread(target=got.append, args=["thread"])
    thread.start()
    thread.join()
    said = {"cgroup": where, "pid": os.getpid(), "got": got}
    os.write(write, json.dumps(said).encode())
    os._exit(0)
os.close(write)
said = json.loads(os.read(read, 65536))
_, status = os.waitpid(pid, 0)
print(json.dumps({"pid": pid, "child": said, "status": status, "parent_got": got}))
"""


def membership(path: str) -> str:
    """The line /proc/<pid>/cgroup has for a process in the cgroup directory `path`."""
    mount, root = cgroup.v2_mount()
    inside = os.path.relpath(path, mount)
    return "0::" + os.path.normpath(os.path.join(root, inside))


def under_seccomp(answer: int, argv: list[str]) -> list[str]:
    return [sys.executable, "-c", SECCOMP, str(answer), *argv]


@pytest.fixture
def scratch_cgroup() -> Iterator[str]:
    with cgroups.scratch_cgroup("born") as path:
        yield path


def end_of(attempt: Attempt, pid: int) -> None:
    """Wait for a forked monitor's end, then remove the attempt's cgroup as trainqd would."""
    remove_attempt_cgroup(monitor_gone(attempt, pid))


WHERE = python("print(open('/proc/self/cgroup').read().strip().splitlines()[-1])")


@needs_v2
def test_a_child_is_born_in_the_cgroup_and_is_a_whole_process(scratch_cgroup: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORK_INTO, scratch_cgroup],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    said = json.loads(out.stdout)
    child = said["child"]
    assert membership(scratch_cgroup) in child["cgroup"].splitlines()
    assert child["pid"] == said["pid"]
    # Its signal came to itself, not to the parent whose thread it was cloned from.
    assert child["got"] == [said["pid"], "thread"]
    assert said["parent_got"] == []
    assert said["status"] == 0


@needs_v2
@pytest.mark.parametrize("answer", [errno.ENOSYS, errno.EPERM])
def test_a_refused_clone3_makes_no_child_and_says_it_lasts(
    scratch_cgroup: str, answer: int
) -> None:
    out = subprocess.run(
        under_seccomp(answer, [sys.executable, "-c", FORK_INTO, scratch_cgroup]),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    said = json.loads(out.stdout)
    assert said == {"refused": f"clone3: {os.strerror(answer)}", "lasting": True, "child": None}
    assert cgroup.members(scratch_cgroup) == []


@needs_v2
def test_the_monitor_runs_no_instruction_outside_its_cgroup(
    starter: spawn.MonitorStarter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempts' subtree frozen beforehand, and so the attempt's cgroup made in it: a
    monitor born there is frozen before it runs anything; one that started elsewhere would
    have logged its first steps (the profile's marks) before it moved in."""
    monkeypatch.setitem(spawn._MONITOR_ENV, "TRAINQ_PROFILE", "1")
    with attempt_of(WHERE) as attempt:  # the server's first, with its probe, goes first
        end_of(attempt, starter.start(attempt.launch).pid)
    with attempt_of(WHERE) as attempt:
        subtree = cgroup.subtree(cgroup.jobs_dir_of(attempt.launch.ml_root))
        path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1)
        os.mkdir(subtree)
        Path(subtree, "cgroup.freeze").write_text("1")
        pid = starter.start(attempt.launch).pid
        try:
            wait_for(lambda: pid in cgroup.members(path), what="the monitor in its cgroup")
            wait_for(lambda: "frozen 1" in Path(path, "cgroup.events").read_text())
            assert attempt.monitor_log() == ""
        finally:
            Path(subtree, "cgroup.freeze").write_text("0")
        end_of(attempt, pid)
        record = attempt.record()
        assert record is not None
        assert (record.outcome, record.exit_code) == ("exited", 0)
        assert attempt.stdout().strip().endswith(membership(path))
        assert "profile" in attempt.monitor_log()  # it ran, once thawed


@needs_v2
def test_an_earlier_launchs_cgroup_is_made_anew_for_the_monitor(
    starter: spawn.MonitorStarter,
) -> None:
    """A launch of this very attempt died before its monitor ran: its cgroup is killed, and
    a cgroup that was ever killed kills what is cloned into it (Linux 6.18 here), so it is
    removed and made again."""
    with attempt_of(WHERE) as attempt:
        path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1)
        os.makedirs(path)
        Path(path, "cgroup.kill").write_text("1")
        pid = starter.start(attempt.launch).pid
        end_of(attempt, pid)
        record = attempt.record()
        assert record is not None
        assert (record.outcome, record.exit_code) == ("exited", 0)
        assert attempt.stdout().strip().endswith(membership(path))
        assert "no cgroup" not in attempt.monitor_log()


# Moves itself into the cgroup argv[1], then runs argv[2:] (trainqd started in that cgroup).
IN_CGROUP = """
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write("0")
os.execv(sys.argv[2], sys.argv[2:])
"""


@needs_v2
def test_a_server_whose_clones_are_killed_falls_back_to_moving_monitors(
    starter: spawn.MonitorStarter,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    scratch_cgroup: str,
) -> None:
    """The server's own cgroup was killed once (its kill count is not a fresh cgroup's):
    this kernel kills every child cloned into a fresh cgroup from it. The probe sees its
    child killed; the server says so once and forks as before."""
    Path(scratch_cgroup, "cgroup.kill").write_text("1")
    argv: Callable[..., list[str]] = spawn.monitor_argv
    monkeypatch.setattr(
        spawn,
        "monitor_argv",
        lambda fork_server=False: [
            sys.executable, "-c", IN_CGROUP, scratch_cgroup, *argv(fork_server)
        ],
    )  # fmt: skip
    for _ in range(2):
        with attempt_of(WHERE) as attempt:
            started = starter.start(attempt.launch)
            path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1, scratch_cgroup)
            wait_for(attempt.record, timeout=15, what="the exit record")
            record = attempt.record()
            assert record is not None
            assert (record.outcome, record.exit_code) == ("exited", 0)
            assert attempt.stdout().strip().endswith(membership(path))
            pid = started.pid
            wait_for(lambda p=path, m=pid: m not in cgroup.members(p), what="the monitor's exit")
            assert cgroup.remove(path)
    said = [line for line in capfd.readouterr().err.splitlines() if "fork server" in line]
    assert len(said) == 1
    assert "ended with status 0x9" in said[0]


@needs_v2
def test_without_clone3_monitors_move_into_their_cgroup_and_the_server_says_so_once(
    starter: spawn.MonitorStarter,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    argv: Callable[..., list[str]] = spawn.monitor_argv
    monkeypatch.setattr(
        spawn,
        "monitor_argv",
        lambda fork_server=False: under_seccomp(errno.ENOSYS, argv(fork_server)),
    )
    for _ in range(2):
        with attempt_of(WHERE) as attempt:
            started = starter.start(attempt.launch)
            assert started.popen is None  # forked by the server all the same
            end_of(attempt, started.pid)
            record = attempt.record()
            assert record is not None
            assert (record.outcome, record.exit_code) == ("exited", 0)
            path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1)
            assert attempt.stdout().strip().endswith(membership(path))
    said = [line for line in capfd.readouterr().err.splitlines() if "fork server" in line]
    assert len(said) == 1
    assert "clone3: Function not implemented" in said[0]


@needs_v2
def test_a_cgroup_the_server_cannot_make_leaves_the_job_to_its_process_tree(
    starter: spawn.MonitorStarter, capfd: pytest.CaptureFixture[str]
) -> None:
    with attempt_of(WHERE) as attempt:
        subtree = cgroup.subtree(cgroup.jobs_dir_of(attempt.launch.ml_root))
        os.mkdir(subtree)
        try:
            Path(subtree, "cgroup.max.descendants").write_text("0")  # no attempt's below
            started = starter.start(attempt.launch)
            wait_for(attempt.record, timeout=15, what="the exit record")
            record = attempt.record()
            assert record is not None
            assert (record.outcome, record.exit_code) == ("exited", 0)
            assert "no cgroup of its own" in attempt.monitor_log()
            assert attempt.stdout().strip().endswith(membership(cgroup.own_cgroup_dir()))
            wait_for(lambda: started.pid not in cgroup.members(cgroup.own_cgroup_dir()))
        finally:
            os.rmdir(subtree)
    said = [line for line in capfd.readouterr().err.splitlines() if "fork server" in line]
    assert len(said) == 1
    assert "cannot make" in said[0]


# A personal trainqd's fork server, as nobody: forks one monitor for the launch on stdin,
# says its pid and whether the server forked it, and lets go once the monitor is gone.
PERSONAL_SERVER = """
import os, sys, time
sys.path[:0] = sys.argv[1:]
from trainqd.monitor import spawn
from trainqd.monitor.records import Launch
starter = spawn.MonitorStarter()
started = starter.start(Launch.from_json(sys.stdin.buffer.read()))
print(started.pid, started.popen is None, flush=True)
deadline = time.monotonic() + 20
while os.path.exists(f"/proc/{started.pid}") and time.monotonic() < deadline:
    time.sleep(0.01)
starter.close()
"""


@needs_v2
def test_a_personal_servers_monitor_is_forked_with_no_cgroup_of_its_own() -> None:
    with attempt_of(WHERE, owner=NOBODY) as attempt:
        give_to(attempt, NOBODY)
        done = run_as_nobody(attempt.launch.to_json(), PERSONAL_SERVER, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().split()[1] == "True"  # forked by the server
        assert b"fork server" not in done.stderr
        record = attempt.record()
        assert record is not None
        assert (record.outcome, record.exit_code) == ("exited", 0), attempt.monitor_log()
        # In the cgroup it was forked in: this test's own; no attempt's cgroup was made.
        assert attempt.stdout().strip().endswith(membership(cgroup.own_cgroup_dir()))
        assert not os.path.exists(cgroup.attempt_path(attempt.launch.ml_root, 7, 1))
