from __future__ import annotations

import signal

import pytest

from trainq.core.outcomes import Ending
from trainq.core.spec import JobSpec
from trainqd.scheduling.retry import MAX_LOST, RetryPolicy

POLICY = RetryPolicy()


@pytest.mark.parametrize("code", [6, 134, 11, 139])
def test_transient_exit_codes_are_retried(code: int) -> None:
    decision = POLICY.decide(Ending("exited", exit_code=code), [])
    assert decision.retry
    assert decision.counts


@pytest.mark.parametrize("signum", [signal.SIGABRT, signal.SIGSEGV])
def test_transient_signals_are_retried(signum: int) -> None:
    assert POLICY.decide(Ending("signaled", signal=signum), []).retry


@pytest.mark.parametrize(
    "ended",
    [
        Ending("exited", exit_code=1),
        Ending("exited", exit_code=2, reason="ExitCode 2"),
        Ending("signaled", signal=signal.SIGKILL),  # the OOM killer's signal
        Ending("signaled", signal=signal.SIGTERM),
        Ending("oom_killed", exit_code=137),
        Ending("stopped", exit_code=134),
        Ending("timed_out", signal=signal.SIGKILL),
        Ending("start_failed"),
        Ending("engine_error", exit_code=125),
        Ending("feeder_failed"),
        Ending("exited", exit_code=0),
    ],
)
def test_permanent_endings_are_not_retried(ended: Ending) -> None:
    assert not POLICY.decide(ended, []).retry


def test_toolkit_failure_file_exit_code_is_read() -> None:
    toolkit = Ending("exited", exit_code=1, reason='ExitCode 134\nErrorMessage "core dumped"')
    assert POLICY.decide(toolkit, []).retry
    other = Ending("exited", exit_code=1, reason='ExitCode 1\nErrorMessage "bad"')
    assert not POLICY.decide(other, []).retry


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGABRT])
def test_toolkit_negative_exit_code_is_a_transient_signal(signum: int) -> None:
    # The toolkit reports a user script killed by signal N as `ExitCode -N`.
    ended = Ending("exited", exit_code=1, reason=f'ExitCode -{signum}\nErrorMessage ""')
    decision = POLICY.decide(ended, [])
    assert decision.retry
    assert signal.Signals(signum).name in decision.why
    assert POLICY.retries_used([ended]) == 1


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_toolkit_negative_exit_code_of_other_signals_is_permanent(signum: int) -> None:
    ended = Ending("exited", exit_code=1, reason=f"ExitCode -{signum}")
    assert not POLICY.decide(ended, []).retry


def test_toolkit_negative_exit_code_follows_the_jobs_signal_rules() -> None:
    # A job that lists 137 (128 + SIGKILL) as transient retries `ExitCode -9` as well.
    policy = RetryPolicy(transient_codes=frozenset({137}))
    assert policy.decide(Ending("exited", exit_code=1, reason="ExitCode -9"), []).retry
    assert not policy.decide(Ending("exited", exit_code=1, reason="ExitCode -11"), []).retry


def test_retries_are_capped_and_back_off() -> None:
    crash = Ending("exited", exit_code=139)
    history: list[Ending] = []
    delays = []
    for _ in range(3):
        decision = POLICY.decide(crash, history)
        assert decision.retry
        delays.append(decision.delay)
        history.append(crash)
    assert delays == [2.0, 4.0, 8.0]
    final = POLICY.decide(crash, history)
    assert not final.retry
    assert "all 3 retries are used" in final.why


def test_permanent_failures_in_history_do_not_spend_retries() -> None:
    history = [Ending("exited", exit_code=1), Ending("lost")]
    assert POLICY.retries_used(history) == 0


def test_lost_attempts_have_their_own_budget() -> None:
    history: list[Ending] = []
    for _ in range(MAX_LOST):
        decision = POLICY.decide(Ending("lost"), history)
        assert decision.retry
        assert not decision.counts
        assert decision.delay == 0
        history.append(Ending("lost"))
    assert not POLICY.decide(Ending("lost"), history).retry
    # ...and lost attempts leave the job's own retries untouched.
    assert POLICY.decide(Ending("exited", exit_code=6), history).retry


def test_interrupted_attempts_share_the_host_budget() -> None:
    history = [Ending("lost"), Ending("interrupted")]
    decision = POLICY.decide(Ending("interrupted", exit_code=0), history)
    assert decision.retry
    assert not decision.counts
    history.append(Ending("interrupted"))
    assert not POLICY.decide(Ending("interrupted"), history).retry


def test_policy_from_spec() -> None:
    spec = JobSpec(command=["x"], max_retries=0, retry_exit_codes=[42], retry_backoff_seconds=0)
    policy = RetryPolicy.for_spec(spec)
    assert not policy.decide(Ending("exited", exit_code=42), []).retry
    spec = JobSpec(command=["x"], max_retries=1, retry_exit_codes=[42], retry_backoff_seconds=0)
    policy = RetryPolicy.for_spec(spec)
    assert policy.decide(Ending("exited", exit_code=42), []).delay == 0
    assert not policy.decide(Ending("exited", exit_code=6), []).retry
