"""The queue page's timeline: which job held which GPU when, one row per GPU and one bar per
attempt, drawn from the jobs' attempts as `GET /v1/jobs?all=true` gives them."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page

from tests.support.daemon import Daemon
from tests.support.ui import Forwarder, screenshot, until

pytestmark = pytest.mark.ui


def bars(page: Page) -> dict[tuple[int, int, int], dict[str, str]]:
    """Each bar drawn: (gpu, job, attempt) -> its start, end, state and words."""
    found = page.evaluate(
        """() => [...document.querySelectorAll("#timeline g[data-gpu] g.tl-bar")].map((bar) => ({
            gpu: bar.parentNode.dataset.gpu, job: bar.dataset.job, attempt: bar.dataset.attempt,
            start: bar.dataset.start, end: bar.dataset.end, state: bar.dataset.state,
            label: bar.querySelector("a").getAttribute("aria-label"),
            title: bar.querySelector("title").textContent,
            text: bar.querySelector("text")?.textContent ?? null }))"""
    )
    return {(int(b["gpu"]), int(b["job"]), int(b["attempt"])): b for b in found}


def test_the_timeline_shows_which_job_held_which_gpu_and_follows_the_queue(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    both = box.submit({"command": ["true"], "gpus": 2, "name": "both"})
    box.wait_state(both["id"], "COMPLETED")
    failed = box.submit({"command": ["sh", "-c", "exit 3"], "gpus": 1})
    box.wait_state(failed["id"], "FAILED")
    running = box.submit({"command": ["sleep", "600"], "gpus": 1})
    box.wait_state(running["id"], "RUNNING")
    waiting = box.submit({"command": ["sleep", "600"], "gpus": 2})  # never held a GPU

    page = ui.open(browser, "#/queue")
    until(lambda: page.locator("#live").inner_text() == "live", "the events stream")
    until(lambda: page.locator("#timeline g[data-gpu]").count() == 2, "a row per GPU")
    jobs = box.get("/v1/jobs", params={"all": "true"}).json()["jobs"]
    expected = {
        (gpu, job["id"], a["number"]): (job, a)
        for job in jobs
        for a in job["attempts"]
        for gpu in a["gpus"]
    }
    assert len(expected) == 4  # two GPUs of `both`, one each of the others
    until(lambda: bars(page).keys() == expected.keys(), "a bar per attempt per GPU held")
    drawn = bars(page)
    for key, (job, attempt) in expected.items():
        bar = drawn[key]
        assert bar["start"] == attempt["started_at"]
        assert bar["end"] == (attempt["ended_at"] or "")
        assert bar["label"] == bar["title"]
        assert f"job {job['id']} (root" in bar["label"]
    states = {key[1]: bar["state"] for key, bar in drawn.items()}
    assert states == {both["id"]: "COMPLETED", failed["id"]: "FAILED", running["id"]: "RUNNING"}
    assert (
        "failed, attempt 1: exited 3"
        in drawn[next(k for k in drawn if k[1] == failed["id"])]["label"]
    )
    assert all(key[1] != waiting["id"] for key in drawn)
    # Every attempt began moments ago: the shortest span, not six hours of empty rows.
    caption = page.locator("figure.timeline figcaption").inner_text()
    assert caption == "Which job held which GPU, the last 10 minutes"
    screenshot(page, "queue-timeline")

    # By keyboard: Tab reaches a bar, Enter opens its job's page.
    page.focus("#queue tbody tr:last-child a")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#timeline g.tl-bar') !== null")
    page.focus(f"#timeline g[data-job='{failed['id']}'] a")
    page.keyboard.press("Enter")
    until(lambda: page.locator("#attempts").count() == 1, "the failed job's page")
    assert page.locator("h1").inner_text().startswith(f"Job {failed['id']}:")
    page.go_back()
    until(lambda: len(bars(page)) == len(expected), "the timeline again")

    # The running job stops: its bar ends, and the waiting one's bars start, without a reload.
    box.post(f"/v1/jobs/{running['id']}/stop", json={"grace_seconds": 1})
    box.wait_state(waiting["id"], "RUNNING")
    until(
        lambda: sum(key[1] == waiting["id"] for key in bars(page)) == 2,
        "the next job's bars, live",
    )
    [ended] = box.job(running["id"])["attempts"]
    until(
        lambda: (
            next(b for k, b in bars(page).items() if k[1] == running["id"])["end"]
            == ended["ended_at"]
        ),
        "the stopped job's bar ends",
    )
    # Redrawn, the ended jobs' bars stay: they ended within the timeline's hours.
    assert {key for key in expected if key[1] in (both["id"], failed["id"])} <= bars(page).keys()
    assert page.script_errors == []  # type: ignore[attr-defined]

    # At a phone's width the timeline scrolls in its own box; the page does not widen.
    phone = ui.open(browser, "#/queue", width=375)
    until(lambda: len(bars(phone)) == len(bars(page)), "the timeline on a phone")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375
    screenshot(phone, "queue-timeline-phone")


def test_the_timeline_reads_every_page_of_the_job_list(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    holder = box.submit({"command": ["sleep", "600"], "gpus": 1})
    box.wait_state(holder["id"], "RUNNING")
    # A page of jobs that wait for both GPUs and hold none, in one request (one transaction).
    waiting = box.post("/v1/jobs", json=[{"command": ["true"], "gpus": 2}] * 1000)
    assert waiting.status_code == 201, waiting.text
    late = box.submit({"command": ["true"], "gpus": 1, "priority": 100})
    assert late["id"] > 1001  # on the list's second page
    box.wait_state(late["id"], "COMPLETED")
    listed = box.get("/v1/jobs", params={"all": "true", "limit": 1000}).json()
    assert listed["next"] is not None
    assert late["id"] not in [j["id"] for j in listed["jobs"]]

    page = ui.open(browser, "#/queue")
    until(lambda: {key[1] for key in bars(page)} == {holder["id"], late["id"]}, "both bars")
    assert page.script_errors == []  # type: ignore[attr-defined]
