"""Pipe mode through the whole daemon (issue: Pipe mode): FIFOs per channel and epoch fed by
the job's monitor, options from the spec, and nothing leaking in trainqd over many jobs."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

from tests.support.daemon import Daemon, python_job
from tests.support.waiting import wait_for


def make_data(root: Path, name: str, sizes: list[int]) -> bytes:
    src = root / name
    src.mkdir()
    whole = b""
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        (src / f"part-{i:02d}").write_bytes(data)
        whole += data
    return whole


def test_two_channels_several_epochs(daemon: Daemon, tmp_path: Path) -> None:
    train = make_data(tmp_path, "train", [1, 70_000, 0, 1 << 20])
    val = make_data(tmp_path, "val", [12_345])
    out = tmp_path / "out"
    out.mkdir()
    result = daemon.cli(
        "submit",
        "--gpus",
        "1",
        "--channel",
        f"train={tmp_path / 'train'}:Pipe",
        "--channel",
        f"val={tmp_path / 'val'}:Pipe",
        "--",
        sys.executable,
        str(Path(__file__).parents[1] / "trainers" / "pipe_reader.py"),
        str(out),
        "train:3",
        "val:2",
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout)
    done = daemon.wait_state(job_id, timeout=30)
    assert done["state"] == "COMPLETED", daemon.cli("logs", str(job_id)).stdout
    for epoch in range(3):
        assert (out / f"train_{epoch}").read_bytes() == train
    for epoch in range(2):
        assert (out / f"val_{epoch}").read_bytes() == val
    config = (Path(done["job_dir"]) / "input" / "config" / "inputdataconfig.json").read_text()
    assert '"TrainingInputMode": "Pipe"' in config
    # The job's FIFOs are gone with it.
    data_dir = Path(done["job_dir"]) / "input" / "data"
    wait_for(lambda: not list(data_dir.glob("*_*")), timeout=5, what="the FIFOs to go")


def test_spec_options_reach_the_feeder(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "gz"
    src.mkdir()
    payload = b"hello pipe mode\n" * 1000
    (src / "a.gz").write_bytes(gzip.compress(payload))
    out = tmp_path / "out"
    out.mkdir()
    job = daemon.submit(
        python_job(
            "pipe_reader.py",
            str(out),
            "train:2",
            channels={
                "train": {"source": str(src), "mode": "Pipe", "compression": "Gzip", "epochs": 2}
            },
        )
    )
    assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    assert (out / "train_0").read_bytes() == payload
    assert (out / "train_1").read_bytes() == payload


def test_a_trainer_that_never_reads_can_be_stopped_at_once(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "d"
    src.mkdir()
    (src / "x").write_bytes(b"x" * 10)
    job = daemon.submit(
        python_job(
            "sleeper.py",
            stop_grace_seconds=30,
            channels={"train": {"source": str(src), "mode": "Pipe"}},
        )
    )
    fifo = Path(job["job_dir"]) / "input" / "data" / "train_0"
    wait_for(fifo.exists, what="the first FIFO")
    daemon.cli("stop", str(job["id"]))
    done = daemon.wait_state(job["id"], timeout=5)
    assert done["state"] == "STOPPED"
    wait_for(lambda: not fifo.exists(), timeout=5, what="the FIFO to go")


PAUSING_READER = """
import os, sys, time
data = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "input", "data")
def read(epoch):
    path = os.path.join(data, f"train_{epoch}")
    while not os.path.exists(path):
        time.sleep(0.01)
    with open(path, "rb") as f:
        return f.read()
# Written whole, then renamed: the test reads it as soon as it exists.
open(sys.argv[1] + ".part", "wb").write(read(0))
os.rename(sys.argv[1] + ".part", sys.argv[1])
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
print("epoch 1 gave", len(read(1)), "bytes")
"""


def test_data_that_vanishes_fails_the_job_cleanly(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "d"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 10)
    first, release = tmp_path / "epoch0", tmp_path / "release"
    job = daemon.submit(
        {
            "command": [sys.executable, "-c", PAUSING_READER, str(first), str(release)],
            "max_retries": 0,
            "channels": {"train": {"source": str(src), "mode": "Pipe"}},
        }
    )
    wait_for(first.exists, what="the first epoch")
    assert first.read_bytes() == b"a" * 10
    (src / "a").unlink()  # the data goes away between epochs
    release.touch()
    done = daemon.wait_state(job["id"], timeout=20)
    assert done["state"] == "FAILED"
    assert done["attempts"][0]["outcome"] == "feeder_failed"
    assert "channel 'train'" in done["failure_reason"]
    assert str(src / "a") in done["failure_reason"]


def test_no_descriptor_leaks_in_trainqd(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "d"
    src.mkdir()
    (src / "x").write_bytes(b"data" * 1000)
    out = tmp_path / "out"

    def run_jobs(n: int) -> None:
        ids = []
        for i in range(n):
            (out / str(i)).mkdir(parents=True, exist_ok=True)
            ids.append(
                daemon.submit(
                    python_job(
                        "pipe_reader.py",
                        str(out / str(i)),
                        "train:2",
                        channels={"train": {"source": str(src), "mode": "Pipe"}},
                    )
                )["id"]
            )
        for job_id in ids:
            assert daemon.wait_state(job_id, timeout=60)["state"] == "COMPLETED"

    assert daemon.proc is not None
    fds = Path(f"/proc/{daemon.proc.pid}/fd")
    run_jobs(3)  # warm up: the spare monitor, the database, caches
    before = len(list(fds.iterdir()))
    run_jobs(20)
    # Watchers and connections of the last jobs may take a moment to close.
    wait_for(
        lambda: len(list(fds.iterdir())) <= before,
        timeout=5,
        what=f"trainqd's descriptors to return to {before}",
    )
