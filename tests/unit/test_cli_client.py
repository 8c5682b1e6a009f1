"""The API client against a real HTTP/1.1 peer on a real unix socket.

`ApiStub` answers trainqd's routes with canned replies (h11 on the server side, a thread per
connection), so the client's framing, streaming, timeouts and error mapping are exercised
byte for byte. The commands' tests (test_cli_commands.py) use it too.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.apistub import ApiStub, Reply, Seen
from trainq.client import Client, QueryValue, build_target, iter_lines
from trainq.core.errors import (
    Busy,
    Conflict,
    DaemonUnreachable,
    ExitCode,
    Forbidden,
    NotFound,
    TrainqError,
    Unavailable,
)


def test_request_json_round_trip(stub: ApiStub) -> None:
    stub.on("POST", "/v1/jobs", lambda seen: Reply(201, {"id": 7, "echo": seen.body}))
    status, body = Client(stub.socket_path).request("POST", "/v1/jobs", json={"command": ["true"]})
    assert (status, body) == (201, {"id": 7, "echo": {"command": ["true"]}})
    seen = stub.seen[0]
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["host"] == "trainq"
    assert seen.headers["user-agent"].startswith("trainq/")


def test_query_is_encoded(stub: ApiStub) -> None:
    stub.on("GET", "/v1/jobs", Reply(body={"jobs": []}))
    query: dict[str, QueryValue] = {
        "all": False,
        "state": "PENDING",
        "user": None,
        "odd": "a b&c=d",
    }
    Client(stub.socket_path).request("GET", "/v1/jobs", query=query)
    assert stub.seen[0].query == {"all": "false", "state": "PENDING", "odd": "a b&c=d"}
    assert build_target("/v1/jobs", {"all": True, "since": 0}) == "/v1/jobs?all=true&since=0"
    assert build_target("/v1/jobs", {"user": None}) == "/v1/jobs"


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(404, "not_found", NotFound), (403, "forbidden", Forbidden), (409, "something_new", Conflict)],
)
def test_errors_come_back_as_their_class(
    stub: ApiStub, status: int, code: str, error: type[TrainqError]
) -> None:
    stub.on("GET", "/v1/jobs/3", Reply(status, {"error": {"code": code, "message": "job 3: no"}}))
    with pytest.raises(error, match=r"^job 3: no$"):
        Client(stub.socket_path).request("GET", "/v1/jobs/3")


def test_an_error_that_is_not_json(stub: ApiStub) -> None:
    stub.on(
        "GET", "/v1/health", Reply(502, raw=b"<html>bad gateway</html>", content_type="text/html")
    )
    with pytest.raises(TrainqError, match=r"^the daemon answered HTTP 502$"):
        Client(stub.socket_path).request("GET", "/v1/health")


def test_stream_yields_chunks_as_they_are_sent(stub: ApiStub) -> None:
    second = threading.Event()

    def chunks() -> Iterator[bytes]:
        yield b"epoch 1\n"
        assert second.wait(10)
        yield b"epoch 2\n"

    stub.on("GET", "/v1/jobs/1/logs", Reply(chunks=chunks(), content_type="text/plain"))
    with Client(stub.socket_path).stream("GET", "/v1/jobs/1/logs", {"follow": True}) as stream:
        assert stream.headers["content-type"] == "text/plain"
        assert next(stream) == b"epoch 1\n"  # before the server has written the rest
        second.set()
        assert list(stream) == [b"epoch 2\n"]
    assert stub.seen[0].query == {"follow": "true"}


def test_a_refused_stream_raises_before_the_first_chunk(stub: ApiStub) -> None:
    stub.on(
        "GET", "/v1/events", Reply(404, {"error": {"code": "not_found", "message": "no job 9"}})
    )
    with pytest.raises(NotFound, match="no job 9"):
        Client(stub.socket_path).stream("GET", "/v1/events", {"job": 9})


def test_lines_across_chunks() -> None:
    chunks = iter([b'{"a"', b": 1}\n{", b'"b": 2}\n\n', b"tail"])
    assert list(iter_lines(chunks)) == [b'{"a": 1}', b'{"b": 2}', b"", b"tail"]


def test_hang_up_without_an_answer(stub: ApiStub) -> None:
    stub.on("GET", "/v1/health", Reply(hang_up=True))
    with pytest.raises(Unavailable, match="closed the connection without answering"):
        Client(stub.socket_path).request("GET", "/v1/health")


def test_no_answer_in_time(stub: ApiStub) -> None:
    release = threading.Event()

    def slow(_seen: Seen) -> Reply:
        release.wait(10)
        return Reply(body={})

    stub.on("GET", "/v1/health", slow)
    try:
        with pytest.raises(Unavailable, match="did not answer in time"):
            Client(stub.socket_path, response_timeout=0.2).request("GET", "/v1/health")
    finally:
        release.set()


def test_no_socket_says_how_to_start_the_daemon(tmp_path: Path) -> None:
    path = tmp_path / "trainq.sock"
    with pytest.raises(DaemonUnreachable) as caught:
        Client(path).request("GET", "/v1/health")
    assert caught.value.message == (
        f"cannot reach trainqd at {path}: no such file. Is it running? "
        "Start it with `trainqd` (or `systemctl start trainqd`)."
    )


def test_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    path = tmp_path / "trainq.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left_behind:
        left_behind.bind(str(path))
    with pytest.raises(DaemonUnreachable, match=r"connection refused .* Start it with `trainqd`"):
        Client(path).request("GET", "/v1/health")


def test_a_path_that_is_not_a_socket(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DaemonUnreachable, match=r"file: the path is not a socket$"):
        Client(tmp_path / "file").request("GET", "/v1/health")
    with pytest.raises(DaemonUnreachable, match=r"file/trainq.sock: not a directory$"):
        Client(tmp_path / "file" / "trainq.sock").request("GET", "/v1/health")


def test_a_path_too_long_for_a_socket() -> None:
    path = Path("/tmp") / ("x" * 120) / "trainq.sock"
    with pytest.raises(
        DaemonUnreachable, match=r"too long for a unix socket \(at most 107 bytes\)"
    ):
        Client(path).request("GET", "/v1/health")


def test_hang_up_mid_answer(stub: ApiStub) -> None:
    def cut_short(_seen: Seen) -> Reply:
        return Reply(chunks=_raise_after(b'{"jobs": ['))

    stub.on("GET", "/v1/jobs", cut_short)
    with pytest.raises(Unavailable, match="closed the connection mid-answer"):
        Client(stub.socket_path).request("GET", "/v1/jobs")


def _raise_after(chunk: bytes) -> Iterator[bytes]:
    yield chunk
    raise OSError("the daemon died")  # the stub closes without ending the chunked body


BUSY = {"error": {"code": "busy", "message": "you already hold 64 connections to trainqd"}}


def busy_first(times: int, then: Reply) -> Callable[[Seen], Reply]:
    answered = [0]

    def reply(_seen: Seen) -> Reply:
        answered[0] += 1
        return Reply(503, BUSY) if answered[0] <= times else then

    return reply


def test_a_busy_daemon_is_asked_again(stub: ApiStub) -> None:
    stub.on("GET", "/v1/jobs", busy_first(2, Reply(body={"jobs": []})))
    status, body = Client(stub.socket_path).request("GET", "/v1/jobs")
    assert (status, body) == (200, {"jobs": []})
    assert len(stub.requests_to("/v1/jobs")) == 3


def test_a_busy_stream_is_asked_again(stub: ApiStub) -> None:
    stub.on("GET", "/v1/events", busy_first(1, Reply(chunks=iter([b"{}\n"]))))
    with Client(stub.socket_path).stream("GET", "/v1/events") as stream:
        assert b"".join(stream) == b"{}\n"
    assert len(stub.requests_to("/v1/events")) == 2


def test_busy_for_longer_than_the_retries_is_one_line_and_exit_7(stub: ApiStub) -> None:
    stub.on("GET", "/v1/health", Reply(503, BUSY))
    started = time.monotonic()
    with pytest.raises(Busy, match=r"^you already hold 64 connections to trainqd$") as caught:
        Client(stub.socket_path, busy_retry_seconds=0.3).request("GET", "/v1/health")
    assert 0.3 <= time.monotonic() - started < 2
    assert caught.value.exit_code == ExitCode.UNAVAILABLE
    assert len(stub.requests_to("/v1/health")) >= 3


def test_a_daemon_shutting_down_is_not_asked_again(stub: ApiStub) -> None:
    stub.on("GET", "/v1/health", Reply(503, {"error": {"code": "unavailable", "message": "bye"}}))
    with pytest.raises(Unavailable, match=r"^bye$"):
        Client(stub.socket_path).request("GET", "/v1/health")
    assert len(stub.requests_to("/v1/health")) == 1


def test_a_full_listen_backlog_is_retried_then_busy(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)  # never accepted: one connection fills the queue
        queued = []
        try:
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setblocking(False)
                queued.append(sock)
                sock.connect(str(path))
        except BlockingIOError:
            pass
        try:
            started = time.monotonic()
            with pytest.raises(Busy, match="too busy to accept connections"):
                Client(path, busy_retry_seconds=0.3).request("GET", "/v1/health")
            assert time.monotonic() - started >= 0.3
        finally:
            for sock in queued:
                sock.close()
