"""How a wait status, a stop and what the trainer left behind become an exit record's
outcome and reason (with real files for the failure file and the stderr tail)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainq.core.outcomes import REASON_CHARS
from trainqd.monitor.outcome import Stop, conclude, output_tail, read_failure_file
from trainqd.monitor.process import describe_status


def exited(code: int) -> int:
    return code << 8


def killed(sig: int, core: bool = False) -> int:
    return sig | (0x80 if core else 0)


@pytest.fixture
def ml_root(tmp_path: Path) -> Path:
    (tmp_path / "ml" / "output").mkdir(parents=True)
    return tmp_path / "ml"


@pytest.fixture
def stderr(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "stderr"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
    yield path, fd
    os.close(fd)


def write(fd: int, text: str) -> None:
    os.write(fd, text.encode())


def test_status_descriptions() -> None:
    assert describe_status(exited(3)) == "exited with status 3"
    assert describe_status(killed(signal.SIGSEGV)) == "killed by SIGSEGV"
    assert describe_status(killed(signal.SIGABRT, core=True)) == "killed by SIGABRT (core dumped)"
    assert describe_status(killed(63)) == "killed by signal 63"  # no name of its own


def test_success_has_no_reason(ml_root: Path, stderr: tuple[Path, int]) -> None:
    write(stderr[1], "warnings are not failures\n")
    ending = conclude(exited(0), None, str(ml_root), stderr[1])
    assert (ending.outcome, ending.exit_code, ending.signal, ending.reason) == (
        "exited", 0, None, None,
    )  # fmt: skip


def test_reason_order_failure_file_then_stderr_then_description(
    ml_root: Path, stderr: tuple[Path, int]
) -> None:
    fd = stderr[1]
    assert conclude(exited(4), None, str(ml_root), fd).reason == "exited with status 4"
    write(fd, "Traceback ...\nValueError: bad lr\n")
    assert conclude(exited(4), None, str(ml_root), fd).reason == "Traceback ...\nValueError: bad lr"
    (ml_root / "output" / "failure").write_text("ExitCode 4\nbad lr\n")
    assert conclude(exited(4), None, str(ml_root), fd).reason == "ExitCode 4\nbad lr"
    (ml_root / "output" / "failure").write_text("  \n")  # blank says nothing
    assert conclude(exited(4), None, str(ml_root), fd).reason == "Traceback ...\nValueError: bad lr"


def test_failure_file_is_read_only_when_it_is_a_plain_file_of_its_own(ml_root: Path) -> None:
    failure = ml_root / "output" / "failure"
    elsewhere = ml_root.parent / "secret"
    elsewhere.write_text("not for the record")
    os.link(elsewhere, failure)  # a second name for a file the owner could not read
    assert read_failure_file(str(ml_root)) is None
    failure.unlink()
    failure.mkdir()
    assert read_failure_file(str(ml_root)) is None
    failure.rmdir()
    (ml_root / "output").rename(ml_root / "real-output")
    (ml_root / "output").symlink_to(ml_root / "real-output")
    (ml_root / "real-output" / "failure").write_text("through a linked directory")
    assert read_failure_file(str(ml_root)) is None
    assert read_failure_file(str(ml_root / "absent")) is None


def test_failure_file_is_cut_by_characters(ml_root: Path) -> None:
    text = "€" * (REASON_CHARS + 500)
    (ml_root / "output" / "failure").write_text(text)
    assert read_failure_file(str(ml_root)) == "€" * REASON_CHARS


def test_stderr_tail_starts_at_a_line_when_it_is_cut(stderr: tuple[Path, int]) -> None:
    fd = stderr[1]
    assert output_tail(fd) is None
    lines = [f"{i:05d}" + "-" * 94 for i in range(100)]  # 100 characters each
    write(fd, "\n".join(lines) + "\n")
    tail = output_tail(fd)
    assert tail is not None
    assert tail == "\n".join(lines[-10:])  # 10 whole lines fit in 1024 characters
    write(fd, "x" * 5000)  # one line longer than the whole reason
    assert output_tail(fd) == "x" * REASON_CHARS


def test_stops_are_described_not_explained(ml_root: Path, stderr: tuple[Path, int]) -> None:
    (ml_root / "output" / "failure").write_text("interrupted")
    fd = stderr[1]
    user = conclude(exited(0), Stop("user", 120), str(ml_root), fd)
    assert (user.outcome, user.exit_code) == ("stopped", 0)
    assert user.reason == "stopped on request: exited with status 0"
    forced = conclude(killed(signal.SIGKILL), Stop("time_limit", 2.5, forced=True), "", fd)
    assert (forced.outcome, forced.signal) == ("timed_out", signal.SIGKILL)
    assert forced.reason == "time limit reached: killed by SIGKILL when the 2.5 s grace ran out"
    termed = conclude(killed(signal.SIGTERM), Stop("user", 30), "", fd)
    assert termed.reason == "stopped on request: killed by SIGTERM"
    feeder = conclude(exited(0), Stop("feeder", 30), "", fd)
    assert (feeder.outcome, feeder.reason) == ("feeder_failed", None)  # the caller's to say


def test_signals_nobody_sent(ml_root: Path, stderr: tuple[Path, int]) -> None:
    fd = stderr[1]
    segv = conclude(killed(signal.SIGSEGV, core=True), None, str(ml_root), fd)
    assert (segv.outcome, segv.signal, segv.exit_code) == ("signaled", signal.SIGSEGV, None)
    assert segv.reason == "killed by SIGSEGV (core dumped)"
    oom = conclude(killed(signal.SIGKILL), None, str(ml_root), fd)
    assert oom.reason == "killed by SIGKILL (out of memory?)"
    write(fd, "loading batch 9\n")
    oom = conclude(killed(signal.SIGKILL), None, str(ml_root), fd)
    assert oom.reason == "killed by SIGKILL (out of memory?)\nloading batch 9"
