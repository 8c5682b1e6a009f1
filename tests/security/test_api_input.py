"""Odd API input gets one clean 4xx, never a 500, a traceback or a hang.

A local user sends what the CLI never would: job ids beyond SQLite's integers or not numbers
at all, `HEAD` requests, and numbers written as strings or booleans. Each gets its 4xx with the
usual one-line error, the daemon logs no traceback, and another user is still served.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, trainer
from tests.support.users import http_as, submit_as, trainq_as

pytestmark = pytest.mark.multiuser

HUGE = "99999999999999999999999"
JUST_OVER = str(2**63)  # one past SQLite's largest integer


def still_serves_others(daemon: Daemon, accounts: Accounts) -> None:
    done = trainq_as(daemon, accounts.bob, "health")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in daemon.log(), daemon.log()


def error_code(body: Any) -> str:
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), dict), body
    assert body["error"]["message"], body
    assert "\n" not in body["error"]["message"], body
    return str(body["error"]["code"])


def quick_job() -> dict[str, Any]:
    return {"command": [sys.executable, trainer("exit_with.py"), "0"]}


def refused_job(daemon: Daemon, accounts: Accounts, extra: dict[str, Any]) -> Any:
    """Alice's quick job with `extra` is refused as an invalid spec; trainqd serves bob."""
    status, body = http_as(daemon, accounts.alice, "POST", "/v1/jobs", {**quick_job(), **extra})
    assert status == 400, body
    assert error_code(body) == "invalid_spec"
    still_serves_others(daemon, accounts)
    return body


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", f"/v1/jobs/{HUGE}", 404),
        ("GET", f"/v1/jobs/{JUST_OVER}", 404),
        ("POST", f"/v1/jobs/{HUGE}/stop", 404),
        ("GET", f"/v1/jobs/{HUGE}/logs", 404),
        ("GET", f"/v1/jobs/{JUST_OVER}/logs?follow=true", 404),
        ("GET", "/v1/jobs/%C2%B2", 400),  # "²": a digit to str.isdigit, not to int()
        ("GET", "/v1/jobs/%D9%A1", 400),  # an Arabic-Indic one
        ("GET", f"/v1/events?job={HUGE}", 400),
        ("GET", f"/v1/events?since={HUGE}", 400),
        ("GET", f"/v1/events?since={JUST_OVER}", 400),
    ],
)
def test_job_ids_out_of_range_or_not_numbers_are_a_clean_4xx(
    workstation: Daemon, accounts: Accounts, method: str, path: str, status: int
) -> None:
    job = submit_as(workstation, accounts.alice, quick_job())
    assert job["id"] == 1
    got, body = http_as(workstation, accounts.alice, method, path)
    assert got == status, body
    assert error_code(body) == ("not_found" if status == 404 else "invalid_request")
    still_serves_others(workstation, accounts)


def test_head_requests_get_a_reply_without_a_body(workstation: Daemon, accounts: Accounts) -> None:
    job = submit_as(workstation, accounts.alice, quick_job())
    for path in ("/v1/health", "/v1/jobs", f"/v1/jobs/{job['id']}", "/v1/gpus"):
        status, body = http_as(workstation, accounts.alice, "HEAD", path)
        assert status == 200, (path, status)
        assert body is None, (path, body)
    for path, status in ((f"/v1/jobs/{HUGE}", 404), ("/v1/nowhere", 404)):
        got, body = http_as(workstation, accounts.alice, "HEAD", path)
        assert got == status, (path, got)
        assert body is None
    # A stream's HEAD answers at once: the head of the answer, no stream held open.
    for path in ("/v1/events", f"/v1/jobs/{job['id']}/logs?follow=true"):
        status, body = http_as(workstation, accounts.alice, "HEAD", path)
        assert status == 200, (path, status)
        assert body is None
    status, _ = http_as(workstation, accounts.alice, "HEAD", "/v1/jobs/1/stop")
    assert status == 405
    still_serves_others(workstation, accounts)


def channel(**options: Any) -> dict[str, Any]:
    return {"data": {"source": "/tmp", "mode": "Pipe", **options}}


@pytest.mark.parametrize(
    "extra",
    [
        {"gpus": "2"},
        {"gpus": True},
        {"gpus": 1.0},
        {"priority": "5"},
        {"priority": False},
        {"max_runtime_seconds": "60"},
        {"max_runtime_seconds": True},
        {"stop_grace_seconds": "5"},
        {"stop_grace_seconds": True},
        {"max_retries": "1"},
        {"max_retries": True},
        {"retry_backoff_seconds": "1"},
        {"retry_backoff_seconds": False},
        {"retry_exit_codes": ["6"]},
        {"retry_exit_codes": [True]},
        {"channels": channel(epochs="2")},
        {"channels": channel(epochs=True)},
        {"channels": channel(shuffle_seed="7")},
        {"channels": channel(shuffle_seed=True)},
    ],
)
def test_numbers_given_as_strings_or_booleans_are_refused(
    workstation: Daemon, accounts: Accounts, extra: dict[str, Any]
) -> None:
    body = refused_job(workstation, accounts, extra)
    assert next(iter(extra)) in body["error"]["message"]


def test_a_stop_grace_given_as_a_string_or_boolean_is_refused(
    workstation: Daemon, accounts: Accounts
) -> None:
    job = submit_as(workstation, accounts.alice, quick_job())
    for grace in ("5", True):
        status, body = http_as(
            workstation,
            accounts.alice,
            "POST",
            f"/v1/jobs/{job['id']}/stop",
            {"grace_seconds": grace},
        )
        assert status == 400, body
        assert error_code(body) == "invalid_request"
    still_serves_others(workstation, accounts)


def test_numbers_of_the_right_type_are_still_accepted(
    workstation: Daemon, accounts: Accounts
) -> None:
    spec = {
        **quick_job(),
        "gpus": 1,
        "priority": -3,
        "max_runtime_seconds": 600,
        "stop_grace_seconds": 5,  # an integer where a float is asked for is fine
        "retry_backoff_seconds": 0.5,
        "max_retries": 0,
    }
    job = submit_as(workstation, accounts.bob, spec)
    assert workstation.wait_state(job["id"], timeout=30)["state"] == "COMPLETED"


@pytest.mark.parametrize(
    "extra",
    [
        {"name": "run\n"},
        {"environment": {"HTTPS_PROXY\n": "1"}},  # a bare NAME line in an env file
        {"channels": {"train\n": {"source": "/tmp"}}},
        {"metric_definitions": [{"name": "loss\n", "regex": "loss=([0-9.]+)"}]},
        {"instance_groups": [{"name": "workers\n", "instance_count": 2}]},
    ],
)
def test_a_name_ending_in_a_line_break_is_refused(
    workstation: Daemon, accounts: Accounts, extra: dict[str, Any]
) -> None:
    """A regex's `$` also matches before a final newline: each name is checked whole."""
    refused_job(workstation, accounts, extra)


@pytest.mark.parametrize(
    "space",
    [
        {"lr": {"int": [0, 10**12]}},  # counted, never listed (10^9 would fill the memory)
        {"lr": {"int": [0, 10**400]}},  # no float holds an end
        {"lr": {"choice": [1, 2]}, "wd": {"int": [-(10**400), 0]}},
    ],
    ids=["huge-grid", "huge-end", "huge-low-end"],
)
def test_a_tune_whose_range_is_out_of_bounds_is_refused_in_one_line(
    workstation: Daemon, accounts: Accounts, space: dict[str, Any]
) -> None:
    tune = {"objective": "loss", "search": "grid", "max_trials": 4, "space": space}
    status, body = http_as(
        workstation, accounts.alice, "POST", "/v1/tunes", {"spec": quick_job(), "tune": tune}
    )
    assert status == 400, body
    assert error_code(body) in {"invalid_spec", "invalid_request"}
    assert len(body["error"]["message"]) < 1000, body
    still_serves_others(workstation, accounts)


def test_a_hyperparameter_nested_past_the_recursion_limit_is_taken_as_text(
    workstation: Daemon, accounts: Accounts
) -> None:
    """trainqd decodes hyperparameters as JSON where they parse (as SageMaker's toolkit
    does): one nested deeper than Python recurses is a string like any other."""
    nested = "[" * 2500  # the longest a value may be
    for name in ("depth", "sagemaker_submit_directory"):
        spec = {**quick_job(), "hyperparameters": {name: nested}}
        status, job = http_as(workstation, accounts.alice, "POST", "/v1/jobs", spec)
        assert status == 201, job
        done = workstation.wait_state(job["id"], timeout=30)
        assert done["state"] == "COMPLETED", done
    still_serves_others(workstation, accounts)
