"""Pipe mode feeder throughput against the raw rate of a FIFO on this machine.

    .venv/bin/python bench/feeder.py [--size-mib 1024] [--runs 5] [--rounds 3] [--dir /dev/shm]

First the headline, measured the way a trainer sees it: the monitor's own feeder child
(trainqd.monitor.children.start_feeder, which drops to the job's owner when run as root)
feeds a Pipe mode channel of 3 epochs from a 1 GiB page-cached file, and each epoch is read
by `cat FIFO > /dev/null`, timed from the reader's start to its exit; against it, 3 runs of
a raw os.splice loop into a FIFO raised to 1 MiB, read and timed the same way. Each round
takes the best of its 3 epochs and the best of its 3 raw runs; rounds alternate which goes
first, so that both find the page cache equally warm and share any neighbour's load.

Then every case moves the same page-cached bytes through a FIFO to the same reader,
`cat FIFO > /dev/null`, and is timed from before the FIFO exists until both ends have
exited. Baselines, taken in the same run: `cat FILE > FIFO`, and the raw rate, a minimal
os.splice loop into a FIFO raised to 1 MiB. The feeder runs as the monitor runs it, in a
forked child calling run_feeder for one epoch, so its FIFO creation and open are timed too.
Cases take turns, round after round; each rate is the median of its --runs runs (fewer
for the slow gzip cases), and the best run beside it, since on a shared machine a
neighbour's load only ever slows a run down. Ratios are against the raw splice rate of
the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from trainqd.monitor.children import start_feeder
from trainqd.monitor.feed.feeder import run_feeder
from trainqd.monitor.records import Credentials, Launch, PipeChannel

MIB = 1 << 20
SMALL_FILE = 128 << 10  # about an ImageNet JPEG
EPOCHS = 3
NOBODY = 65534  # the job's owner when the benchmark runs as root, as a root monitor's feeder

Writer = Callable[[Path], int]  # starts the writing end for FIFO path; returns a pid


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    cpu = models[0] if models else platform.processor()
    pipe_max = Path("/proc/sys/fs/pipe-max-size").read_text().strip()
    return f"{os.cpu_count()} cores, {cpu}, Linux {platform.release()}, pipe-max-size {pipe_max}"


def compressible_block(size: int) -> bytes:
    """CSV-like rows: compresses about 3:1, decompresses at a realistic pace."""
    noise = os.urandom(size // 8).hex().encode()
    data = bytearray()
    row = 0
    while len(data) < size:
        at = row * 12 % (len(noise) - 12)
        data += b"%d,%s,%d\n" % (row, noise[at : at + 12], row * 7)
        row += 1
    return bytes(data[:size])


def make_data(work: Path, size: int) -> dict[str, Path]:
    block = compressible_block(64 * MIB)
    blocks = size // len(block)
    big = work / "big.bin"
    with open(big, "wb") as out:
        for _ in range(blocks):
            out.write(block)
    member = zlib.compressobj(6, zlib.DEFLATED, 31)
    packed = member.compress(block) + member.flush()
    gz = work / "big.gz"
    with open(gz, "wb") as out:  # one gzip member per block, as pigz or `cat *.gz` make
        for _ in range(blocks):
            out.write(packed)
    small = work / "small"
    small.mkdir()
    for n in range(blocks * len(block) // SMALL_FILE):
        offset = n * SMALL_FILE % len(block)
        (small / f"{n:06d}.jpg").write_bytes(block[offset : offset + SMALL_FILE])
    for path in [big, gz, *small.iterdir()]:
        with open(path, "rb") as f:  # into the page cache
            while f.read(16 * MIB):
                pass
    return {"big": big, "gz": gz, "small": small}


def wait_pid(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"writer {pid} exited with {os.waitstatus_to_exitcode(status)}")


def timed(fifo: Path, writer: Writer, *, writer_makes_fifo: bool = False) -> float:
    started = time.perf_counter()
    if not writer_makes_fifo:
        os.mkfifo(fifo, 0o600)
    pid = writer(fifo)
    while not fifo.exists():
        time.sleep(0.0005)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.DEVNULL)
    wait_pid(pid)
    if reader.wait() != 0:
        raise RuntimeError("the reader failed")
    elapsed = time.perf_counter() - started
    with contextlib.suppress(FileNotFoundError):
        fifo.unlink()
    return elapsed


def cat_writer(source: Path) -> Writer:
    def start(fifo: Path) -> int:
        return subprocess.Popen(["sh", "-c", 'exec cat "$1" > "$2"', "-", source, fifo]).pid

    return start


def gunzip_writer(source: Path) -> Writer:
    def start(fifo: Path) -> int:
        return subprocess.Popen(["sh", "-c", 'exec gzip -dc "$1" > "$2"', "-", source, fifo]).pid

    return start


def in_child(body: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        status = 70
        try:
            status = body()
        finally:
            os._exit(status)
    return pid


def splice_writer(source: Path, header: bytes = b"") -> Writer:
    def start(fifo: Path) -> int:
        def body() -> int:
            out = os.open(fifo, os.O_WRONLY)
            fcntl.fcntl(out, fcntl.F_SETPIPE_SZ, MIB)
            src = os.open(source, os.O_RDONLY)
            os.write(out, header)
            while os.splice(src, out, MIB):
                pass
            return 0

        return in_child(body)

    return start


def feeder_writer(ml_root: Path, channel: PipeChannel) -> Writer:
    def start(fifo: Path) -> int:
        def body() -> int:
            return run_feeder(str(ml_root), [channel], 2)

        return in_child(body)

    return start


def read_epoch(fifo: Path) -> float:
    """Seconds `cat FIFO > /dev/null` takes, from its start (once the FIFO exists) to its exit."""
    while not fifo.exists():
        time.sleep(0.0002)
    started = time.perf_counter()
    if subprocess.run(["cat", str(fifo)], stdout=subprocess.DEVNULL, check=False).returncode:
        raise RuntimeError("the reader failed")
    return time.perf_counter() - started


def raw_epoch(source: Path, fifo: Path) -> float:
    os.mkfifo(fifo, 0o600)
    try:
        pid = splice_writer(source)(fifo)
        took = read_epoch(fifo)
        wait_pid(pid)
    finally:
        fifo.unlink()
    return took


def feeder_epochs(source: Path, ml_root: Path) -> list[float]:
    """The monitor's feeder child feeding one channel for EPOCHS epochs; each epoch's time."""
    if os.geteuid() == 0:
        owner = Credentials(NOBODY, NOBODY, [NOBODY], "nobody", "/")
    else:
        owner = Credentials(os.getuid(), os.getgid(), os.getgroups(), "self", str(Path.home()))
    channel = PipeChannel("train", str(source), "None", "None", epochs=EPOCHS)
    launch = Launch(
        job_id=1,
        attempt=1,
        runtime="subprocess",
        argv=["cat"],
        env={},
        cwd="/",
        owner=owner,
        ml_root=str(ml_root),
        attempt_dir=str(ml_root),
        stop_file=str(ml_root / "stop"),
        stop_grace_seconds=1.0,
        pipe_channels=[channel],
    )
    child = start_feeder(launch, owner if os.geteuid() == 0 else None)
    data = ml_root / "input" / "data"
    took = [read_epoch(data / f"train_{epoch}") for epoch in range(EPOCHS)]
    _, status = os.waitpid(child.pid, 0)
    os.close(child.report_fd)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the feeder exited with {os.waitstatus_to_exitcode(status)}")
    return took


def headline(source: Path, ml_root: Path, rounds: int) -> None:
    size = source.stat().st_size
    fifo = ml_root / "input" / "data" / "raw"
    print(f"\nfeeder as a trainer reads it: {size / 2**30:.2f} GiB, best of {EPOCHS} each round")
    print("| round | first  | raw best GB/s | feeder epochs GB/s   | feeder best GB/s | ratio |")
    print("|-------|--------|---------------|----------------------|------------------|-------|")
    raw_all: list[float] = []
    fed_all: list[float] = []
    for round_ in range(rounds):
        feeder_first = round_ % 2 == 1
        fed = feeder_epochs(source, ml_root) if feeder_first else []
        raw = [raw_epoch(source, fifo) for _ in range(EPOCHS)]
        fed = fed or feeder_epochs(source, ml_root)
        raw_all += raw
        fed_all += fed
        epochs = " ".join(f"{size / t / 1e9:.2f}" for t in fed)
        print(
            f"| {round_ + 1:5} | {'feeder' if feeder_first else 'raw':6} "
            f"| {size / min(raw) / 1e9:13.2f} | {epochs:20} "
            f"| {size / min(fed) / 1e9:16.2f} | {min(raw) / min(fed):5.2f} |"
        )
    print(
        f"best of all rounds: raw {size / min(raw_all) / 1e9:.2f} GB/s, feeder "
        f"{size / min(fed_all) / 1e9:.2f} GB/s, ratio **{min(raw_all) / min(fed_all):.2f}**"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the headline")
    parser.add_argument("--headline-only", action="store_true")
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tq-bench-feeder-", dir=args.dir))
    try:
        print(f"machine: {machine()}")
        data = make_data(work, args.size_mib * MIB)
        size = data["big"].stat().st_size
        ml_root = work / "ml"
        (ml_root / "input" / "data").mkdir(parents=True)
        # The feeder may run as another user (the job's owner): it reads the data and
        # makes its FIFOs there, as a job's owner does in its own ml root.
        for path in (work, ml_root, ml_root / "input", ml_root / "input" / "data"):
            path.chmod(0o777 if path.name == "data" else 0o755)
        data["big"].chmod(0o644)
        headline(data["big"], ml_root, args.rounds)
        if args.headline_only:
            return
        fifo = ml_root / "input" / "data" / "bench_0"
        runs, gzip_runs = args.runs, max(1, args.runs // 2)

        def feeder(
            source: Path,
            wrapper: Literal["None", "RecordIO"] = "None",
            compression: Literal["None", "Gzip"] = "None",
        ) -> Writer:
            channel = PipeChannel("bench", str(source), wrapper, compression, epochs=1)
            return feeder_writer(ml_root, channel)

        small = f"{size // SMALL_FILE} files of 128 KiB"
        behind_header = splice_writer(data["big"], header=bytes(8))
        cases: list[tuple[str, int, Writer, bool]] = [
            ("cat FILE > FIFO", runs, cat_writer(data["big"]), False),
            ("raw: os.splice loop, 1 MiB pipe", runs, splice_writer(data["big"]), False),
            ("feeder, one file", runs, feeder(data["big"]), True),
            ("raw, behind an 8-byte header (as RecordIO)", runs, behind_header, False),
            ("feeder, RecordIO, one file", runs, feeder(data["big"], "RecordIO"), True),
            (f"feeder, {small}", runs, feeder(data["small"]), True),
            (f"feeder, RecordIO, {small}", runs, feeder(data["small"], "RecordIO"), True),
            ("gzip -dc FILE.gz > FIFO", gzip_runs, gunzip_writer(data["gz"]), False),
            ("feeder, Gzip", gzip_runs, feeder(data["gz"], compression="Gzip"), True),
            ("feeder, Gzip + RecordIO", gzip_runs, feeder(data["gz"], "RecordIO", "Gzip"), True),
        ]
        # Rounds interleave the cases, so that a neighbour's burst of load is shared out.
        times: list[list[float]] = [[] for _ in cases]
        for round_ in range(runs):
            for (_, case_runs, writer, made), took in zip(cases, times, strict=True):
                if round_ < case_runs:
                    took.append(timed(fifo, writer, writer_makes_fifo=made))
        print(f"payload {size / 1e9:.2f} GB, page-cached; {runs} runs ({gzip_runs} for gzip)")
        print(f"| {'case':<44} | median GB/s | / raw | best GB/s | / raw |")
        print(f"|{'-' * 46}|-------------|-------|-----------|-------|")
        raw_median, raw_best = (size / f(times[1]) / 1e9 for f in (statistics.median, min))
        for (name, *_), took in zip(cases, times, strict=True):
            median, best = size / statistics.median(took) / 1e9, size / min(took) / 1e9
            print(
                f"| {name:<44} | {median:11.2f} | {median / raw_median:5.2f} "
                f"| {best:9.2f} | {best / raw_best:5.2f} |"
            )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
