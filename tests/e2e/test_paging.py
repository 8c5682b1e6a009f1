"""Job listings in pages: a cursor that continues where the last page ended, filters applied
before paging, and `trainq ls` showing one page with a count while `--all` lists every job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.daemon import Daemon, python_job

QUEUED = 249  # behind one blocker: 250 jobs in all


@pytest.fixture(scope="module")
def listed(shared_daemon: Daemon) -> Daemon:
    # One job holds every GPU; the rest wait behind it, so the listing stays put while read.
    blocker = shared_daemon.submit(python_job("sleeper.py", gpus=4, name="blocker"))
    shared_daemon.wait_state(blocker["id"], "RUNNING")
    for n in range(QUEUED):
        spec = python_job("sleeper.py", gpus=4, name=f"q{n}")
        if n % 2:
            spec["priority"] = 1
        shared_daemon.submit(spec)
    return shared_daemon


def page(daemon: Daemon, **query: Any) -> dict[str, Any]:
    response = daemon.get("/v1/jobs", params=query)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_pages_continue_from_the_cursor(listed: Daemon) -> None:
    first = page(listed)
    assert len(first["jobs"]) == 100
    assert first["total"] == QUEUED + 1
    ids = [j["id"] for j in first["jobs"]]
    cursor = first["next"]
    while cursor:
        following = page(listed, after=cursor)
        assert following["total"] == QUEUED + 1
        ids += [j["id"] for j in following["jobs"]]
        cursor = following["next"]
    assert len(ids) == QUEUED + 1
    assert ids == sorted(set(ids))  # in id order, none twice, none left out
    assert len(page(listed, limit=250)["jobs"]) == QUEUED + 1
    assert page(listed, limit=250)["next"] is None


def test_filters_apply_before_paging(listed: Daemon) -> None:
    pending = page(listed, state="PENDING", limit=1000)
    assert pending["total"] == QUEUED
    assert {j["state"] for j in pending["jobs"]} == {"PENDING"}
    running = page(listed, state="RUNNING")
    assert [j["name"] for j in running["jobs"]] == ["blocker"]
    assert running["next"] is None
    nobody = page(listed, user="no-such-user", all=True)
    assert nobody == {"jobs": [], "total": 0, "next": None}


@pytest.mark.parametrize("query", [{"limit": 0}, {"limit": 1001}, {"after": -1}, {"limit": "x"}])
def test_bad_page_parameters_are_refused(listed: Daemon, query: dict[str, Any]) -> None:
    response = listed.get("/v1/jobs", params=query)
    assert response.status_code == 400, response.text
    assert page(listed)["total"] == QUEUED + 1  # and the daemon still answers


def test_ls_shows_one_page_and_says_how_many(listed: Daemon) -> None:
    shown = listed.cli("ls")
    assert shown.returncode == 0, shown.stderr
    assert f"showing 100 of {QUEUED + 1}" in shown.stderr
    assert "--all" in shown.stderr
    every = listed.cli("ls", "--all", "--json")
    assert every.returncode == 0, every.stderr
    jobs = json.loads(every.stdout)["jobs"]
    assert len(jobs) == QUEUED + 1
    assert len({j["id"] for j in jobs}) == QUEUED + 1
    quiet = listed.cli("ls", "--all")
    assert quiet.returncode == 0, quiet.stderr
    assert "showing" not in quiet.stderr
