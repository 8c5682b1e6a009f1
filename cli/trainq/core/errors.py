"""trainq's errors, shared by the daemon (HTTP status) and the CLI (exit status).

    TrainqError             500  internal            exit 1
    ├── InvalidRequest      400  invalid_request     exit 2  malformed body, bad query
    │   └── InvalidSpec     400  invalid_spec        exit 2  a spec that cannot run here
    ├── Forbidden           403  forbidden           exit 5  not your job
    ├── NotFound            404  not_found           exit 4  unknown job, unknown path
    ├── MethodNotAllowed    405  method_not_allowed  exit 2
    ├── Conflict            409  conflict            exit 6  the job's state forbids it
    ├── PayloadTooLarge     413  payload_too_large   exit 2
    ├── Unavailable         503  unavailable         exit 7  shutting down
    │   ├── Busy            503  busy                exit 7  over a fair share; retried
    │   └── DaemonUnreachable    (client only)       exit 7  no daemon behind the socket
    └── DiskFull            507  disk_full           exit 8  no room left to record it

On the wire an error is `{"error": {"code": "...", "message": "..."}}`; `from_wire` turns it
back into the same class on the client, so the CLI's exit status follows the server's verdict.
Every message is one line a person can act on.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar


class ExitCode(enum.IntEnum):
    """Exit statuses of `trainq`. `wait` and `submit --wait` exit 0 only for COMPLETED."""

    OK = 0
    FAILED = 1  # the job FAILED, or an unexpected error
    USAGE = 2  # bad flags, bad spec, bad request
    STOPPED = 3  # the job ended STOPPED
    NOT_FOUND = 4
    FORBIDDEN = 5
    CONFLICT = 6
    UNAVAILABLE = 7  # the daemon is not running or is shutting down
    DISK_FULL = 8  # the daemon's disk is full: nothing was changed
    TIMEOUT = 9  # the job ended STOPPED by its time limit (shown as TIMEOUT)


class TrainqError(Exception):
    code: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500
    exit_code: ClassVar[ExitCode] = ExitCode.FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_wire(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidRequest(TrainqError):
    code = "invalid_request"
    http_status = 400
    exit_code = ExitCode.USAGE


class InvalidSpec(InvalidRequest):
    code = "invalid_spec"


class Forbidden(TrainqError):
    code = "forbidden"
    http_status = 403
    exit_code = ExitCode.FORBIDDEN


class NotFound(TrainqError):
    code = "not_found"
    http_status = 404
    exit_code = ExitCode.NOT_FOUND


class MethodNotAllowed(TrainqError):
    code = "method_not_allowed"
    http_status = 405
    exit_code = ExitCode.USAGE


class Conflict(TrainqError):
    code = "conflict"
    http_status = 409
    exit_code = ExitCode.CONFLICT


class PayloadTooLarge(TrainqError):
    code = "payload_too_large"
    http_status = 413
    exit_code = ExitCode.USAGE


class Unavailable(TrainqError):
    code = "unavailable"
    http_status = 503
    exit_code = ExitCode.UNAVAILABLE


class Busy(Unavailable):
    """The caller holds its share of connections or streams (or the daemon all it serves);
    nothing was done, so the request may be sent again."""

    code = "busy"


class DaemonUnreachable(Unavailable):
    """Raised by the client only: nothing answers on the socket."""


class DiskFull(TrainqError):
    """The daemon could not record the change (its disk is full); nothing was changed."""

    code = "disk_full"
    http_status = 507
    exit_code = ExitCode.DISK_FULL


_BY_CODE: dict[str, type[TrainqError]] = {
    cls.code: cls
    for cls in (
        TrainqError,
        InvalidRequest,
        InvalidSpec,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        PayloadTooLarge,
        Unavailable,
        Busy,
        DiskFull,
    )
}


def from_wire(status: int, body: Any) -> TrainqError:
    """The error a server response stands for; tolerant of bodies that are not ours."""
    code, message = "internal", f"the daemon answered HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = next(
            (c for c in _BY_CODE.values() if c.http_status == status and c is not TrainqError),
            TrainqError,
        )
    return cls(message)
