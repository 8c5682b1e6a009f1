"""A real monitor running real trainers to their end: how the exit record tells it."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import Any

from tests.support.monitor import (
    PYTHON,
    alive,
    attempt_of,
    identities,
    python,
    trainer,
)
from trainq.core.outcomes import REASON_CHARS
from trainqd.monitor import procfs


def test_success_records_exit_zero_times_and_output() -> None:
    with attempt_of(python("print('training'); import sys; print('warn', file=sys.stderr)")) as a:
        before = time.time()
        record = a.start().wait()
        assert record.outcome == "exited"
        assert record.exit_code == 0
        assert record.signal is None
        assert record.reason is None
        assert (record.job_id, record.attempt) == (7, 1)
        assert record.started_at is not None
        assert before <= record.started_at <= record.ended_at <= time.time()
        assert a.stdout() == "training\n"
        assert a.stderr() == "warn\n"
        # The ml root was laid out for the trainer, and is left as it was.
        assert (a.ml_root / "model").is_dir()
        assert (a.ml_root / "checkpoints").is_dir()


def test_exit_code_is_recorded_with_a_description_when_nothing_was_said() -> None:
    with attempt_of(python("import sys; sys.exit(3)")) as a:
        record = a.start().wait()
        assert (record.outcome, record.exit_code, record.signal) == ("exited", 3, None)
        assert record.reason == "exited with status 3"


def test_failure_file_wins_and_is_cut_at_1024_characters_exactly() -> None:
    # Multi-byte characters, so a cut by bytes instead of characters would show.
    message = "".join(f"é{i % 10}" for i in range(1500))
    code = (
        "import os, sys\n"
        "print('noise on stderr', file=sys.stderr)\n"
        "p = os.path.join(os.environ['SAGEMAKER_BASE_DIR'], 'output', 'failure')\n"
        f"open(p, 'w', encoding='utf-8').write({message!r})\n"
        "sys.exit(2)\n"
    )
    with attempt_of(python(code)) as a:
        record = a.start().wait()
        assert record.exit_code == 2
        assert record.reason == message[:REASON_CHARS]


def test_stale_failure_file_of_an_earlier_attempt_is_not_this_attempts_reason() -> None:
    with attempt_of(python("import sys; print('fresh', file=sys.stderr); sys.exit(1)")) as a:
        (a.ml_root / "output").mkdir()
        (a.ml_root / "output" / "failure").write_text("from the attempt before")
        assert a.start().wait().reason == "fresh"


def test_failure_file_that_is_a_link_or_a_fifo_is_not_read() -> None:
    code = (
        "import os, sys\n"
        "out = os.path.join(os.environ['SAGEMAKER_BASE_DIR'], 'output')\n"
        "os.symlink('/etc/hostname', os.path.join(out, 'failure'))\n"
        "print('the real complaint', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    with attempt_of(python(code)) as a:
        assert a.start().wait().reason == "the real complaint"
    code = code.replace("os.symlink('/etc/hostname', ", "os.mkfifo(")
    with attempt_of(python(code)) as a:
        assert a.start().wait().reason == "the real complaint"


def test_stderr_tail_is_the_reason_starting_at_a_line() -> None:
    lines = [f"line {i:04d} " + "x" * 40 for i in range(200)]
    code = "import sys\n" + "".join(f"print({line!r}, file=sys.stderr)\n" for line in lines)
    code += "sys.exit(1)\n"
    with attempt_of(python(code)) as a:
        reason = a.start().wait().reason
        assert reason is not None
        assert len(reason) <= REASON_CHARS
        assert reason.endswith(lines[-1])
        assert reason.split("\n")[0] in lines  # whole lines only
        assert len(reason) > REASON_CHARS - 60


def test_missing_program_is_start_failed_with_one_line() -> None:
    with attempt_of(["trainx"]) as a:
        record = a.start().wait()
        assert record.outcome == "start_failed"
        assert record.reason == "cannot start 'trainx': No such file or directory"
        assert record.started_at is None
        assert "Traceback" not in a.monitor_log()


def test_program_that_is_not_executable_is_start_failed() -> None:
    with attempt_of([]) as a:
        script = a.root / "train.sh"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o644)
        a.launch = replace(a.launch, argv=[str(script)])
        record = a.start().wait()
        assert record.outcome == "start_failed"
        assert record.reason == f"cannot start {str(script)!r}: Permission denied"


def test_bad_working_directory_is_start_failed() -> None:
    with attempt_of(python("pass"), cwd="/nonexistent/dir") as a:
        record = a.start().wait()
        assert record.outcome == "start_failed"
        assert record.reason == (
            f"cannot start {PYTHON!r}: working directory /nonexistent/dir: "
            "No such file or directory"
        )


def test_death_by_sigsegv_and_sigabrt_is_signaled_with_the_number() -> None:
    for sig, code in (
        (signal.SIGSEGV, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"),
        (signal.SIGABRT, "import os; os.abort()"),
    ):
        with attempt_of(python(code)) as a:
            record = a.start().wait()
            assert (record.outcome, record.signal, record.exit_code) == ("signaled", sig, None)
            assert record.reason is not None
            assert record.reason.startswith(f"killed by {sig.name}")


def test_sigkill_nobody_sent_is_reported_as_a_possible_oom() -> None:
    code = (
        "import os, sys; print('allocating', file=sys.stderr, flush=True); os.kill(os.getpid(), 9)"
    )
    with attempt_of(python(code)) as a:
        record = a.start().wait()
        assert (record.outcome, record.signal) == ("signaled", signal.SIGKILL)
        assert record.reason == "killed by SIGKILL (out of memory?)\nallocating"


def test_leftovers_after_a_normal_exit_are_killed_even_if_they_ignore_sigterm() -> None:
    argv = trainer("monitor_tree.py", "--exit", "--children-ignore-term")
    with attempt_of(argv) as a:
        a.start()
        pids = [int(p) for p in a.wait_data("tree").split()]
        left = identities(pids[1:])  # the trainer itself may be gone already
        record = a.wait()
        assert (record.outcome, record.exit_code) == ("exited", 0)
        assert not [pid for pid, ticks in left if alive(pid, ticks)]
        assert procfs.descendants(a.pid, include_zombies=True) == []


def test_the_monitor_record_names_the_live_monitor() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        a.start()
        info = a.info()
        trainer_pid = int(a.wait_data("ready"))
        assert info.monitor_pid == a.pid
        assert info.boot_id == procfs.boot_id()
        assert procfs.is_same_process(a.pid, info.monitor_start, info.boot_id)
        stat = procfs.read_stat(trainer_pid)
        assert stat is not None
        assert stat.ppid == a.pid
        assert stat.pgid == trainer_pid  # a process group of its own, signalled as one
        # Neither is in the test's session or process group: a ^C here reaches neither.
        assert os.getsid(a.pid) == a.pid
        assert os.getpgid(trainer_pid) != os.getpgid(0)
        a.stop(grace=5)
        assert a.wait().outcome == "stopped"


def test_no_zombie_is_left_behind() -> None:
    # Children that exit at different times, some reparented to the monitor.
    code = (
        "import os, time\n"
        "for delay in (0, 0.05, 0.1):\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(delay); os._exit(0)\n"
        "        os._exit(0)\n"
        "time.sleep(0.3)\n"
    )
    with attempt_of(python(code)) as a:
        a.start()
        info = a.info()
        assert info.monitor_pid == a.pid
        record = a.wait()
        assert record.exit_code == 0
        assert a.popen is not None
        assert a.popen.returncode == 0
        assert procfs.descendants(a.pid, include_zombies=True) == []


def test_start_to_trainer_running_latency_is_printed() -> None:
    samples = []
    for _ in range(5):
        with attempt_of(["/bin/date", "+%s.%N"]) as a:
            before = time.time()
            record = a.start().wait()
            ran = float(a.stdout())
            assert record.started_at is not None
            assert before < record.started_at <= record.ended_at
            assert before < ran <= record.ended_at
            samples.append((ran - before) * 1000)
    samples.sort()
    print(
        f"\nstart_monitor() to the trainer running: median {samples[2]:.1f} ms, "
        f"min {samples[0]:.1f} ms, max {samples[-1]:.1f} ms (5 runs)"
    )


def test_an_environment_the_kernel_cannot_take_is_start_failed() -> None:
    with attempt_of(python("pass")) as a:
        a.launch = replace(a.launch, env={**a.launch.env, "BAD": "nul\0byte"})
        record = a.start().wait()
        assert record.outcome == "start_failed"
        assert record.reason == f"cannot start {PYTHON!r}: embedded null byte"


def test_an_internal_error_still_ends_in_a_record_and_a_nonzero_exit() -> None:
    with attempt_of(python("open('ran', 'w').close()")) as a:
        # A launch the monitor cannot use: its deadline is not a number.
        unusable: dict[str, Any] = {"deadline": "tomorrow"}
        a.launch = replace(a.launch, **unusable)
        a.start()
        assert a.popen is not None
        assert a.popen.wait(15) == 1
        record = a.record()
        assert record is not None
        assert record.outcome == "lost"
        assert record.reason is not None
        assert record.reason.startswith("monitor error: TypeError: ")
        assert "Traceback" in a.monitor_log()
        assert not (a.root / "ran").exists()
