"""The engine side of container attempts: the commands it runs, and how an ambiguous exit
status (125-127, or 137 for out-of-memory) is settled by what inspect says."""

from __future__ import annotations

import pytest

from trainqd.monitor import container
from trainqd.monitor.container import ContainerState, parse_state, resolve_exit
from trainqd.monitor.records import ContainerLaunch

PODMAN = ContainerLaunch(engine="podman", engine_path="/usr/bin/podman", name="trainq-7-1")
DOCKER = ContainerLaunch(engine="docker", engine_path="/usr/bin/docker", name="trainq-7-2")

# What `podman inspect --format '{{json .State}}'` printed on this machine.
NEVER_STARTED = (
    '{"OciVersion":"1.0.2-dev","Status":"created","Running":false,"Paused":false,'
    '"Restarting":false,"OOMKilled":false,"Dead":false,"Pid":0,"ExitCode":0,"Error":"",'
    '"StartedAt":"0001-01-01T00:00:00Z","FinishedAt":"0001-01-01T00:00:00Z"}'
)
EXITED_127 = (
    '{"Status":"exited","Running":false,"OOMKilled":false,"Pid":0,"ExitCode":127,'
    '"StartedAt":"2026-11-22T18:36:53.790055887Z","FinishedAt":"2026-11-22T18:36:53.797Z"}'
)
OOM = '{"Status":"exited","OOMKilled":true,"ExitCode":137,"StartedAt":"2026-11-22T18:00:00Z"}'


def test_engine_commands() -> None:
    assert container.stop_argv(PODMAN, 120) == [
        "/usr/bin/podman", "stop", "-t", "120", "trainq-7-1",
    ]  # fmt: skip
    assert container.stop_argv(DOCKER, 2.1)[2:4] == ["-t", "3"]  # never cut short
    assert container.stop_argv(DOCKER, 0)[2:4] == ["-t", "0"]
    assert container.kill_argv(PODMAN) == ["/usr/bin/podman", "kill", "trainq-7-1"]
    assert container.remove_argv(DOCKER) == [
        "/usr/bin/docker", "rm", "--force", "--volumes", "trainq-7-2"
    ]  # fmt: skip
    assert container.inspect_argv(PODMAN) == [
        "/usr/bin/podman", "inspect", "--type", "container",
        "--format", "{{json .State}}", "trainq-7-1",
    ]  # fmt: skip


def test_inspect_output_is_read_defensively() -> None:
    never = parse_state(NEVER_STARTED)
    assert never is not None
    assert (never.started, never.exit_code, never.oom_killed) == (False, 0, False)
    ran = parse_state(EXITED_127)
    assert ran is not None
    assert (ran.started, ran.exit_code, ran.oom_killed) == (True, 127, False)
    oom = parse_state(OOM)
    assert oom is not None
    assert oom.oom_killed
    assert parse_state("not json") is None
    assert parse_state("[]") is None
    odd = parse_state('{"ExitCode": true, "OOMKilled": "yes", "StartedAt": 5}')
    assert odd is not None
    assert (odd.started, odd.exit_code, odd.oom_killed) == (False, None, False)


@pytest.mark.parametrize("status", [125, 126, 127])
def test_an_ambiguous_status_from_a_container_that_never_ran_is_an_engine_error(
    status: int,
) -> None:
    for state in (None, ContainerState(started=False, exit_code=0, oom_killed=False)):
        ending = resolve_exit("podman", status, state, "Error: runc create failed\nexec: nosuchcmd")
        assert ending is not None
        assert (ending.outcome, ending.exit_code) == ("engine_error", status)
        assert ending.reason == (
            f"podman failed (exit {status}): Error: runc create failed\nexec: nosuchcmd"
        )
    quiet = resolve_exit("docker", status, None, None)
    assert quiet is not None
    assert quiet.reason == f"docker failed (exit {status}): no output"


def test_an_ambiguous_status_from_a_container_that_ran_is_the_trainers_own() -> None:
    state = ContainerState(started=True, exit_code=127, oom_killed=False)
    assert resolve_exit("podman", 127, state, "trainer: command not found") is None


def test_out_of_memory_is_told_apart_from_other_kills() -> None:
    oom = resolve_exit("podman", 137, ContainerState(True, 137, True), None)
    assert oom is not None
    assert (oom.outcome, oom.exit_code) == ("oom_killed", 137)
    assert resolve_exit("podman", 137, ContainerState(True, 137, False), None) is None
    assert resolve_exit("podman", 137, None, None) is None


def test_only_the_ambiguous_statuses_are_inspected() -> None:
    assert {1, 125, 126, 127, 137} == container.INSPECTED_STATUSES
    for status in (0, 2, 124, 128, 134, 139, 143):
        assert status not in container.INSPECTED_STATUSES
