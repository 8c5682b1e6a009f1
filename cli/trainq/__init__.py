"""trainq: a GPU job scheduler for one shared workstation (the client side), as the `trainq`
command and as a Python library:

    from trainq import Client
    job = Client().submit({"command": ["python3", "train.py"], "gpus": 1})

`import trainq` loads nothing beyond the version: `Client` and the error classes are loaded
on first use, so the command starts fast. The vocabulary shared with trainqd lives in
`trainq.core`; the records the client returns are `trainq.core.wire`'s.
"""

from typing import TYPE_CHECKING, Any

from trainq.core import __version__

if TYPE_CHECKING:
    from trainq.client.library import Client
    from trainq.core.errors import (
        Busy,
        Conflict,
        DaemonUnreachable,
        DiskFull,
        Forbidden,
        InvalidRequest,
        InvalidSpec,
        NotFound,
        TrainqError,
        Unavailable,
    )

_ERRORS = (
    "TrainqError",
    "InvalidRequest",
    "InvalidSpec",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Unavailable",
    "Busy",
    "DaemonUnreachable",
    "DiskFull",
)

__all__ = [
    "Busy",
    "Client",
    "Conflict",
    "DaemonUnreachable",
    "DiskFull",
    "Forbidden",
    "InvalidRequest",
    "InvalidSpec",
    "NotFound",
    "TrainqError",
    "Unavailable",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from trainq.client.library import Client  # noqa: PLC0415 (h11 only when asked for)

        return Client
    if name in _ERRORS:
        from trainq.core import errors  # noqa: PLC0415

        return getattr(errors, name)
    raise AttributeError(f"module 'trainq' has no attribute {name!r}")
