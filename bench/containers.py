"""Container start overhead: trainq running an image, against a bare
`podman run --rm --network none` of the same image (issue 5, item 5).

    .venv/bin/python bench/containers.py [--runs 30] [--queue 8 --hold 1] [--source DIR]

Both run the container tests' image (tests/containers/prepare builds it; this runs prepare
first) with the same trainer, tests/trainers/container_stamp.py, which appends
time.time() to a file under /opt/ml as its first act and exits at once. The container's
clock is the host's, so one clock serves every point:

- running: the clock just before POST /v1/jobs is sent (trainq) or just before the bare
  `podman run` is started -> the trainer's stamp.
- done: the same start -> the job's `ended_at` as trainqd records it (when the API first
  reports COMPLETED) or the bare `podman run --rm` exiting (its container removed).

trainq runs the job with network = "none" as the bare run does, and otherwise as in
production: engine podman (tests/containers/containers.conf), the job's own env file,
labels, --user, the ml root bind-mounted. The cases take turns, in alternating order,
one at a time on an otherwise idle engine: the next run starts only once the last one's
container is gone (trainq removes it after the job ends, off the path measured here).
Each trainq run is also cut into its parts from trainqd's and the monitor's logs.

Then `--queue` jobs that run `--hold` seconds each are queued on the one GPU, and each
dispatch gap is measured: from one job's `ended_at` to the next trainer's stamp. This is
where the container's removal after a job's end (trainqd/monitor/container.py) can get in
the way of the next job's start.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from common import (
    Client,
    Daemon,
    Summary,
    load,
    machine,
    poll_until,
    ratio,
    running_daemon,
)
from dispatch import daemon_times, monitor_times

# The lock the container tests hold while they use the engine (tests/support/containers.py):
# their daemons and this one would otherwise take each other's container names.
ENGINE_LOCK = Path("/run/trainq-containers.lock")
REPO = Path(__file__).resolve().parent.parent
PREPARE = REPO / "tests" / "containers" / "prepare"
CONTAINERS_CONF = REPO / "tests" / "containers" / "containers.conf"
IMAGE = "localhost/trainq-test:latest"
TRAINER = "container_stamp.py"  # run by the image's entrypoint, named by TRAINER
STAMPS = "/opt/ml/output/data/stamps"  # inside the container

PARTS = (
    ("spawned", "POST sent -> trainqd starts the monitor ('started')"),
    ("launched", "monitor prepares, spawns `podman run` ('trainer started')"),
    ("engine", "podman creates and starts the container -> the trainer's stamp"),
    ("reaped", "stamp -> `podman run` exits, monitor reaps it ('trainer exited')"),
    ("recorded", "monitor writes exit.json ('exit record')"),
    ("settled", "monitor exits, trainqd records the end (ended_at)"),
)


def read_stamp(path: Path) -> float:
    what, when = path.read_text().split()
    assert what == "start", path
    return float(when)


def iso_seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- the two cases -----------------------------------------------------------------------------


def bare_run(podman: str, work: Path, n: int) -> tuple[float, float]:
    """(running, done) of one bare `podman run --rm --network none`."""
    ml = work / f"bare-{n}"
    ml.mkdir()
    argv = [
        podman, "run", "--rm", "--network", "none", "--volume", f"{ml}:/opt/ml",
        "--env", f"TRAINER={TRAINER}", "--env", "TRAINER_ARGS=/opt/ml/stamps", IMAGE, "train",
    ]  # fmt: skip
    sent = time.time()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    done = time.time()
    return read_stamp(ml / "stamps") - sent, done - sent


def trainq_run(
    podman: str, daemon: Daemon, client: Client, n: int
) -> tuple[float, float, dict[str, float]]:
    """(running, done, parts) of one trainq container job."""
    spec = {
        "name": f"c{n:03d}",
        "image": IMAGE,
        "network": "none",
        "max_retries": 0,
        "environment": {"TRAINER": TRAINER, "TRAINER_ARGS": STAMPS},
    }
    sent = time.time()
    job_id = int(client.submit(spec)["id"])

    def ended() -> dict[str, object] | None:
        job = client.job(job_id)
        return job if job["state"] in ("COMPLETED", "FAILED", "STOPPED") else None

    # ended_at and the stamp are the measure, not when this loop notices: it polls slowly,
    # not to take the CPU from the engine on a small machine.
    job = poll_until(ended, timeout=60, interval=0.25, what=f"job {job_id} to end")
    if job["state"] != "COMPLETED":
        raise RuntimeError(f"job {job_id} ended {job['state']}: {job['failure_reason']!r}")
    stamp = read_stamp(Path(str(job["job_dir"])) / "output" / "data" / "stamps")
    done = iso_seconds(str(job["ended_at"]))
    said = monitor_times(daemon, job_id)
    logged = daemon_times(daemon)
    points = [
        sent,
        logged[(job_id, "spawned")],
        said["launched"],
        stamp,
        said["reaped"],
        said["recorded"],
        done,
    ]
    spans = itertools.pairwise(points)
    parts = {key: b - a for (key, _), (a, b) in zip(PARTS, spans, strict=True)}
    wait_removed(podman, container_of(job))
    return stamp - sent, done - sent, parts


def container_of(job: dict[str, object]) -> str:
    """The engine's name of the job's first attempt, as its record says."""
    attempts = job["attempts"]
    assert isinstance(attempts, list)
    return str(attempts[0]["container"])


def queue_gaps(podman: str, client: Client, jobs: int, hold: float) -> list[float]:
    """Queue `jobs` container jobs that each hold the only GPU for `hold` seconds; for each
    job after the first, its trainer's stamp minus the previous job's ended_at."""
    ids = []
    for n in range(jobs):
        spec = {
            "name": f"q{n:03d}",
            "image": IMAGE,
            "network": "none",
            "gpus": 1,
            "max_retries": 0,
            "environment": {"TRAINER": TRAINER, "TRAINER_ARGS": f"{STAMPS} {hold}"},
        }
        ids.append(int(client.submit(spec)["id"]))

    def drained() -> list[dict[str, object]] | None:
        done = [client.job(job_id) for job_id in ids]
        return done if all(job["state"] == "COMPLETED" for job in done) else None

    done = poll_until(drained, timeout=60 + jobs * (hold + 5), interval=0.5, what="the queue")
    for job in done:
        wait_removed(podman, container_of(job))
    gaps = []
    for before, after in itertools.pairwise(done):
        stamp = read_stamp(Path(str(after["job_dir"])) / "output" / "data" / "stamps")
        gaps.append(stamp - iso_seconds(str(before["ended_at"])))
    return gaps


def wait_removed(podman: str, name: str) -> None:
    """The monitor removes the container after the job's end; the next run waits for that,
    so that no run shares the engine with the aftermath of another."""

    def gone() -> bool:
        exists = subprocess.run([podman, "container", "exists", name], check=False)
        return exists.returncode == 1

    poll_until(gone, timeout=60, interval=0.1, what=f"{name} to be removed")


# -- the report --------------------------------------------------------------------------------


def row(label: str, values: Sequence[float], baseline: Sequence[float] | None = None) -> str:
    """A table row in ms; against `baseline`, the ratio and the difference of the medians."""
    s = Summary.of(values)
    versus = " | "
    if baseline is not None:
        base = Summary.of(baseline).median
        versus = f"{ratio(s.median, base)} | {(s.median - base) * 1e3:+.0f}"
    return f"| {label} | {s.median * 1e3:.0f} | {s.low * 1e3:.0f} | {s.p99 * 1e3:.0f} | {versus} |"


@contextlib.contextmanager
def engine_turn() -> Iterator[None]:
    """ENGINE_LOCK, held for the whole benchmark (after any test session holding it)."""
    fd = os.open(ENGINE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for the container tests to let go of {ENGINE_LOCK}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def measure(podman: str, args: argparse.Namespace) -> None:
    print(machine())
    print(load())
    bare: dict[str, list[float]] = {"running": [], "done": []}
    trainq: dict[str, list[float]] = {"running": [], "done": []}
    parts: dict[str, list[float]] = {key: [] for key, _ in PARTS}
    work = Path(tempfile.mkdtemp(prefix="tqbc", dir="/tmp"))
    try:
        with (
            running_daemon("fake:1", args.source, default_engine="podman") as daemon,
            daemon.client() as client,
        ):
            # One of each first: the image's layers into the page cache, podman's and the
            # monitor's code too.
            bare_run(podman, work, -1)
            trainq_run(podman, daemon, client, 999)
            for n in range(args.runs):
                order = ("bare", "trainq") if n % 2 == 0 else ("trainq", "bare")
                for case in order:
                    if case == "bare":
                        running, done = bare_run(podman, work, n)
                        bare["running"].append(running)
                        bare["done"].append(done)
                    else:
                        running, done, split = trainq_run(podman, daemon, client, n)
                        trainq["running"].append(running)
                        trainq["done"].append(done)
                        for key, value in split.items():
                            parts[key].append(value)
            gaps = queue_gaps(podman, client, args.queue, args.hold) if args.queue > 1 else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n| {args.runs} runs each | p50 ms | best ms | p99 ms | vs bare p50 | +ms |")
    print("|---|---|---|---|---|---|")
    print(row("bare podman run: start -> trainer running", bare["running"]))
    print(row("trainq: POST sent -> trainer running", trainq["running"], bare["running"]))
    print(row("bare podman run --rm: start -> exited", bare["done"]))
    print(row("trainq: POST sent -> job COMPLETED", trainq["done"], bare["done"]))
    for key, what in PARTS:
        print(row(f"&nbsp; {key}: {what}", parts[key]))
    if gaps:
        label = f"queue of {args.queue} jobs of {args.hold:g} s: one's end -> next running"
        print(row(label, gaps))
    print(load())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each case")
    parser.add_argument("--queue", type=int, default=8, help="jobs in the queue (0: none)")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds each queued job runs")
    parser.add_argument("--source", type=Path, help="run trainqd from this copy of the tree")
    args = parser.parse_args()
    podman = shutil.which("podman")
    if podman is None:
        sys.exit("bench/containers.py: podman is not installed (see tests/containers/prepare)")
    os.environ["CONTAINERS_CONF"] = str(CONTAINERS_CONF)  # for trainqd and the bare runs
    with engine_turn():
        subprocess.run([str(PREPARE)], check=True)
        measure(podman, args)


if __name__ == "__main__":
    main()
