"""Running the Pipe mode feeder the way a job's monitor runs it, and reading its FIFOs.

A feeder runs in a forked
child that optionally drops to another user, calls run_feeder and os._exit's with its
result, exactly as the monitor does; its stderr goes to a file so that tests can check
it stayed quiet.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemon import scratch_dir
from tests.support.waiting import wait_for
from trainqd.monitor.feed.feeder import EXIT_STOPPED, run_feeder
from trainqd.monitor.records import PipeChannel

PIPE_READER = Path(__file__).resolve().parents[1] / "trainers" / "pipe_reader.py"
NOBODY = 65534
NOGROUP = 65534


@dataclass
class FeederRun:
    pid: int
    report_fd: int
    stderr_path: Path
    status: int | None = None
    early_report: bytes = b""

    def poll(self) -> int | None:
        if self.status is None:
            pid, wait_status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(wait_status)
        return self.status

    def wait(self, timeout: float = 10.0) -> int:
        wait_for(lambda: self.poll() is not None, timeout=timeout, what="the feeder to exit")
        assert self.status is not None
        return self.status

    def report(self) -> str:
        """What the feeder wrote to its report descriptor (call once it has exited)."""
        chunks = [self.early_report]
        while chunk := os.read(self.report_fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()

    def wait_report(self, timeout: float = 10.0) -> str:
        """The report of a feeder that is still alive (a failure it waits to be stopped on)."""
        wait_for(
            lambda: select.select([self.report_fd], [], [], 0)[0],
            timeout=timeout,
            what="the feeder's report",
        )
        self.early_report += os.read(self.report_fd, 65536)
        return self.early_report.decode()

    def read_until_failure(self, fifo: Path) -> bytes:
        """Read an epoch the feeder fails in. The report comes while the reader still waits
        (a failed epoch never ends in a clean EOF that would pass for a whole one); the
        stop that follows, as the monitor sends it, ends the read."""
        got: dict[str, bytes] = {}
        reader = threading.Thread(target=lambda: got.setdefault("data", read_fifo(fifo)))
        reader.start()
        self.wait_report()
        reader.join(0.3)  # a bounded look for an end of file that must not come
        assert reader.is_alive(), "the reader saw an end of file after the feeder failed"
        os.kill(self.pid, signal.SIGTERM)
        assert self.wait() == EXIT_STOPPED
        reader.join(5)
        return got["data"]

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@dataclass
class Workspace:
    """A job's ml root and a place for source data, under /tmp, traversable by nobody."""

    root: Path
    runs: list[FeederRun] = field(default_factory=list)

    @property
    def ml_root(self) -> Path:
        return self.root / "ml"

    @property
    def data_dir(self) -> Path:
        return self.root / "ml" / "input" / "data"

    def fifo(self, channel: str, epoch: int) -> Path:
        return self.data_dir / f"{channel}_{epoch}"

    def start(
        self,
        channels: Sequence[PipeChannel],
        *,
        uid: int | None = None,
        prepare: Callable[[], None] | None = None,
    ) -> FeederRun:
        """Fork the feeder's process; it runs as `uid` and calls `prepare` before feeding."""
        report_r, report_w = os.pipe()
        stderr_path = self.root / f"feeder-{len(self.runs)}.stderr"
        pid = os.fork()
        if pid == 0:  # the feeder's process, as the monitor forks it
            status = 70
            try:
                os.close(report_r)
                err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                os.dup2(err, 1)
                os.dup2(err, 2)
                if uid is not None:
                    os.setgroups([])
                    os.setgid(NOGROUP)
                    os.setuid(uid)
                if prepare is not None:
                    prepare()
                status = run_feeder(str(self.ml_root), channels, report_w)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)
        os.close(report_w)
        run = FeederRun(pid, report_r, stderr_path)
        self.runs.append(run)
        return run

    def fifo_names(self) -> list[str]:
        return sorted(p.name for p in self.data_dir.iterdir() if stat.S_ISFIFO(p.lstat().st_mode))

    def wait_fifo(self, channel: str, epoch: int, timeout: float = 10.0) -> Path:
        path = self.fifo(channel, epoch)
        wait_for(lambda: is_fifo(path), timeout=timeout, what=f"{path.name} to appear")
        return path

    def read_epochs(
        self, out_dir: Path, *channels: str, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the pipe_reader trainer; `channels` are its CHANNEL:EPOCHS[:CLOSE_AFTER]."""
        env = {**os.environ, "SAGEMAKER_BASE_DIR": str(self.ml_root)}
        out_dir.mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, str(PIPE_READER), str(out_dir), *channels],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def close(self) -> None:
        for run in self.runs:
            if run.poll() is None:
                os.kill(run.pid, signal.SIGKILL)
                run.wait()
            os.close(run.report_fd)
        shutil.rmtree(self.root)


@contextlib.contextmanager
def workspace() -> Iterator[Workspace]:
    root = scratch_dir("tq-feed-")
    space = Workspace(root)
    try:
        space.data_dir.mkdir(parents=True)
        os.chown(space.data_dir, NOBODY, NOGROUP)
        yield space
    finally:
        space.close()


def is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def open_fifo(path: Path) -> int:
    """Open an epoch's FIFO for reading without waiting for its writer (see drain)."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def drain(fd: int, limit: int | None = None, timeout: float = 10.0) -> bytes:
    """Read a FIFO opened by open_fifo to EOF, or `limit` bytes, never hanging.

    Polled: poll reports nothing on a FIFO no writer has opened yet, so a feeder that
    died cannot leave the test waiting for ever.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while limit is None or len(data) < limit:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0 or not poller.poll(left_ms):
            raise TimeoutError(f"the FIFO gave no data or EOF in {timeout}s")
        try:
            chunk = os.read(fd, 1 << 20 if limit is None else limit - len(data))
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)


def read_fifo(path: Path, limit: int | None = None, timeout: float = 10.0) -> bytes:
    """Read an epoch's FIFO to EOF, or close it after `limit` bytes."""
    fd = open_fifo(path)
    try:
        return drain(fd, limit, timeout)
    finally:
        os.close(fd)


def expected_stream(files: Sequence[Path]) -> bytes:
    return b"".join(path.read_bytes() for path in files)


def write_files(directory: Path, sizes: dict[str, int]) -> list[Path]:
    """Files of the given sizes (relative names, '/' for nesting), with distinct content."""
    paths = []
    for number, (name, size) in enumerate(sizes.items()):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pattern = f"<{number}:{name}>".encode()
        path.write_bytes((pattern * (size // len(pattern) + 1))[:size])
        paths.append(path)
    return paths
