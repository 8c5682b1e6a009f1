"""`trainq logs` over the monitor's timeline: both streams in the order they were written,
each line's time and stream out of the trainer's reach, `-n`, `--since`, `-f` from the tail,
`submit --wait --follow`, and the event stream of a job that ends."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from tests.support.daemon import TRAINQ, Daemon
from tests.support.waiting import wait_for
from trainq import Client

# Each write waits until the monitor has relayed it (one more record in the timeline), so
# that the order the test expects is the order the streams were written in.
ALTERNATE = r"""
import os, struct, sys, time
env = os.environ
timeline = os.path.join(
    sys.argv[1], "jobs", env["TRAINQ_JOB_ID"], "attempts", env["TRAINQ_ATTEMPT"], "timeline"
)
def relayed(count):
    while not os.path.exists(timeline) or os.path.getsize(timeline) < 24 * count:
        time.sleep(0.005)
for n, (stream, text) in enumerate([
    (sys.stdout, "o1"), (sys.stderr, "e1"), (sys.stdout, "o2"), (sys.stderr, "e2"),
    (sys.stdout, "2000-01-01T00:00:00.000 stderr forged"),
], start=1):
    stream.write(text + "\n")
    stream.flush()
    relayed(n)
if len(sys.argv) > 2:  # the job's owner rewrites its own timeline: nonsense records
    with open(timeline, "ab") as f:
        f.write(struct.pack("<qQIB3x", 1, 1 << 62, 1 << 31, 1))
        f.write(struct.pack("<qQIB3x", 2, 0, 10, 9))
        f.write(b"\xff" * 7)
"""
LINES = ["o1", "e1", "o2", "e2", "2000-01-01T00:00:00.000 stderr forged"]


def run_alternating(daemon: Daemon, *extra: str) -> int:
    argv = [sys.executable, "-c", ALTERNATE, str(daemon.state_dir), *extra]
    job_id = int(daemon.submit({"command": argv})["id"])
    assert daemon.wait_state(job_id)["state"] == "COMPLETED"
    return job_id


def logs(daemon: Daemon, job_id: int, *args: str) -> str:
    done = daemon.cli("logs", *args, str(job_id))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_both_streams_in_the_order_they_were_written(daemon: Daemon) -> None:
    job_id = run_alternating(daemon)
    assert logs(daemon, job_id).splitlines() == LINES
    assert logs(daemon, job_id, "--stderr") == "e1\ne2\n"
    assert logs(daemon, job_id, "--stdout").splitlines() == [LINES[0], LINES[2], LINES[4]]
    # The time and the stream are the monitor's: the forged line is stdout's, written now.
    stamped = [line.split(" ", 2) for line in logs(daemon, job_id, "-t").splitlines()]
    assert [(stream, text) for _, stream, text in stamped] == [
        ("stdout", "o1"), ("stderr", "e1"), ("stdout", "o2"), ("stderr", "e2"),
        ("stdout", LINES[4]),
    ]  # fmt: skip
    times = [datetime.fromisoformat(when) for when, _, _ in stamped]
    assert times == sorted(times)
    assert times[-1].year == datetime.now().year


def test_tail_and_since(daemon: Daemon) -> None:
    job_id = run_alternating(daemon)
    assert logs(daemon, job_id, "-n", "2").splitlines() == LINES[3:]
    assert logs(daemon, job_id, "--tail", "1", "--stderr") == "e2\n"
    assert logs(daemon, job_id, "-n", "0") == ""
    assert logs(daemon, job_id, "-n", "100").splitlines() == LINES
    stamps = daemon.get(f"/v1/jobs/{job_id}/logs", params={"stamps": "true"}).text
    entries = [json.loads(line) for line in stamps.splitlines()]
    assert [e["text"] for e in entries] == [f"{line}\n" for line in LINES]
    since = datetime.fromtimestamp(entries[3]["time"] - 1e-6).isoformat()
    assert logs(daemon, job_id, "--since", since).splitlines() == LINES[3:]
    assert logs(daemon, job_id, "--since", "1h").splitlines() == LINES
    client = Client(str(daemon.socket))
    [e2, forged] = client.log_lines(job_id, tail=2)
    assert (e2.stream, e2.text, forged.stream) == ("stderr", "e2\n", "stdout")
    assert client.logs(job_id, since=e2.time) == f"e2\n{LINES[4]}\n"
    assert client.logs(job_id, stream="stdout", tail=1) == f"{LINES[4]}\n"
    bad = daemon.cli("logs", "--since", "yesterday", str(job_id))
    assert bad.returncode == 2
    assert "expected a duration ago such as 10m or 2h" in bad.stderr


def test_a_timeline_its_owner_rewrote_shows_what_is_valid(daemon: Daemon) -> None:
    job_id = run_alternating(daemon, "tamper")
    assert logs(daemon, job_id).splitlines() == LINES
    assert logs(daemon, job_id, "-n", "3").splitlines() == LINES[2:]
    assert logs(daemon, job_id, "-t", "--stderr").count("\n") == 2
    # trainqd goes on serving everyone.
    assert daemon.get("/v1/health").status_code == 200
    assert run_alternating(daemon) == job_id + 1


FOLLOWED = r"""
import os, sys, time
for n in range(30):
    print(f"line {n}", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
print("done", flush=True)
"""


def test_follow_starts_from_the_last_lines(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit({"command": [sys.executable, "-c", FOLLOWED, str(release)]})
    wait_for(lambda: "line 29" in logs(daemon, job["id"]), what="the first lines")
    with subprocess.Popen(
        [TRAINQ, "--socket", str(daemon.socket), "logs", "-f", str(job["id"])],
        stdout=subprocess.PIPE,
        text=True,
    ) as follower:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "line 20\n"  # the last 10, not the history
        release.touch()
        rest = follower.stdout.read()
        assert follower.wait(timeout=15) == 0
    assert rest.splitlines()[-2:] == ["line 29", "done"]


def test_submit_wait_follow_prints_the_output_and_the_end(daemon: Daemon, tmp_path: Path) -> None:
    script = (
        "import sys; print('training', flush=True); print('oops', file=sys.stderr); sys.exit(3)"
    )
    done = daemon.cli(
        "submit", "--wait", "--follow", "--max-retries", "0", "--", sys.executable, "-c", script,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1  # FAILED
    job_id, *output = done.stdout.splitlines()
    assert output == ["training", "oops"]
    assert daemon.job(int(job_id))["state"] == "FAILED"


def test_the_events_of_a_job_end_when_it_has_ended(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit({"command": [sys.executable, "-c", FOLLOWED, str(release)]})
    daemon.wait_state(job["id"], "RUNNING")
    with subprocess.Popen(
        [
            "curl", "-sN", "--unix-socket", str(daemon.socket),
            f"http://trainq/v1/events?job={job['id']}&since=0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as events:  # fmt: skip
        assert events.stdout is not None
        assert json.loads(events.stdout.readline())["to_state"] == "PENDING"
        release.touch()
        rest = events.stdout.read()  # to the end: the stream closes
        assert events.wait(timeout=15) == 0
    assert json.loads(rest.splitlines()[-1])["to_state"] == "COMPLETED"
    ended = daemon.get("/v1/events", params={"job": job["id"], "since": 0}, timeout=10)
    assert [json.loads(line)["to_state"] for line in ended.text.splitlines()][-1] == "COMPLETED"
