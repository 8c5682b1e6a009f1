"""Group commit with real processes: submissions from several connections at once share
commits (fewer commits than submissions), and every submission trainqd acknowledged is
there after trainqd is killed with SIGKILL in the middle of them and started again."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import TRAINERS, Daemon
from tests.support.waiting import wait_for

WORKERS = 8
ACKED = 400  # acknowledged submissions before the kill
# A client that submits until trainqd goes away, writing each acknowledged job down only
# once its answer has come: every line is a submission trainqd said was durable.
WORKER = """
import sys
from trainq import Client, TrainqError

socket, tag, out = sys.argv[1:4]
client = Client(socket, busy_retry_seconds=10)
with open(out, "a") as acks:
    for n in range(1_000_000):
        spec = {"name": f"{tag}-{n}", "command": ["true"], "gpus": 1}
        try:
            _, job = client.request("POST", "/v1/jobs", json=spec)
        except TrainqError:
            break
        acks.write(f"{job['id']} {tag}-{n}\\n")
        acks.flush()
"""


def commits(daemon: Daemon) -> float:
    text = daemon.get("/v1/metrics").text
    found = re.search(r"^trainq_database_commits_total (\S+)$", text, re.MULTILINE)
    assert found is not None, text
    return float(found[1])


def acknowledged(files: list[Path]) -> dict[int, str]:
    acked: dict[int, str] = {}
    for path in files:
        if path.exists():
            for line in path.read_text().splitlines():
                job_id, name = line.split()
                acked[int(job_id)] = name
    return acked


def test_concurrent_submits_share_commits_and_survive_sigkill(
    daemon: Daemon, tmp_path: Path
) -> None:
    # The GPU is held, so the submissions queue and nothing else writes meanwhile.
    holder = daemon.submit({"command": [sys.executable, str(TRAINERS / "sleeper.py"), "600"],
                            "gpus": 4})["id"]  # fmt: skip
    daemon.wait_state(holder, "RUNNING")
    before = commits(daemon)
    files = [tmp_path / f"acks-{n}" for n in range(WORKERS)]
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(daemon.socket), f"w{n}", str(path)])
        for n, path in enumerate(files)
    ]
    try:
        wait_for(lambda: len(acknowledged(files)) >= ACKED, timeout=60, what="acknowledged submits")
        during = commits(daemon)
        submitted = len(acknowledged(files))
        assert daemon.proc is not None
        daemon.kill()  # SIGKILL, with submissions in flight
        for worker in workers:
            assert worker.wait(timeout=30) == 0
    finally:
        for worker in workers:
            worker.kill()
    # Fewer commits than submissions: concurrent ones shared theirs.
    assert during - before < submitted, (during - before, submitted)

    daemon.start()
    acked = acknowledged(files)
    assert len(acked) >= ACKED
    listed = {job["id"]: job for page in _pages(daemon) for job in page}
    for job_id, name in acked.items():
        assert job_id in listed, f"acknowledged job {job_id} ({name}) lost"
        assert listed[job_id]["name"] == name
        assert listed[job_id]["state"] == "PENDING"
    assert daemon.job(holder)["state"] == "RUNNING"  # taken over, not lost


def _pages(daemon: Daemon) -> list[list[dict[str, object]]]:
    pages, after = [], 0
    while True:
        body = daemon.get(f"/v1/jobs?all=true&limit=1000&after={after}").json()
        pages.append(body["jobs"])
        if not body["next"]:
            return pages
        after = int(body["next"])
