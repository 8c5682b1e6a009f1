"""Pipe mode through the monitor: the real feeder, forked before the trainer, fed FIFOs,
stopped after the trainer; its failure stops the trainer."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from tests.support.monitor import NOBODY, Attempt, attempt_of, give_to, python, trainer
from trainqd.monitor import procfs
from trainqd.monitor.records import PipeChannel

# Reads epoch 0 of channel "train" (waiting for its FIFO, as the contract says to), writes
# what it read to output/data/got, then exits with argv[1].
READ_ONE_EPOCH = """
import os, sys, time
base = os.environ["SAGEMAKER_BASE_DIR"]
fifo = os.path.join(base, "input", "data", "train_0")
while not os.path.exists(fifo):
    time.sleep(0.005)
with open(fifo, "rb") as f:
    data = f.read()
with open(os.path.join(base, "output", "data", "got"), "wb") as f:
    f.write(data)
sys.exit(int(sys.argv[1]))
"""


def with_channel(a: Attempt, argv: list[str], epochs: int | None) -> None:
    source = a.root / "train.bin"
    source.write_bytes(b"record-1\nrecord-2\n")
    channel = PipeChannel(name="train", source=str(source), epochs=epochs)
    a.launch = replace(a.launch, argv=argv, pipe_channels=[channel])


def fifos(a: Attempt) -> list[str]:
    return sorted(p.name for p in (a.ml_root / "input" / "data").iterdir())


@pytest.mark.parametrize("owner", ["root", "nobody"])
def test_trainer_reads_an_epoch_and_the_feeder_is_stopped_after_it(owner: str) -> None:
    with attempt_of([]) as a:
        # Unlimited epochs: the feeder is still offering train_1 when the trainer ends.
        with_channel(a, [*python(READ_ONE_EPOCH), "0"], epochs=None)
        if owner == "nobody":
            give_to(a, NOBODY)
            a.launch = replace(a.launch, owner=NOBODY)
        record = a.start().wait()
        assert (record.outcome, record.exit_code) == ("exited", 0), a.monitor_log()
        assert a.data("got").read_bytes() == b"record-1\nrecord-2\n"
        assert fifos(a) == []  # the feeder removed its FIFOs on SIGTERM
        assert procfs.descendants(a.pid, include_zombies=True) == []


def test_a_feeder_that_offered_every_epoch_leaves_the_trainer_running() -> None:
    code = READ_ONE_EPOCH.replace("sys.exit(", "time.sleep(0.5); sys.exit(")
    with attempt_of([]) as a:
        with_channel(a, [*python(code), "0"], epochs=1)
        record = a.start().wait()
        assert (record.outcome, record.exit_code) == ("exited", 0)
        assert "feeder done" in a.monitor_log()


def test_a_failing_feeder_stops_the_trainer_with_its_reason() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        missing = a.root / "no-such-data"
        channel = PipeChannel(name="train", source=str(missing))
        a.launch = replace(a.launch, pipe_channels=[channel])
        record = a.start().wait()
        assert record.outcome == "feeder_failed"
        assert record.reason is not None
        assert str(missing) in record.reason
        assert record.reason.endswith("No such file or directory")
        assert "\n" not in record.reason
        # Stopped like a user stop: SIGTERM first (it may come before the trainer has its
        # handler, or after, when it checkpoints and exits 0), never SIGKILL at once.
        assert (record.exit_code, record.signal) in ((0, None), (None, signal.SIGTERM))
        assert "grace over" not in a.monitor_log()
