"""A job's reported metrics drawn as curves on its page, as `GET /v1/jobs/{id}/metrics` gives
them, following the trainer while it reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.support.daemon import Daemon
from tests.support.ui import Forwarder, screenshot, until

pytestmark = pytest.mark.ui

# Prints `epoch N loss=V` and `lr=...`; after three epochs waits for the release file.
TRAINER = """
import os, sys, time
for epoch in range(1, 7):
    if epoch == 4:
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.02)
    print(f"epoch {epoch} loss={1.0 / epoch:.4f}", flush=True)
    print(f"lr=0.{epoch}", flush=True)
"""
DEFINITIONS = [
    {"name": "loss", "regex": r"epoch (?P<step>\d+) loss=([-+0-9.eE]+)"},
    {"name": "lr", "regex": r"lr=([0-9.]+)", "direction": "maximize"},
]


def drawn(page: Page, name: str) -> Any:
    """The points a metric's chart was drawn from: [[attempt, [[step, value], ...]], ...]."""
    figure = page.locator(f"#job-metrics figure[data-metric='{name}']")
    return json.loads(figure.get_attribute("data-points")) if figure.count() == 1 else None


def test_a_jobs_metrics_are_drawn_as_the_api_gives_them_and_follow_the_trainer(
    box: Daemon, ui: Forwarder, browser: Browser, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    command = [sys.executable, "-c", TRAINER, str(release)]
    job = box.submit({"command": command, "metric_definitions": DEFINITIONS})
    box.wait_state(job["id"], "RUNNING")
    path = f"/v1/jobs/{job['id']}/metrics"

    def reported() -> int:
        attempts = box.get(path).json()["attempts"]
        return attempts[0]["series"].get("loss", {}).get("count", 0) if attempts else 0

    # Bounded generously: on a loaded machine the trainer and the once-a-second reader lag.
    until(lambda: reported() == 3, "three epochs reported", timeout=60)
    page = ui.open(browser, f"#/job/{job['id']}")
    until(lambda: drawn(page, "loss") is not None, "the loss chart")
    three = [[e, round(1.0 / e, 4)] for e in range(1, 4)]
    assert drawn(page, "loss") == [[1, three]]

    # The trainer goes on while the page is open: its end brings the last reports, no reload.
    release.touch()
    box.wait_state(job["id"], "COMPLETED")
    [attempt] = box.get(path).json()["attempts"]
    loss = attempt["series"]["loss"]
    assert loss["points"] == [[e, round(1.0 / e, 4)] for e in range(1, 7)]
    until(lambda: drawn(page, "loss") == [[1, loss["points"]]], "all six epochs, live")
    until(lambda: drawn(page, "lr") == [[1, attempt["series"]["lr"]["points"]]], "the lr")
    figures = page.locator("#job-metrics figure")
    assert figures.count() == len(attempt["series"]) == 2
    assert page.locator("#job-metrics figure canvas").count() == 2  # uPlot drew each
    caption = page.locator("#job-metrics figure[data-metric='loss'] figcaption").inner_text()
    assert f"latest {loss['latest'][1]} at step 6" in caption
    assert f"best {loss['best']} (min)" in caption
    lr_caption = page.locator("#job-metrics figure[data-metric='lr'] figcaption").inner_text()
    assert "best 0.6 (max)" in lr_caption
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "job-metrics")


def test_a_job_without_metrics_says_so(box: Daemon, ui: Forwarder, browser: Browser) -> None:
    job = box.submit({"command": ["true"]})
    box.wait_state(job["id"], "COMPLETED")
    assert box.get(f"/v1/jobs/{job['id']}/metrics").json()["attempts"][0]["series"] == {}
    page = ui.open(browser, f"#/job/{job['id']}")
    until(lambda: page.locator("#job-metrics").inner_text() == "No metrics reported.", "the note")
    assert page.script_errors == []  # type: ignore[attr-defined]


# Attempt 1 reports steps 1-3 and exits 75 (retried); attempt 2 reports steps 2-4 and ends.
RETRIED = """
import os, sys
attempt = int(os.environ["TRAINQ_ATTEMPT"])
for step in range(attempt, attempt + 3):
    print(f"epoch {step} loss={attempt + step / 10:.1f}", flush=True)
sys.exit(75 if attempt == 1 else 0)
"""


def test_each_attempt_is_a_line_of_its_own_over_the_steps(
    box: Daemon, ui: Forwarder, browser: Browser
) -> None:
    job = box.submit(
        {
            "command": [sys.executable, "-c", RETRIED],
            "metric_definitions": DEFINITIONS[:1],
            "retry_exit_codes": [75],
            "retry_backoff_seconds": 0,
        }
    )
    assert box.wait_state(job["id"])["state"] == "COMPLETED"
    attempts = box.get(f"/v1/jobs/{job['id']}/metrics").json()["attempts"]
    assert [a["number"] for a in attempts] == [1, 2]
    page = ui.open(browser, f"#/job/{job['id']}")
    until(lambda: drawn(page, "loss") is not None, "the loss chart")
    assert drawn(page, "loss") == [[a["number"], a["series"]["loss"]["points"]] for a in attempts]
    # uPlot draws both lines in one chart, its legend naming each.
    legend = "#job-metrics figure[data-metric='loss'] .u-legend .u-series th"
    lines = [text.strip() for text in page.locator(legend).all_inner_texts()]
    assert lines == ["step", "attempt 1", "attempt 2"]
    caption = page.locator("#job-metrics figure[data-metric='loss'] figcaption").inner_text()
    assert "latest 2.4 at step 4" in caption  # the last attempt's
    assert page.script_errors == []  # type: ignore[attr-defined]
    screenshot(page, "job-metrics-retried")
