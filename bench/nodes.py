"""Jobs of several nodes (README.md, "Several nodes"), each against a baseline in the same run:

- gang start: submit to all 4 trainers running, for one job of 4 nodes against 4 jobs of one
  node submitted together (one request), each trainer stamping its start (bash's clock);
- all-reduce: 256 MiB across 4 nodes (torch.distributed, gloo, CPU; Debian's python3-torch),
  run as a job of 4 subprocess nodes (under a root trainqd: a network namespace each, on the
  attempt's bridge) and as a job of 4 podman container nodes (on the attempt's network of
  the engine's), each against the same 4 processes started directly on the host's loopback.
  The containers run the container tests' torch image (tests/containers/prepare, run here
  first) with this benchmark's all-reduce copied in (localhost/trainq-bench:allreduce).

Run from the repository root as root: `.venv/bin/python bench/nodes.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Client, load, machine, poll_until, ratio, running_daemon
from containers import CONTAINERS_CONF, PREPARE, engine_turn

SYSTEM_PYTHON = "/usr/bin/python3"
ALLREDUCE = Path(__file__).resolve().parent / "trainers" / "allreduce.py"
TORCH_IMAGE = "localhost/trainq-test:torch"  # the test trainers beside python3-torch
BENCH_IMAGE = "localhost/trainq-bench:allreduce"
NODES = 4
STAMP = 'printf "start %s %s\\n" "$EPOCHREALTIME" "$1" >> "$0"'


def starts(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [float(line.split()[1]) for line in path.read_text().splitlines()]


def ended(client: Client, ids: list[int]) -> bool:
    return all(client.job(i)["state"] in ("COMPLETED", "FAILED", "STOPPED") for i in ids)


def time_to_start(client: Client, stamps: Path, specs: list[dict[str, object]]) -> float:
    """Seconds from the submission to the last of NODES trainers running."""
    stamps.unlink(missing_ok=True)
    began = time.time()
    if len(specs) == 1:
        ids = [int(client.submit(specs[0])["id"])]
    else:
        group = client.json("POST", "/v1/jobs", specs, expect=201)
        ids = [int(job["id"]) for job in group["jobs"]]
    seen = poll_until(
        lambda: len(found := starts(stamps)) == NODES and found,
        timeout=60,
        interval=0.002,
        what="every trainer to start",
    )
    poll_until(lambda: ended(client, ids), timeout=60, interval=0.01, what="the jobs to end")
    return max(seen) - began


def gang_start(rounds: int) -> tuple[float, float]:
    with running_daemon(gpus=f"fake:{NODES}") as daemon, daemon.client() as client:
        stamps = daemon.base / "stamps"
        gang_spec = {
            "command": ["bash", "-c", STAMP, str(stamps), "node"],
            "instance_count": NODES,
            "gpus": 1,
        }
        single = [
            {"command": ["bash", "-c", STAMP, str(stamps), f"job{i}"], "gpus": 1}
            for i in range(NODES)
        ]
        gang, jobs = [], []
        for _ in range(rounds):
            gang.append(time_to_start(client, stamps, [gang_spec]))
            jobs.append(time_to_start(client, stamps, single))
    return statistics.median(gang), statistics.median(jobs)


def allreduce_in_trainq(mib: int, rounds: int) -> float:
    spec = {"command": [SYSTEM_PYTHON, str(ALLREDUCE), str(mib), str(rounds)]}
    return allreduce_job(spec)


def bench_image(podman: str) -> None:
    """BENCH_IMAGE: the torch test image with the all-reduce beside the test trainers, where
    the image's entrypoint finds it by the job's TRAINER."""
    subprocess.run([str(PREPARE)], check=True)
    with tempfile.TemporaryDirectory() as context:
        shutil.copy(ALLREDUCE, Path(context) / "allreduce.py")
        os.chmod(Path(context) / "allreduce.py", 0o644)
        (Path(context) / "Containerfile").write_text(
            f"FROM {TORCH_IMAGE}\nCOPY allreduce.py /opt/trainq/trainers/bench_allreduce.py\n"
        )
        build = [podman, "build", "--quiet", "--pull=never", "--tag", BENCH_IMAGE, context]
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)


def allreduce_in_containers(mib: int, rounds: int) -> float:
    environment = {"TRAINER": "bench_allreduce.py", "TRAINER_ARGS": f"{mib} {rounds}"}
    spec = {"image": BENCH_IMAGE, "environment": environment}
    return allreduce_job(spec, default_engine="podman")


def allreduce_job(spec: dict[str, object], **config: object) -> float:
    """The median all-reduce that the first of NODES nodes of a job of SPEC reports."""
    with running_daemon(gpus="fake:1", **config) as daemon, daemon.client() as client:
        spec = {**spec, "instance_count": NODES, "max_retries": 0}
        job_id = int(client.submit(spec)["id"])
        done = poll_until(
            lambda: (job := client.job(job_id))["state"] in ("COMPLETED", "FAILED") and job,
            timeout=600,
            interval=0.1,
            what="the all-reduce job",
        )
        out = daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "nodes" / "algo-1"
        if done["state"] != "COMPLETED":
            raise RuntimeError((out / "stderr").read_text()[-2000:])
        return float((out / "stdout").read_text().split()[1])


def allreduce_on_host(mib: int, rounds: int) -> float:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29611"}
    env["WORLD_SIZE"] = str(NODES)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    with tempfile.TemporaryFile() as out:
        procs = [
            subprocess.Popen(
                [SYSTEM_PYTHON, str(ALLREDUCE), str(mib), str(rounds)],
                env={**env, "RANK": str(rank)},
                stdout=out if rank == 0 else subprocess.DEVNULL,
            )
            for rank in range(NODES)
        ]
        for proc in procs:
            if proc.wait(600) != 0:
                raise RuntimeError("the host's all-reduce failed")
        out.seek(0)
        return float(out.read().split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="gang starts of each kind")
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--reduces", type=int, default=3, help="timed all-reduces per run")
    args = parser.parse_args()
    print(machine())
    gang, jobs = gang_start(args.rounds)
    print(
        f"start of {NODES} trainers, median of {args.rounds}: one job of {NODES} nodes "
        f"{gang * 1000:.1f} ms, {NODES} jobs of one node {jobs * 1000:.1f} ms: "
        f"{ratio(gang, jobs)}"
    )
    ours = allreduce_in_trainq(args.mib, args.reduces)
    host = allreduce_on_host(args.mib, args.reduces)
    print(
        f"all-reduce of {args.mib} MiB across {NODES} nodes, median of {args.reduces}: "
        f"{NODES} nodes in trainq {ours:.3f} s, {NODES} processes on the host's loopback "
        f"{host:.3f} s: {ratio(ours, host)}"
    )
    podman = shutil.which("podman")
    if podman is None:
        print("all-reduce across container nodes: not measured, podman is not installed")
    else:
        os.environ["CONTAINERS_CONF"] = str(CONTAINERS_CONF)  # for prepare and trainqd
        with engine_turn():
            bench_image(podman)
            contained = allreduce_in_containers(args.mib, args.reduces)
        print(
            f"all-reduce of {args.mib} MiB across {NODES} nodes, median of {args.reduces}: "
            f"{NODES} container nodes on the attempt's engine network {contained:.3f} s, "
            f"{NODES} processes on the host's loopback {host:.3f} s: {ratio(contained, host)}"
        )
    print(load())
    return 0


if __name__ == "__main__":
    sys.exit(main())
