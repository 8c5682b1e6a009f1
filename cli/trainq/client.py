"""The API client: HTTP/1.1 over trainqd's unix socket, one connection per request.

Why not httpx: `import httpx` alone costs ~140 ms on the lab's 2-core machines, more than the
whole budget of `trainq submit` (<= 120 ms median). h11 is the HTTP/1.1 state machine the
daemon itself serves with, so both ends frame messages the same way and no HTTP is parsed by
hand here; the socket is a plain blocking AF_UNIX one.

A request may wait `response_timeout` seconds for its answer (a wedged daemon must not hang
`trainq ls` forever); a stream (`logs -f`, events) has no time limit once it has started,
because a training run may stay quiet for hours. Connecting always has a time limit.

`Client` is also the Python library (`from trainq import Client`): besides the raw
`request` and `stream` the CLI uses (the daemon's JSON as it came, no pydantic), it has
typed methods (`submit`, `submit_many`, `list`, `show`, `stop`, `stop_group`, `logs`, `wait`,
`wait_group`, `events`, `users`) that return the wire records of `trainq.core.wire`, imported on
first use so `import trainq` stays cheap.

Errors come back as trainq's own classes (`trainq.core.errors.from_wire`), so the CLI's exit
status follows the daemon's verdict; a socket nobody answers on is `DaemonUnreachable` with a
line that says how to start the daemon.

A busy daemon (a `busy` 503: the caller holds its share of connections or streams, or the
daemon all it serves; or a listen backlog too full to connect) did nothing with the request,
so it is sent again with growing pauses for up to `busy_retry_seconds` before the error
stands.

A submission with a client token (`Idempotency-Key`: `client_token=` here, and every `trainq
submit`) whose answer was lost (the connection closed before the answer, no answer in time,
trainqd restarting) is sent again, for up to `RESUBMIT_SECONDS`: trainqd queues a token's
submission once and answers a repeat with the jobs the first one queued.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import json as jsonlib
import os
import random
import socket
import stat
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import quote, urlencode

import h11

from trainq.core import __version__
from trainq.core.errors import Busy, DaemonUnreachable, Forbidden, Unavailable, from_wire
from trainq.core.paths import client_socket

if TYPE_CHECKING:
    from trainq.core.spec import JobSpec
    from trainq.core.wire import (
        EventRecord,
        GroupStopped,
        JobMetrics,
        JobRecord,
        SubmittedGroup,
        TuneRecord,
        UserList,
    )

CONNECT_TIMEOUT = 5.0
BUSY_RETRY_SECONDS = 3.0
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 0.5
RESPONSE_TIMEOUT = 60.0
RESUBMIT_SECONDS = 120.0  # a submission with a token, sent again after a lost answer
RESUBMIT_PAUSE = 0.5
IDEMPOTENCY_HEADER = "Idempotency-Key"
RECV_SIZE = 64 * 1024
UNIX_PATH_MAX = 108  # sun_path, its terminating NUL included
START_HINT = "Is it running? Start it with `trainqd` (or `systemctl start trainqd`)."

QueryValue = str | int | float | bool | None
T = TypeVar("T")


def build_target(path: str, query: Mapping[str, QueryValue] | None = None) -> str:
    """The request target: `path?k=v&...`, booleans as `true`/`false`, None values left out."""
    if not query:
        return path
    pairs = [
        (key, ("true" if value else "false") if isinstance(value, bool) else str(value))
        for key, value in query.items()
        if value is not None
    ]
    return f"{path}?{urlencode(pairs, quote_via=quote)}" if pairs else path


class LogLine(NamedTuple):
    """A line of a job's output: when the monitor read it, its stream, its text."""

    time: float
    stream: str
    text: str


def _log_query(
    stream: str, attempt: int | None, tail: int | None, since: float | None, *, follow: bool
) -> dict[str, QueryValue]:
    return {
        "follow": follow,
        "stream": stream,
        "attempt": attempt,
        "tail": tail,
        "since": None if since is None else f"{since:.6f}",
    }


def iter_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Split a byte stream into lines (without their newline), however the chunks fall."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending


def _decode_json(data: bytes, headers: Mapping[str, str]) -> Any:
    """The body as JSON, or None when it is empty or not JSON (a proxy's HTML, say)."""
    if not data or "json" not in headers.get("content-type", "application/json"):
        return None
    try:
        return jsonlib.loads(data)
    except ValueError:
        return None


def _group_name(gid: int) -> str:
    import grp  # noqa: PLC0415 (only on the EACCES path)

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def connect_error(socket_path: Path, exc: OSError, timeout: float | None = None) -> Exception:
    """Turn a failed connect into one line a person can act on."""
    where = f"cannot reach trainqd at {socket_path}"
    if isinstance(exc, TimeoutError):
        return DaemonUnreachable(
            f"{where}: it did not accept the connection within {timeout or CONNECT_TIMEOUT:g} s "
            "(overloaded or hung?)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:
            st = socket_path.stat()
        except OSError:
            return Forbidden(f"{where}: permission denied (on the socket or its directory)")
        group = _group_name(st.st_gid)
        return Forbidden(
            f"{where}: permission denied (the socket is mode {st.st_mode & 0o777:04o}, "
            f"group {group}; ask an administrator to add you to group {group})"
        )
    if exc.errno == errno.ENOENT:
        return DaemonUnreachable(f"{where}: no such file. {START_HINT}")
    if exc.errno == errno.ECONNREFUSED:
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(socket_path.stat().st_mode):
                return DaemonUnreachable(f"{where}: the path is not a socket")
        return DaemonUnreachable(
            f"{where}: connection refused (a socket left by a daemon that exited). {START_HINT}"
        )
    if exc.errno == errno.EAGAIN:  # a unix socket's backlog is full
        return Busy(f"{where}: it is too busy to accept connections; try again")
    if len(os.fsencode(socket_path)) >= UNIX_PATH_MAX:
        return DaemonUnreachable(
            f"{where}: the path is too long for a unix socket (at most {UNIX_PATH_MAX - 1} bytes)"
        )
    reason = exc.strerror or str(exc)
    if reason[1:2].islower():  # "Not a directory" -> "not a directory"; "AF_UNIX ..." stays
        reason = reason[:1].lower() + reason[1:]
    return DaemonUnreachable(f"{where}: {reason}")


class _Exchange:
    """One request and its response on a fresh connection."""

    def __init__(self, socket_path: Path, connect_timeout: float) -> None:
        self.socket_path = socket_path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn = h11.Connection(our_role=h11.CLIENT)
        self.eof = False
        self.answered = False
        try:
            self.sock.settimeout(connect_timeout)
            self.sock.connect(os.fspath(socket_path))
        except OSError as exc:
            self.sock.close()
            raise connect_error(socket_path, exc, connect_timeout) from None

    def close(self) -> None:
        self.sock.close()

    def send(
        self, method: str, target: str, body: bytes | None, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        headers = [
            ("Host", "trainq"),
            ("User-Agent", f"trainq/{__version__}"),
            ("Accept", "application/json"),
            ("Connection", "close"),
            *extra,
        ]
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        data = self.conn.send(h11.Request(method=method, target=target, headers=headers)) or b""
        if body:
            data += self.conn.send(h11.Data(data=body)) or b""
        data += self.conn.send(h11.EndOfMessage()) or b""
        # The daemon may answer (413, say) and close before reading all we sent: its answer
        # is still waiting to be read, and says more than EPIPE would.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(data)

    def _closed(self) -> Unavailable:
        when = "mid-answer" if self.answered else "without answering"
        return Unavailable(
            f"trainqd at {self.socket_path} closed the connection {when} (is it restarting?)"
        )

    def next_event(self) -> Any:
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self.eof:  # h11's way of saying the peer hung up too early
                    raise self._closed() from None
                raise Unavailable(f"trainqd sent a malformed HTTP response: {exc}") from None
            if isinstance(event, h11.ConnectionClosed):
                raise self._closed()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = self.sock.recv(RECV_SIZE)
            except TimeoutError:
                raise Unavailable(
                    f"trainqd at {self.socket_path} did not answer in time (overloaded or hung?)"
                ) from None
            except ConnectionResetError:
                data = b""
            self.eof = not data
            self.conn.receive_data(data)

    def response_head(self) -> h11.Response:
        while True:
            event = self.next_event()
            if isinstance(event, h11.Response):
                self.answered = True
                return event
            # InformationalResponse (1xx): nothing to do but wait for the real answer.

    def body_chunks(self) -> Generator[bytes, None, None]:
        while True:
            event = self.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return


def _headers(response: h11.Response) -> dict[str, str]:
    return {name.decode().lower(): value.decode("latin-1") for name, value in response.headers}


class ResponseStream(Iterator[bytes]):
    """The body of a streamed response, chunk by chunk as the daemon sends it.

    Close it (or use it as a context manager) to hang up early; the daemon sees the
    connection close and stops producing.
    """

    def __init__(self, exchange: _Exchange, headers: dict[str, str]) -> None:
        self._exchange = exchange
        self._chunks = exchange.body_chunks()
        self.headers = headers

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._chunks.close()
        self._exchange.close()

    def __enter__(self) -> ResponseStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Client:
    """trainqd's API on `socket_path` (default: the socket `trainq` would use: $TRAINQ_SOCKET,
    your own daemon's, else the system's). Holds no connection between calls."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        response_timeout: float | None = RESPONSE_TIMEOUT,
        busy_retry_seconds: float = BUSY_RETRY_SECONDS,
    ) -> None:
        self.socket_path = client_socket(None if socket_path is None else os.fspath(socket_path))
        self.connect_timeout = connect_timeout
        self.response_timeout = response_timeout
        self.busy_retry_seconds = busy_retry_seconds

    def _retrying_busy(self, attempt: Callable[[], T]) -> T:
        """`attempt()`, again after a pause each time the daemon is busy, until
        `busy_retry_seconds` have passed; then its Busy error stands."""
        give_up_at = time.monotonic() + self.busy_retry_seconds
        pause = _FIRST_PAUSE
        while True:
            try:
                return attempt()
            except Busy:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    raise
            # Jittered, so clients turned away together do not all come back together.
            time.sleep(min(left, pause * random.uniform(0.5, 1.0)))  # noqa: S311 (not crypto)
            pause = min(pause * 2, _LONGEST_PAUSE)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        query: Mapping[str, QueryValue] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request and return (status, parsed JSON body or None).

        Raises the error the daemon's answer stands for when the status is 400 or more.
        """
        body = None if json is None else jsonlib.dumps(json).encode()
        target, extra = build_target(path, query), list((headers or {}).items())
        return self._retrying_busy(lambda: self._request(method, target, body, extra))

    def post_jobs(self, body: Any, token: str | None) -> Any:
        """POST /v1/jobs (one spec or a list) and its answer. With a client token, a lost
        answer is no error yet: the same request goes again until trainqd answers, for up
        to RESUBMIT_SECONDS, and a token queues its jobs once whatever happened to the
        first request."""
        if token is None:
            return self.request("POST", "/v1/jobs", json=body)[1]
        headers = {IDEMPOTENCY_HEADER: token}
        give_up_at: float | None = None  # set at the first lost answer
        while True:
            try:
                return self.request("POST", "/v1/jobs", json=body, headers=headers)[1]
            except Unavailable as exc:
                never_sent = isinstance(exc, DaemonUnreachable | Busy) and give_up_at is None
                if never_sent:  # nothing reached trainqd: the usual one line
                    raise
                give_up_at = give_up_at or time.monotonic() + RESUBMIT_SECONDS
                if time.monotonic() >= give_up_at:
                    raise Unavailable(
                        f"{exc.message}; the submission may have been queued: send it again "
                        f"with the token {token} (trainq submit --token {token}) to get its "
                        "jobs, queued once"
                    ) from None
            time.sleep(RESUBMIT_PAUSE)

    def all_jobs(self, query: Mapping[str, QueryValue] | None = None) -> builtins.list[Any]:
        """Every job GET /v1/jobs matches, following its pages (largest allowed) to the end."""
        jobs: builtins.list[Any] = []
        cursor: QueryValue = None
        while True:
            _, page = self.request(
                "GET", "/v1/jobs", query={**(query or {}), "limit": 1000, "after": cursor}
            )
            jobs.extend(page.get("jobs", []))
            cursor = page.get("next")
            if not cursor:
                return jobs

    def _request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> tuple[int, Any]:
        exchange = _Exchange(self.socket_path, self.connect_timeout)
        try:
            exchange.sock.settimeout(self.response_timeout)
            exchange.send(method, target, body, headers)
            response = exchange.response_head()
            data = b"".join(exchange.body_chunks())
        finally:
            exchange.close()
        parsed = _decode_json(data, _headers(response))
        if response.status_code >= 400:
            raise from_wire(response.status_code, parsed)
        return response.status_code, parsed

    def stream(
        self, method: str, path: str, query: Mapping[str, QueryValue] | None = None
    ) -> ResponseStream:
        """Send one request and return its body as an iterator of chunks.

        The answer's head is read before this returns, so a refused request raises here,
        not at the first chunk. No time limit applies once the answer has begun.
        """
        return self._retrying_busy(lambda: self._stream(method, build_target(path, query)))

    def _stream(self, method: str, target: str) -> ResponseStream:
        exchange = _Exchange(self.socket_path, self.connect_timeout)
        try:
            exchange.sock.settimeout(self.response_timeout)
            exchange.send(method, target, None)
            response = exchange.response_head()
            headers = _headers(response)
            error_body = b"".join(exchange.body_chunks()) if response.status_code >= 400 else None
        except BaseException:
            exchange.close()
            raise
        if error_body is not None:
            exchange.close()
            raise from_wire(response.status_code, _decode_json(error_body, headers))
        exchange.sock.settimeout(None)
        return ResponseStream(exchange, headers)

    # -- the typed API (the Python library) ----------------------------------------------

    def submit(
        self,
        spec: Mapping[str, Any] | JobSpec | None = None,
        /,
        *,
        client_token: str | None = None,
        **fields: Any,
    ) -> JobRecord:
        """Submit a job: `spec` (a dict shaped like a spec file, or a JobSpec) with `fields`
        over it. As with `trainq submit`, relative paths are taken from the current
        directory, and a subprocess job runs there with your PATH unless the spec says
        otherwise. Raises InvalidSpec (and the daemon's other refusals) as trainq errors.

        `client_token` (1-128 letters, digits, `.`, `_`, `:`, `-`; a fresh uuid4 per job)
        makes the submission idempotent: the same call again returns the same job, never a
        second one, and a lost answer is retried (see the module's docstring)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415 (pydantic on first use)
        from trainq.specfile import SubmitFlags, build_spec  # noqa: PLC0415

        if spec is None:
            data: dict[str, Any] = {}
        elif isinstance(spec, Mapping):
            data = dict(spec)
        else:
            data = spec.model_dump(mode="json", exclude_unset=True)
        data.update(fields)
        body = build_spec(data, SubmitFlags(), Path.cwd(), os.environ)
        return JobRecord.model_validate(self.post_jobs(body, client_token))

    def submit_many(
        self,
        specs: Iterable[Mapping[str, Any] | JobSpec],
        *,
        client_token: str | None = None,
        **fields: Any,
    ) -> SubmittedGroup:
        """Submit several jobs in one request, queued together in one transaction as one
        group (the first job's id; `list(group=...)`, `stop_group`, `wait_group`): each
        spec as `submit` takes it, with `fields` over every one. Nothing is queued if any
        spec is refused; the error names its index (`jobs[3]: ...`). `client_token` as
        for `submit`: the same call again returns the same group."""
        from trainq.core.wire import SubmittedGroup  # noqa: PLC0415 (pydantic on first use)
        from trainq.specfile import SubmitFlags, build_spec  # noqa: PLC0415

        cwd, bodies = Path.cwd(), []
        for spec in specs:
            data = (
                dict(spec)
                if isinstance(spec, Mapping)
                else spec.model_dump(mode="json", exclude_unset=True)
            )
            data.update(fields)
            bodies.append(build_spec(data, SubmitFlags(), cwd, os.environ))
        return SubmittedGroup.model_validate(self.post_jobs(bodies, client_token))

    def stop_group(self, group: int, *, grace_seconds: float | None = None) -> GroupStopped:
        """Stop every unfinished job of the group that you may stop."""
        from trainq.core.wire import GroupStopped  # noqa: PLC0415

        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}
        _, answer = self.request("POST", f"/v1/groups/{int(group)}/stop", json=body)
        return GroupStopped.model_validate(answer)

    def wait_group(self, group: int) -> builtins.list[JobRecord]:
        """Block until every job of the group has ended; their final records."""
        from trainq.groups import follow_group  # noqa: PLC0415

        follow_group(self, int(group))
        return self.list(include_ended=True, group=group)

    def list(
        self,
        *,
        include_ended: bool = False,
        state: str | None = None,
        user: str | None = None,
        group: int | None = None,
    ) -> builtins.list[JobRecord]:
        """Jobs, unfinished ones unless `include_ended` (every page, oldest first); with
        `group`, only that group's."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        query = {"all": include_ended, "state": state, "user": user, "group": group}
        return [JobRecord.model_validate(job) for job in self.all_jobs(query)]

    def show(self, job_id: int) -> JobRecord:
        """One job's record: state, spec, attempts. NotFound if there is no such job."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        _, record = self.request("GET", f"/v1/jobs/{int(job_id)}")
        return JobRecord.model_validate(record)

    def metrics(self, job_id: int) -> JobMetrics:
        """The job's metric reports: each attempt's series (kept points, count, latest,
        best). Forbidden for a job whose logs you may not read."""
        from trainq.core.wire import JobMetrics  # noqa: PLC0415

        _, record = self.request("GET", f"/v1/jobs/{int(job_id)}/metrics")
        return JobMetrics.model_validate(record)

    def tune(self, spec: Mapping[str, Any], tune: Mapping[str, Any]) -> TuneRecord:
        """Start a tuning experiment: trials of `spec` (a job spec as a dict) over the
        `tune` table's search space (README.md, "Tuning"). InvalidSpec, with one line, for
        bad input; nothing is queued then."""
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        body = {"spec": dict(spec), "tune": dict(tune)}
        _, record = self.request("POST", "/v1/tunes", json=body)
        return TuneRecord.model_validate(record)

    def tunes(self) -> builtins.list[TuneRecord]:
        """Every tuning experiment, with its trials."""
        from trainq.core.wire import TuneList  # noqa: PLC0415

        _, listing = self.request("GET", "/v1/tunes")
        return TuneList.model_validate(listing).tunes

    def show_tune(self, tune_id: int) -> TuneRecord:
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        _, record = self.request("GET", f"/v1/tunes/{int(tune_id)}")
        return TuneRecord.model_validate(record)

    def stop_tune(self, tune_id: int) -> TuneRecord:
        """Stop a tune: no new trial starts, its queued and running trials are stopped."""
        from trainq.core.wire import TuneRecord  # noqa: PLC0415

        _, record = self.request("POST", f"/v1/tunes/{int(tune_id)}/stop")
        return TuneRecord.model_validate(record)

    def users(self) -> UserList:
        """Each user's recent usage (decayed with the fair share half-life), share of all
        users' GPU-hours, and running and waiting jobs and GPUs."""
        from trainq.core.wire import UserList  # noqa: PLC0415

        _, listing = self.request("GET", "/v1/users")
        return UserList.model_validate(listing)

    def stop(self, job_id: int, *, grace_seconds: float | None = None) -> JobRecord:
        """Stop a job (SIGTERM, the grace, SIGKILL); the record as it is now (STOPPING or
        STOPPED). Forbidden for another user's job, Conflict for one that has ended."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}
        _, record = self.request("POST", f"/v1/jobs/{int(job_id)}/stop", json=body)
        return JobRecord.model_validate(record)

    def hold(self, job_id: int) -> JobRecord:
        """Keep a pending job from starting until `release`; a running one is paused (stopped
        with its grace, queued again held). Conflict once it has ended."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        _, record = self.request("POST", f"/v1/jobs/{int(job_id)}/hold")
        return JobRecord.model_validate(record)

    def release(self, job_id: int) -> JobRecord:
        """Let a held job start; Forbidden for a hold an admin placed (unless you are one)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        _, record = self.request("POST", f"/v1/jobs/{int(job_id)}/release")
        return JobRecord.model_validate(record)

    def update(self, job_id: int, **changes: Any) -> JobRecord:
        """Change a pending job: `priority`, `gpus`, `max_runtime_seconds`, `class`
        (pass it as `job_class`) or, for admins, `boost`; the rules of a submission apply.
        Of a running job, `max_runtime_seconds` alone (its monitor gets the new deadline)."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        if "job_class" in changes:
            changes["class"] = changes.pop("job_class")
        _, record = self.request("PATCH", f"/v1/jobs/{int(job_id)}", json=changes)
        return JobRecord.model_validate(record)

    def requeue(self, job_id: int) -> JobRecord:
        """Run an ended job of yours again with the same spec, as a new job; its record."""
        from trainq.core.wire import JobRecord  # noqa: PLC0415

        _, record = self.request("POST", f"/v1/jobs/{int(job_id)}/requeue")
        return JobRecord.model_validate(record)

    def submit_like(self, job_id: int, /, **fields: Any) -> JobRecord:
        """Submit a new job from job `job_id`'s spec with `fields` over it (`trainq submit
        --like`); InvalidSpec if values of that spec are hidden from you."""
        from trainq.again import spec_of  # noqa: PLC0415

        return self.submit(spec_of(self, int(job_id)), **fields)

    def remove(self, job_id: int) -> int:
        """Delete an ended job's directory, logs and records; the files and directories
        removed. Conflict for a job that has not ended."""
        _, answer = self.request("DELETE", f"/v1/jobs/{int(job_id)}")
        return int(answer["files"])

    def drain(self, reason: str, gpus: builtins.list[int] | None = None) -> Any:
        """Start nothing new on `gpus` (None: the whole host); admins only. Every drain now."""
        body: dict[str, Any] = {"reason": reason}
        if gpus is not None:
            body["gpus"] = builtins.list(gpus)
        _, answer = self.request("POST", "/v1/drain", json=body)
        return answer["drains"]

    def resume(self, gpus: builtins.list[int] | None = None) -> Any:
        """Lift the drains of `gpus` (None: every drain); admins only. The drains left."""
        body = {} if gpus is None else {"gpus": builtins.list(gpus)}
        _, answer = self.request("POST", "/v1/resume", json=body)
        return answer["drains"]

    def logs(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
    ) -> str:
        """The output of the job's attempt (the last unless `attempt`) so far, as text, both
        streams in the order they were written; `stream` is "both", "stdout" or "stderr";
        `tail`: the last N lines only; `since`: what was written from then on (Unix time)."""
        query = _log_query(stream, attempt, tail, since, follow=False)
        with self.stream("GET", f"/v1/jobs/{int(job_id)}/logs", query) as chunks:
            return b"".join(chunks).decode("utf-8", "replace")

    def follow_logs(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
    ) -> Iterator[str]:
        """The attempt's output line by line as it is written, until the job ends."""
        query = _log_query(stream, attempt, tail, since, follow=True)
        with self.stream("GET", f"/v1/jobs/{int(job_id)}/logs", query) as chunks:
            for line in iter_lines(chunks):
                yield line.decode("utf-8", "replace")

    def log_lines(
        self,
        job_id: int,
        *,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[LogLine]:
        """Each line of output with when it was written (Unix time) and its stream."""
        query = {**_log_query(stream, attempt, tail, since, follow=follow), "stamps": True}
        with self.stream("GET", f"/v1/jobs/{int(job_id)}/logs", query) as chunks:
            for line in iter_lines(chunks):
                entry = jsonlib.loads(line) if line.strip() else {}
                if "text" in entry:
                    yield LogLine(float(entry["time"]), str(entry["stream"]), entry["text"])

    def wait(self, job_id: int) -> JobRecord:
        """Block until the job has ended (through a daemon restart, as `trainq wait` does);
        its final record. The state says how it ended."""
        from trainq.waiting import follow_until_ended  # noqa: PLC0415

        follow_until_ended(self, int(job_id))
        return self.show(job_id)

    def events(
        self, *, job_id: int | None = None, since: int | None = None
    ) -> Iterator[EventRecord]:
        """State changes as they happen (of one job, or all you may see); `since=0` replays
        the stored ones first. One job's events end once it has ended; all jobs' run until
        you stop reading them."""
        from trainq.core.wire import EventRecord  # noqa: PLC0415

        query: dict[str, QueryValue] = {"job": job_id, "since": since}
        with self.stream("GET", "/v1/events", query) as chunks:
            for line in iter_lines(chunks):
                if line.strip():  # an empty line is a keep-alive
                    yield EventRecord.model_validate_json(line)
