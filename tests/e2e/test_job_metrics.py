"""Metrics from trainers that were not written for trainq: regexes over their stdout and
stderr (`metric_definitions`, `--metric`), and `/opt/ml/output/metrics.jsonl`; shown by
`trainq metrics`, `trainq show` and `GET /v1/jobs/{id}/metrics`, surviving trainqd's crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

# Prints `epoch N val_loss=V` and appends {"step": N, "acc": A} to metrics.jsonl; with a
# release file, waits for it after the first three epochs.
TRAINER = """
import json, os, sys, time
release = sys.argv[1] if len(sys.argv) > 1 else None
path = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "metrics.jsonl")
for epoch in range(1, 7):
    if epoch == 4 and release:
        while not os.path.exists(release):
            time.sleep(0.02)
    print(f"epoch {epoch} val_loss={1.0 / epoch:.4f}", flush=True)
    print(f"lr=0.{epoch}", file=sys.stderr, flush=True)
    with open(path, "a") as f:
        f.write(json.dumps({"step": epoch * 10, "acc": epoch / 10}) + "\\n")
"""
DEFINITIONS = [
    {"name": "val_loss", "regex": r"epoch (?P<step>\d+) val_loss=([-+0-9.eE]+)"},
    {"name": "lr", "regex": r"lr=([0-9.]+)", "direction": "maximize"},
]


def metrics(daemon: Daemon, job_id: int) -> dict[str, Any]:
    response = daemon.get(f"/v1/jobs/{job_id}/metrics")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def series(daemon: Daemon, job_id: int, attempt: int = 1) -> dict[str, Any]:
    found = [a for a in metrics(daemon, job_id)["attempts"] if a["number"] == attempt]
    return found[0]["series"] if found else {}


def test_reports_come_from_logs_and_metrics_jsonl(daemon: Daemon) -> None:
    job = daemon.submit(
        {"command": [sys.executable, "-c", TRAINER], "metric_definitions": DEFINITIONS}
    )
    assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    got = series(daemon, job["id"])
    assert set(got) == {"val_loss", "lr", "acc"}
    loss = got["val_loss"]
    assert loss["points"] == [[e, round(1.0 / e, 4)] for e in range(1, 7)]
    assert (loss["count"], loss["latest"], loss["best"]) == (6, [6, 0.1667], 0.1667)
    assert got["lr"]["points"] == [[n, n / 10] for n in range(1, 7)]  # step: reports so far
    assert (got["lr"]["direction"], got["lr"]["best"]) == ("maximize", 0.6)
    assert got["acc"]["points"] == [[e * 10, e / 10] for e in range(1, 7)]

    shown = daemon.cli("metrics", str(job["id"]))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "attempt 1"
    loss_line = next(line for line in lines if line.strip().startswith("val_loss"))
    assert "latest 0.1667 at step 6" in loss_line
    assert "best 0.1667 (min)" in loss_line
    assert loss_line.endswith("█▄▂▁▁▁")  # 1, 1/2, ... 1/6 as bars
    detail = daemon.cli("show", str(job["id"]))
    assert "metrics (attempt 1):" in detail.stdout
    assert "best 0.6 (max)" in detail.stdout


def test_metric_flags_and_their_refusals(daemon: Daemon, tmp_path: Path) -> None:
    submitted = daemon.cli(
        "submit",
        "--metric",
        r"val_loss=epoch (?P<step>\d+) val_loss=([0-9.]+)",
        "--wait",
        "--",
        sys.executable,
        "-c",
        TRAINER,
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[0])
    assert series(daemon, job_id)["val_loss"]["count"] == 6
    before = daemon.get("/v1/jobs", params={"all": "true"}).json()["total"]
    for flag, says in (
        ("loss=loss=(", "does not compile"),
        ("loss=loss=[0-9]+", "needs a group that captures the value"),
        ("9loss=(x)", "metric name '9loss' must be"),
    ):
        refused = daemon.cli("submit", "--metric", flag, "--", "true", cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert says in refused.stderr
    assert daemon.get("/v1/jobs", params={"all": "true"}).json()["total"] == before


def test_no_report_is_lost_or_read_twice_across_a_crash(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit(
        {
            "command": [sys.executable, "-c", TRAINER, str(release)],
            "metric_definitions": DEFINITIONS,
        }
    )
    saved = daemon.state_dir / "jobs" / str(job["id"]) / "attempts" / "1.metrics.json"

    def read_three() -> bool:
        if not saved.exists():
            return False
        kept = json.loads(saved.read_text())["series"]
        return bool(kept) and kept["val_loss"]["count"] == 3

    wait_for(read_three, timeout=30, what="three epochs read and saved")
    daemon.kill()
    release.touch()
    daemon.start()
    assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    got = series(daemon, job["id"])
    assert got["val_loss"]["points"] == [[e, round(1.0 / e, 4)] for e in range(1, 7)]
    assert got["lr"]["count"] == got["acc"]["count"] == 6
    assert saved.stat().st_mode & 0o777 == 0o600
