"""What trainq's core benchmarks share: a real trainqd in a throwaway directory, a lean
keep-alive HTTP client on its unix socket, the stamping trainer, and the statistics.

The daemon is the installed console script (`trainqd` beside this interpreter) with a fake GPU
inventory, started and stopped as an administrator would; nothing of it runs in the
benchmark's own process. The client is `http.client` on AF_UNIX: far lighter than httpx, so
the measuring side adds little to what is measured, and its cost is in every baseline anyway
(GET /v1/health on the same connection).

Run from the repository root with the project's interpreter, e.g.
`.venv/bin/python bench/api.py`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

T = TypeVar("T")

BIN = Path(sys.executable).parent
STAMP_TRAINER = Path(__file__).resolve().parent / "trainers" / "stamp.sh"
JSON_HEADERS = {"content-type": "application/json"}


# -- what is measured ----------------------------------------------------------------------


def _from_source(source: Path, module: str) -> list[str]:
    """Run `module`'s main from the source tree `source` (its cli/ and daemon/ first on
    the path), ahead of the installed trainq."""
    paths = [str(source / "cli"), str(source / "daemon")]
    boot = f"import sys; sys.path[:0] = {paths!r}; from {module} import main; sys.exit(main())"
    return [sys.executable, "-c", boot]


def trainqd_argv(source: Path | None = None) -> list[str]:
    """The installed `trainqd` console script, or the one of a patched copy of the tree
    (`--source DIR`: to measure a proposed change against the tree as it is, the same way)."""
    return [str(BIN / "trainqd")] if source is None else _from_source(source, "trainqd.main")


def trainq_argv(source: Path | None = None) -> list[str]:
    return [str(BIN / "trainq")] if source is None else _from_source(source, "trainq.cli")


def load() -> str:
    """The 1, 5 and 15 minute load averages: how busy the shared machine was."""
    return "load average " + ", ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the machine and the numbers -----------------------------------------------------------


def machine() -> str:
    """nproc, CPU model, kernel and Python: the line every report starts with."""
    models = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    cpu = models[0] if models else platform.processor() or "unknown CPU"
    return (
        f"{os.cpu_count()} cores ({cpu}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by the nearest-rank method: always a value that was seen,
    so a p99 over 100 samples is honestly the second largest, not an interpolation."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p99: float
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("no samples")
        return cls(
            n=len(values),
            median=statistics.median(values),
            p99=percentile(values, 99),
            mean=statistics.fmean(values),
            low=min(values),
            high=max(values),
        )


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline > 0 else "n/a"


def poll_until(
    condition: Callable[[], T | bool | None], timeout: float, interval: float, what: str
) -> T:
    """Bounded polling: `condition`'s first truthy value, or TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return cast(T, value)  # truthy: not None, not False
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# -- the client ----------------------------------------------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("trainq", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Client:
    """One keep-alive HTTP/1.1 connection to trainqd; every call reads its whole answer."""

    def __init__(self, socket_path: Path, timeout: float = 30.0) -> None:
        self.conn = _UnixConnection(str(socket_path), timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = JSON_HEADERS if body is not None else {}
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # trainqd closes a connection idle past its keep-alive time (30 s): a GET, which
            # changes nothing, is asked again on a new one.
            if method != "GET":
                raise
            self.conn.close()
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        return response.status, response.read()

    def json(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        status, data = self.request(method, path, payload)
        if status != expect:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        job: dict[str, Any] = self.json("POST", "/v1/jobs", spec, expect=201)
        return job

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.json("GET", f"/v1/jobs/{job_id}")
        return job

    def stop(self, job_id: int, grace: float = 0) -> None:
        self.json("POST", f"/v1/jobs/{job_id}/stop", {"grace_seconds": grace}, expect=202)


# -- the daemon ----------------------------------------------------------------------------


class Daemon:
    """A real trainqd in `base` (short, under /tmp: socket paths are limited to 108 bytes)."""

    def __init__(
        self,
        base: Path,
        gpus: str,
        config: dict[str, Any],
        source: Path | None = None,
        tables: str = "",
    ) -> None:
        self.base = base
        self.argv = trainqd_argv(source)
        self.socket = base / "s"
        self.state_dir = base / "state"
        self.log_file = base / "trainqd.log"
        self.config_file = base / "trainqd.toml"
        self.gpus = gpus
        # `tables`: TOML tables (`[name]` sections) after the top-level keys.
        keys = "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items())
        self.config_file.write_text(keys + tables)
        self.proc: subprocess.Popen[bytes] | None = None

    def options(self) -> list[str]:
        where = ["--socket", str(self.socket), "--state-dir", str(self.state_dir)]
        return [*where, "--gpus", self.gpus, "--config", str(self.config_file)]

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.argv, *self.options()],
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        poll_until(self._answers, timeout=20, interval=0.02, what="trainqd to answer")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"trainqd exited with {self.proc.returncode}: {self.log()[-2000:]}")
        try:
            with Client(self.socket, timeout=5) as client:
                return client.request("GET", "/v1/health")[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log(self) -> str:
        try:
            return self.log_file.read_text()
        except FileNotFoundError:
            return ""

    def log_events(self) -> list[dict[str, Any]]:
        """trainqd's log lines (JSON, as it writes them when not on a terminal)."""
        events = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def client(self) -> Client:
        return Client(self.socket)

    def kill_leftovers(self) -> None:
        """Monitors outlive trainqd by design; whatever still runs for this state dir dies
        here. A monitor's stderr is its monitor.log, a trainer's environment names its ml
        root: both lie under the state dir."""
        marker = str(self.state_dir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                stderr = os.readlink(entry / "fd" / "2").encode()
            except OSError:
                continue
            if marker in environ or stderr.startswith(marker):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)


@contextlib.contextmanager
def running_daemon(
    gpus: str = "fake:1", source: Path | None = None, tables: str = "", **config: Any
) -> Iterator[Daemon]:
    base = Path(tempfile.mkdtemp(prefix="tqb", dir="/tmp"))
    # Jobs run as their owner, who must reach the ml root.
    os.chmod(base, 0o755)  # noqa: S103
    daemon = Daemon(base, gpus, {"default_stop_grace_seconds": 0, **config}, source, tables)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        daemon.kill_leftovers()
        shutil.rmtree(base, ignore_errors=True)


def hold_the_gpu(client: Client) -> int:
    """Start a job that holds the only GPU until stopped, so GPU jobs submitted after it
    queue: what is measured then is the submission, not a start."""
    # Without TRAINQ_JOB_ID in its environment: another trainqd on this machine (a test's)
    # that cleans up a lost attempt kills every process carrying the same job id and
    # attempt, whichever daemon started it (trainqd.attempts.leftovers), and this job lives long.
    sleep = ["/usr/bin/env", "-u", "TRAINQ_JOB_ID", "/bin/sleep", "100000"]
    job = client.submit({"name": "holder", "gpus": 1, "command": sleep})

    def running() -> bool:
        return bool(client.job(job["id"])["state"] == "RUNNING")

    poll_until(running, timeout=20, interval=0.02, what="the GPU holder to run")
    return int(job["id"])


def check_holding(client: Client, holder: int) -> None:
    """Fail loudly if the GPU holder ended: queued jobs would start, and a submission
    benchmark would quietly become a dispatch one."""
    job = client.job(holder)
    if job["state"] != "RUNNING":
        raise RuntimeError(
            f"the GPU holder (job {holder}) is {job['state']}: {job['failure_reason']!r}, "
            f"attempts {job['attempts']}"
        )


# -- the stamping trainer ------------------------------------------------------------------


@dataclass(frozen=True)
class Stamp:
    when: float
    what: str  # "start" or "end"
    job: str  # the job's name as the trainer saw it (TRAINING_JOB_NAME)


def read_stamps(path: Path) -> list[Stamp]:
    stamps = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        what, when, job = line.split(" ", 2)
        # $EPOCHREALTIME uses the locale's decimal point.
        stamps.append(Stamp(float(when.replace(",", ".")), what, job))
    return stamps


def stamps_by_job(stamps: Sequence[Stamp]) -> dict[str, dict[str, float]]:
    by_job: dict[str, dict[str, float]] = {}
    for stamp in stamps:
        by_job.setdefault(stamp.job, {})[stamp.what] = stamp.when
    return by_job


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
