"""What `ls`, `show`, `gpus`, `health` and `wait` print, from records shaped by trainq.core.wire."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import termios
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainq import job_tables
from trainq.core.spec import JobSpec
from trainq.core.spec_parts import ChannelSpec
from trainq.core.wire import (
    AttemptRecord,
    GpuList,
    GpuRecord,
    HealthRecord,
    JobRecord,
    NodeRecord,
    Owner,
)
from trainq.humanize import (
    end_summary,
    exit_cell,
    format_duration,
    format_relative,
    gpus_cell,
    headline,
    health_line,
    job_reason,
    shorten,
)
from trainq.job_detail import job_detail
from trainq.job_tables import gpu_table, job_table
from trainq.render import RenderOptions, options_for

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
PIPED = RenderOptions(now=NOW, tz=UTC)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TRACEBACK = (
    'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
    "ValueError: bad shape [3, 4] vs [4, 3]"
)


def job(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "id": 12,
        "name": "resnet-a",
        "state": "RUNNING",
        "priority": 10,
        "owner": Owner(uid=1000, user="alice"),
        "runtime": "subprocess",
        "gpus": [0, 1],
        "gpu_uuids": ["GPU-0000aaaa", "GPU-1111bbbb"],
        "job_dir": "/var/lib/trainq/jobs/12/ml",
        "created_at": NOW - timedelta(minutes=5, seconds=3),
        "started_at": NOW - timedelta(minutes=3, seconds=12),
        "spec": JobSpec(
            name="resnet-a",
            gpus=2,
            priority=10,
            command=["python3", "train.py", "--note", "two words"],
            hyperparameters={"lr": "0.1"},
            environment={"WANDB_MODE": "offline"},
            channels={"train": ChannelSpec(source="/data/train", mode="Pipe")},
            max_runtime_seconds=86400,
        ),
        "attempts": [
            AttemptRecord(
                number=1,
                gpus=[0, 1],
                started_at=NOW - timedelta(minutes=4),
                ended_at=NOW - timedelta(minutes=3, seconds=20),
                signal=11,
                signal_name="SIGSEGV",
                outcome="signaled",
                reason="Segmentation fault\nin conv1",
                retried=True,
            ),
            AttemptRecord(number=2, gpus=[0, 1], started_at=NOW - timedelta(minutes=3, seconds=12)),
        ],
    }
    fields.update(changes)
    return JobRecord(**fields).model_dump(mode="json")


def plain(text: str) -> str:
    return ANSI.sub("", text)


# --- words ---


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59.9, "59s"),
        (192, "3m12s"),
        (3600, "1h00m"),
        (7325, "2h02m"),
        (90061, "1d01h"),
        (-5, "0s"),
    ],
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_relative_times() -> None:
    assert format_relative(NOW, NOW) == "just now"
    assert format_relative(NOW - timedelta(seconds=42), NOW) == "42s ago"
    assert format_relative(NOW - timedelta(minutes=2, seconds=59), NOW) == "2m ago"
    assert format_relative(NOW - timedelta(days=3, hours=5), NOW) == "3d ago"
    assert format_relative(NOW + timedelta(seconds=5), NOW) == "in 5s"


def test_reasons_are_shortened_to_their_headline() -> None:
    assert headline(TRACEBACK) == "ValueError: bad shape [3, 4] vs [4, 3]"
    assert headline("out of memory\nsee dmesg") == "out of memory"
    assert shorten("waiting for 2 GPUs") == "waiting for 2 GPUs"
    assert shorten("first\nsecond") == "first..."
    assert shorten("x" * 100, 20) == "x" * 17 + "..."
    assert shorten("   \n  ") == ""


def test_which_reason_a_job_shows() -> None:
    assert (
        job_reason({"pending_reason": "waiting for GPUs", "failure_reason": "old"})
        == "waiting for GPUs"
    )
    assert job_reason({"failure_reason": "exit 1", "stop_reason": None}) == "exit 1"
    assert job_reason({"stop_reason": "stopped by alice"}) == "stopped by alice"
    assert job_reason({"pending_reason": " "}) == ""


def test_a_wait_reason_is_rendered_from_its_record() -> None:
    # The structured reason, worded by trainq.core.reasons (the daemon's words are the
    # fallback for a record this version cannot read).
    waiting = {"kind": "gpus", "gpus": 2, "free": 1, "foreign": 1}
    pending = {"state": "PENDING", "pending_reason": "daemon's words", "waiting": waiting}
    assert job_reason(pending) == (
        "waiting for 2 GPUs (1 free, 1 busy with processes trainq did not start)"
    )
    reserved = {**pending, "waiting": {"kind": "reserved", "job_id": 7}}
    assert job_reason(reserved) == "reserved GPUs for job 7"
    assert job_reason({**pending, "waiting": {"kind": "from-a-newer-daemon"}}) == "daemon's words"
    assert job_reason({**pending, "waiting": {"kind": "backoff", "until": "soon"}}) == (
        "daemon's words"
    )


def test_cells() -> None:
    assert gpus_cell(job()) == "2 [0,1]"
    assert gpus_cell(job(state="PENDING", gpus=[])) == "2"
    assert gpus_cell(job(gpus=[], spec=JobSpec(command=["true"]))) == "-"
    # A job of several nodes: its GPUs are every node's together.
    nodes = JobSpec(command=["true"], gpus=1, instance_count=3)
    assert gpus_cell(job(gpus=[0, 1, 2], spec=nodes)) == "3 [0,1,2]"
    groups = JobSpec.model_validate(
        {
            "command": ["true"],
            "instance_groups": [
                {"name": "servers", "instance_count": 1},
                {"name": "trainers", "instance_count": 2, "gpus": 2, "primary": True},
            ],
        }
    )
    assert gpus_cell(job(state="PENDING", gpus=[], spec=groups)) == "4"
    assert exit_cell({"signal": 9, "signal_name": "SIGKILL"}) == "SIGKILL (9)"
    assert exit_cell({"signal": 64}) == "signal 64"
    assert exit_cell({"exit_code": 0}) == "0"
    assert exit_cell({}) == "-"


def test_end_summary() -> None:
    failed = job(state="FAILED", failure_reason=TRACEBACK, ended_at=NOW)
    assert end_summary(failed) == "job 12 FAILED: ValueError: bad shape [3, 4] vs [4, 3]..."
    assert end_summary(job(state="COMPLETED", ended_at=NOW)) == "job 12 COMPLETED"


def test_health_line() -> None:
    health = HealthRecord(
        status="ok",
        version="0.1.0",
        pid=812,
        uid=0,
        started_at=NOW - timedelta(hours=3, minutes=12),
        gpu_backend="fake",
        gpus=4,
        cpu_slots=16,
        jobs={"RUNNING": 2, "COMPLETED": 0, "PENDING": 1},
    ).model_dump(mode="json")
    assert health_line(health, NOW) == (
        "trainqd 0.1.0 ok, up 3h12m (pid 812); 4 GPUs (fake), 16 CPU slots; "
        "jobs: 1 PENDING, 2 RUNNING"
    )


# --- ls ---


def some_jobs() -> list[dict[str, Any]]:
    return [
        job(),
        job(id=13, name="bert", state="PENDING", gpus=[], started_at=None, attempts=[],
            pending_reason="waiting for 2 GPUs (1 free) [bold]not markup[/bold]"),
        job(id=9, state="FAILED", gpus=[], ended_at=NOW - timedelta(hours=2),
            started_at=NOW - timedelta(hours=5), failure_reason=TRACEBACK, attempts=[]),
    ]  # fmt: skip


def test_ls_piped_is_plain_whole_lines() -> None:
    out = job_table(some_jobs(), PIPED)
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "STATE",
        "USER",
        "GPUS",
        "PRIO",
        "AGE",
        "RUNTIME",
        "REASON",
    ]
    assert lines[1].split()[:8] == ["12", "resnet-a", "RUNNING", "alice", "2", "[0,1]", "10", "5m"]
    assert lines[2].endswith("waiting for 2 GPUs (1 free) [bold]not markup[/bold]")
    assert lines[3].endswith("3h00m    ValueError: bad shape [3, 4] vs [4, 3]...")
    assert len(lines) == 4
    assert not ANSI.search(out)
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("wide", [False, True])
def test_ls_piped_is_laid_out_as_rich_lays_it_out(
    wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Piped output skips rich (start-up time); it must be rich's layout, line for line.
    jobs = [*some_jobs(), job(id=100, name="a-much-longer-name-than-the-rest", priority=-20)]
    plain = job_table(jobs, PIPED, wide=wide)
    wide_chars = job_table([job(name="\u5b66\u7fd2-run")], PIPED, wide=wide)
    monkeypatch.setattr(job_tables, "plain_table", lambda *_: None)  # rich draws everything
    assert plain == job_table(jobs, PIPED, wide=wide)
    # a name that is not plain ASCII was drawn by rich (two columns a character)
    assert wide_chars == job_table([job(name="\u5b66\u7fd2-run")], PIPED, wide=wide)


def test_ls_wide_has_absolute_times_and_whole_reasons() -> None:
    out = job_table(some_jobs(), PIPED, wide=True)
    header, _, _, failed = out.splitlines()
    assert "SUBMITTED" in header
    assert "ATTEMPTS" in header
    assert "2026-05-01 11:54:57" in out
    assert failed.endswith(
        'Traceback (most recent call last): File "train.py", line 3, in <module> '
        "ValueError: bad shape [3, 4] vs [4, 3]"
    )


def test_ls_on_a_narrow_terminal_cuts_only_the_reason() -> None:
    out = job_table(some_jobs(), RenderOptions(now=NOW, tz=UTC, color=True, width=90))
    assert ANSI.search(out)
    lines = plain(out).splitlines()
    assert [line.split()[:3] for line in lines[1:]] == [
        ["12", "resnet-a", "RUNNING"], ["13", "bert", "PENDING"], ["9", "resnet-a", "FAILED"]
    ]  # fmt: skip
    assert all(len(line) <= 90 for line in lines)
    assert lines[2].endswith("...")


def test_terminal_options_follow_the_terminal_and_no_color() -> None:
    controller, terminal = os.openpty()
    try:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 123, 0, 0))
        with os.fdopen(os.dup(terminal), "w") as stream:
            assert options_for(stream, {"TERM": "xterm"}, NOW) == RenderOptions(
                now=NOW, color=True, width=123
            )
            assert not options_for(stream, {"NO_COLOR": "1"}, NOW).color
            assert not options_for(stream, {"TERM": "dumb"}, NOW).color
        with open(os.devnull, "w") as not_a_terminal:
            assert options_for(not_a_terminal, {}, NOW) == RenderOptions(now=NOW)
    finally:
        os.close(controller)
        os.close(terminal)


# --- show ---


def test_show_has_every_field_of_the_record() -> None:
    record = job(
        state="PENDING",
        pending_reason="retrying after a crash",
        next_attempt_at=NOW + timedelta(seconds=5),
        failure_reason="Segmentation fault",
        stop_reason="never",
        ended_at=NOW - timedelta(seconds=1),
    )
    record["added_later"] = {"x": 1}
    out = job_detail(record, PIPED)
    labels = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")}
    # A time limit's end shows in the state (TIMEOUT), not as a line of its own; a job of
    # several nodes' nodes are a table of their own.
    assert set(record) - {"id", "name", "spec", "attempts", "timed_out", "nodes"} <= labels
    assert set(record["spec"]) - {"hyperparameters", "environment", "channels"} <= labels
    for text in (
        "Job 12  resnet-a",
        "alice (uid 1000)",
        "GPU-0000aaaa, GPU-1111bbbb",
        "/var/lib/trainq/jobs/12/ml",
        "2026-05-01 12:00:05 (in 5s)",
        "python3 train.py --note 'two words'",
        "86400 (1d00h)",
        '{"x": 1}',
    ):
        assert text in out, text
    assert re.search(r"^  lr +0\.1$", out, re.M)
    assert re.search(r"^  WANDB_MODE +offline$", out, re.M)
    assert re.search(r"^  train +/data/train \(mode=Pipe, ", out, re.M)


def test_show_leaves_out_what_is_not_set_unless_all_fields() -> None:
    record = job(failure_reason=None, stop_reason="", gpu_uuids=[], held_by=None)
    record["spec"] = {**record["spec"], "image": None, "environment": {}, "run_as_root": False}
    short = job_detail(record, PIPED, all_fields=False)
    labels = {line.split()[0] for line in short.splitlines() if line and not line.startswith(" ")}
    for unset in ("failure_reason", "stop_reason", "gpu_uuids", "held_by", "image", "environment"):
        assert unset not in labels, unset
    assert {"state", "owner", "job_dir", "command", "hyperparameters"} <= labels
    assert not re.search(r"^\S+ +-$", short, re.M)  # no field shown as "-"
    everything = job_detail(record, PIPED, all_fields=True)
    assert re.search(r"^failure_reason +-$", everything, re.M)
    assert re.search(r"^image +-$", everything, re.M)


def test_show_lists_attempts_as_a_table() -> None:
    out = job_detail(job(), PIPED)
    attempts = out.split("Attempts\n", 1)[1].splitlines()
    assert attempts[0].split() == [
        "#",
        "GPUS",
        "STARTED",
        "ENDED",
        "RAN",
        "EXIT",
        "OUTCOME",
        "RETRIED",
        "REASON",
    ]
    assert attempts[1].split() == [
        "1", "0,1", "2026-05-01", "11:56:00", "2026-05-01", "11:56:40", "40s",
        "SIGSEGV", "(11)", "signaled", "yes", "Segmentation", "fault", "in", "conv1",
    ]  # fmt: skip
    assert attempts[2].split()[:5] == ["2", "0,1", "2026-05-01", "11:56:48", "-"]
    assert "none yet" in job_detail(job(attempts=[]), PIPED)


def test_show_names_the_containers_of_a_container_job() -> None:
    attempts = [dict(a, container=f"trainq-1a2b3c4d-7-{a['number']}") for a in job()["attempts"]]
    out = job_detail(job(attempts=attempts), PIPED).split("Attempts\n", 1)[1].splitlines()
    assert out[0].split()[7:] == ["RETRIED", "CONTAINER", "REASON"]
    assert "trainq-1a2b3c4d-7-1" in out[1].split()
    assert "trainq-1a2b3c4d-7-2" in out[2].split()


def test_show_keeps_a_multi_line_reason_whole() -> None:
    out = job_detail(job(state="FAILED", failure_reason=TRACEBACK, ended_at=NOW), PIPED)
    assert 'File "train.py", line 3, in <module>' in out
    assert "ValueError: bad shape [3, 4] vs [4, 3]" in out


# --- gpus ---


def test_gpu_table() -> None:
    gpus = GpuList(
        backend="fake",
        gpus=[
            GpuRecord(index=0, uuid="GPU-aaaa", name="Fake H100", memory_total_mib=81920,
                      memory_used_mib=1200, job_id=12, available=False),
            GpuRecord(index=1, uuid="GPU-bbbb", name="Fake H100", memory_total_mib=81920,
                      foreign_pids=[345, 678], available=False),
            GpuRecord(index=2, uuid="GPU-cccc", name="Fake H100", memory_total_mib=81920,
                      available=True),
        ],
    ).model_dump(mode="json")  # fmt: skip
    lines = gpu_table(gpus, PIPED).splitlines()
    assert lines[0].split() == [
        "INDEX",
        "NAME",
        "UUID",
        "MEMORY",
        "JOB",
        "OTHER",
        "PIDS",
        "AVAILABLE",
    ]
    assert lines[1].split() == [
        "0",
        "Fake",
        "H100",
        "GPU-aaaa",
        "1200/81920",
        "MiB",
        "12",
        "-",
        "no",
    ]
    assert lines[2].split() == [
        "1",
        "Fake",
        "H100",
        "GPU-bbbb",
        "81920",
        "MiB",
        "-",
        "345,678",
        "no",
    ]
    assert lines[3].split()[-1] == "yes"
    assert lines[4] == "(backend: fake)"


def test_no_gpus() -> None:
    assert gpu_table({"backend": "none", "gpus": []}, PIPED) == (
        "no GPUs (backend: none); jobs with gpus = 0 still run\n"
    )


def test_a_job_its_time_limit_stopped_shows_as_timeout_in_ls_and_show() -> None:
    ended = job(state="STOPPED", timed_out=True, stop_reason="time limit of 60 s reached")
    stopped = job(id=13, state="STOPPED", timed_out=False, stop_reason="stopped by alice")
    rows = job_table([ended, stopped], PIPED).splitlines()
    assert [row.split()[2] for row in rows[1:]] == ["TIMEOUT", "STOPPED"]
    detail = job_detail(ended, PIPED).splitlines()
    assert ["state", "TIMEOUT"] in [line.split() for line in detail]
    assert not any(line.startswith("timed_out") for line in detail)


def test_a_sweeps_jobs_show_their_point_and_wide_their_group() -> None:
    def point(job_id: int, lr: str, batch: str) -> dict[str, Any]:
        spec = JobSpec(command=["python3", "train.py"], hyperparameters={"lr": lr, "batch": batch})
        return job(id=job_id, name=f"sweep-{job_id}", group_id=20, spec=spec, attempts=[])

    sweep = [point(20, "0.1", "32"), point(21, "0.1", "64"), point(22, "0.01", "64")]
    alone = job(id=30, name="alone", attempts=[])
    rows = job_table([*sweep, alone], PIPED).splitlines()
    assert "SWEEP POINT" in rows[0]
    assert "lr=0.1,batch=32" in rows[1]
    assert "lr=0.01,batch=64" in rows[3]
    assert "lr=" not in rows[4]  # not of a sweep
    assert "GROUP" not in rows[0]
    wide = job_table([*sweep, alone], PIPED, wide=True).splitlines()
    assert "GROUP" in wide[0]
    assert " 20 " in wide[1]
    assert "SWEEP POINT" not in job_table([alone], PIPED)


def test_show_lists_each_node_and_how_it_ended() -> None:
    root = "/var/lib/trainq/jobs/12/nodes"
    nodes = [
        NodeRecord(name="algo-1", rank=0, group="pservers", job_dir=f"{root}/algo-1",
                   attempt=1, outcome="stopped", restarts=0),
        NodeRecord(name="algo-2", rank=1, group="trainers", gpus=[0, 1],
                   job_dir=f"{root}/algo-2", attempt=1, outcome="signaled", signal=9,
                   signal_name="SIGKILL", restarts=5),
    ]  # fmt: skip
    ended = job_detail(job(state="FAILED", nodes=nodes), PIPED).split("Nodes\n", 1)[1]
    lines = ended.splitlines()
    assert lines[0].split() == [
        "NODE", "GROUP", "RANK", "GPUS", "STATE", "EXIT", "RESTARTS", "ML", "ROOT",
    ]  # fmt: skip
    assert lines[1].split() == [
        "algo-1", "pservers", "0", "-", "stopped", "-", "0", f"{root}/algo-1",
    ]  # fmt: skip
    assert lines[2].split() == [
        "algo-2", "trainers", "1", "0,1", "signaled", "SIGKILL", "(9)", "5", f"{root}/algo-2",
    ]  # fmt: skip
    # While the attempt runs, its nodes have no end yet.
    live = [n.model_copy(update={"outcome": None, "restarts": None}) for n in nodes]
    running = job_detail(job(nodes=live), PIPED).split("Nodes\n", 1)[1].splitlines()
    assert running[1].split()[4:7] == ["running", "-", "-"]
    # A job of one node has no such table.
    assert "Nodes\n" not in job_detail(job(), PIPED)
