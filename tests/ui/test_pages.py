"""The pages in headless chromium against a real trainqd through a real `trainq ui`: what
they draw is what the API says, and a change reaches an open page without a reload."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.support.daemon import Daemon, python_job
from tests.support.ui import (
    Forwarder,
    cells,
    screenshot,
    until,
    write_gpus,
)

pytestmark = pytest.mark.ui

SLEEPER = {"command": ["sleep", "600"], "gpus": 1}


def test_the_box_page_shows_each_gpu_as_the_api_does_and_follows_its_readings(
    box: Daemon, ui: Forwarder, browser: Browser, gpu_file: Path
) -> None:
    job = box.submit({**SLEEPER, "name": "resnet"})
    box.wait_state(job["id"], "RUNNING")
    page = ui.open(browser, "#/box")
    api = box.get("/v1/gpus").json()["gpus"]
    until(lambda: cells(page, "#gpus tr[data-gpu] td.util") == ["37%", "81%"], "utilization")
    assert cells(page, "#gpus tr[data-gpu] td.mem") == [
        f"{gpu['memory_used_mib']} / {gpu['memory_total_mib']} MiB" for gpu in api
    ]
    holder = next(gpu for gpu in api if gpu["job_id"] == job["id"])
    held = page.locator(f"#gpus tr[data-gpu='{holder['index']}'] td").nth(2).inner_text()
    assert held == f"job {job['id']} (root)"

    # The fake GPUs get busier: the next samples reach the table and the chart's last points.
    write_gpus(gpu_file, [(64, 2048), (12, 512)])
    until(lambda: cells(page, "#gpus tr[data-gpu] td.util") == ["64%", "12%"], "new readings")
    until(
        lambda: (
            page.locator("figure[data-chart='GPU utilization']").get_attribute("data-series")
            == "[64,12]"
        ),
        "the chart's last samples",
    )
    assert page.locator("figure[data-chart='GPU utilization'] canvas").count() == 1
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "box")


def test_a_job_page_shows_its_states_attempts_and_log(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    job = box.submit({"command": ["sh", "-c", "echo hello from the trainer; exit 3"]})
    box.wait_state(job["id"], "FAILED")
    page = ui.open(browser, f"#/job/{job['id']}")
    api = box.job(job["id"])
    until(lambda: "failed" in cells(page, "#states li .state"), "the states")
    assert cells(page, "#states li .state")[0] == "pending"
    assert page.locator("#states li").last.get_attribute("data-state") == "FAILED"
    attempt = page.locator("#attempts tr[data-attempt='1'] td").all_inner_texts()
    assert attempt[4] == api["attempts"][0]["outcome"]
    assert attempt[5] == "3"
    until(lambda: "hello from the trainer" in page.locator("#log").inner_text(), "the log")
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "job")


def test_a_submitted_job_shows_on_the_open_queue_page(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    running = box.submit({**SLEEPER, "gpus": 2})
    box.wait_state(running["id"], "RUNNING")
    page = ui.open(browser, "#/queue")
    until(lambda: page.locator("#live").inner_text() == "live", "the events stream")
    until(lambda: page.locator(f"#queue tr[data-job='{running['id']}']").count() == 1, "queue")

    waiting = box.submit({**SLEEPER, "name": "second"})  # no GPU left: it waits, first in line
    row = page.locator(f"#queue tr[data-job='{waiting['id']}']")
    until(lambda: row.count() == 1, "the new job, without a reload")
    api = box.job(waiting["id"])
    texts = row.locator("td").all_inner_texts()
    assert texts[3] == "pending"
    assert texts[5] == str(api["place"])
    assert texts[6] == api["pending_reason"]
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "queue")


def test_a_waiting_job_of_several_nodes_shows_the_gpus_of_all_its_nodes(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    gang = box.submit({**SLEEPER, "instance_count": 2, "gpus": 1})
    assert box.cli("hold", str(gang["id"])).returncode == 0  # kept waiting, as queued
    page = ui.open(browser, "#/queue")
    row = page.locator(f"#queue tr[data-job='{gang['id']}']")
    until(lambda: row.count() == 1, "the held gang")
    assert row.locator("td").all_inner_texts()[4] == "2"  # two nodes of one GPU each
    job_page = ui.open(browser, f"#/job/{gang['id']}")
    until(lambda: "2 nodes" in job_page.locator("#spec").inner_text(), "the job's spec")
    assert "GPUs\n2 (2 nodes \u00d7 1)" in job_page.locator("#spec").inner_text()
    assert page.script_errors == []  # type: ignore[attr-defined]
    assert job_page.script_errors == []  # type: ignore[attr-defined]


def test_a_job_page_lists_its_nodes_and_how_each_ended(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    # algo-2 exits 139 once, is restarted in place, then exits 0 (gang_node.py flaky).
    spec = python_job("gang_node.py", "flaky", "1", "1", instance_count=2, restart="node")
    gang = box.submit({**spec, "max_retries": 0})
    assert box.wait_state(gang["id"], timeout=60)["state"] == "COMPLETED"
    page = ui.open(browser, f"#/job/{gang['id']}")
    until(lambda: page.locator("#nodes tr[data-node]").count() == 2, "the job's nodes")
    rows = [page.locator(f"#nodes tr[data-node='algo-{i}'] td").all_inner_texts() for i in (1, 2)]
    assert rows == [
        ["algo-1", "homogeneousCluster", "0", "none", "exited", "0", "0"],
        ["algo-2", "homogeneousCluster", "1", "none", "exited", "0", "1"],
    ]
    assert page.script_errors == []  # type: ignore[attr-defined]


def test_the_users_page_and_a_phone_width(box: Daemon, ui: Forwarder, browser: Browser) -> None:
    job = box.submit(SLEEPER)
    box.wait_state(job["id"], "RUNNING")
    page = ui.open(browser, "#/users", width=375)
    until(lambda: page.locator("#users tr[data-user='root']").count() == 1, "the users")
    row = page.locator("#users tr[data-user='root'] td").all_inner_texts()
    assert row[3] == "1 (1 GPUs)"
    # Nothing wider than the phone's screen but the scrolling tables themselves.
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    # Keyboard: from one link Tab reaches the next, and Enter follows it.
    page.focus("nav a[href='#/box']")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Queue"
    page.keyboard.press("Enter")
    until(lambda: page.locator("#queue").count() == 1, "the queue page")
    assert page.evaluate("document.activeElement.id") == "view"  # focus moves to the page
    screenshot(page, "users-phone")


def test_the_reports_page_draws_the_apis_report(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    for _ in range(2):
        job = box.submit({"command": ["true"], "gpus": 1})
        box.wait_state(job["id"], "COMPLETED")
    page = ui.open(browser, "#/reports?since=1d&by=user")
    row = page.locator("#report tr[data-row='root'] td")
    until(lambda: row.count() == 8, "the report")
    [api] = box.get("/v1/report?since=1d&by=user").json()["rows"]
    texts = row.all_inner_texts()
    assert texts[1] == f"{api['gpu_hours']:.2f}"
    assert texts[4:6] == [str(api["jobs"]), str(api["completed"])] == ["2", "2"]
    assert page.locator("#report .bar").count() == 1
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "reports")


def test_a_running_jobs_page_draws_the_samples_trainqd_keeps(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    job = box.submit(SLEEPER)
    box.wait_state(job["id"], "RUNNING")
    kept = until(
        lambda: (got := box.get(f"/v1/jobs/{job['id']}/samples").json())["samples"][1:] and got,
        "two samples of the running attempt",
    )
    assert kept["attempt"] == 1
    [gpu] = [g for g in box.get("/v1/gpus").json()["gpus"] if g["job_id"] == job["id"]]
    assert kept["samples"][-1]["utilization_percent"] == gpu["utilization_percent"]
    page = ui.open(browser, f"#/job/{job['id']}")
    figure = page.locator('figure[data-chart="This job\'s GPU utilization"]')
    until(lambda: figure.count() == 1, "the job's chart")
    assert figure.get_attribute("data-series") == f"[{gpu['utilization_percent']:g}]"
    assert figure.locator("canvas").count() == 1
    # Stopped while the page is open: its states and its summary follow, without a reload.
    box.post(f"/v1/jobs/{job['id']}/stop", json={"grace_seconds": 1})
    until(lambda: "stopped" in cells(page, "#states li .state"), "the stop, live")
    until(lambda: page.locator("#summary .state").inner_text() == "stopped", "the summary")
    assert box.get("/v1/jobs/999/samples").status_code == 404
    ended = box.submit({"command": ["true"]})
    box.wait_state(ended["id"], "COMPLETED")
    assert box.get(f"/v1/jobs/{ended['id']}/samples").json() == {
        "job_id": ended["id"],
        "attempt": None,
        "samples": [],
    }
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "job-running")
