"""The client layer: everything that speaks to trainqd, and nothing of the `trainq` commands.

    transport   HTTP/1.1 on the unix socket (h11), busy retries, errors as trainq's own
    api         one method per endpoint, the daemon's JSON as it came (what the CLI calls)
    following   following a job or a group to its end on the events stream
    specs       what the client adds to a spec (paths, working directory, PATH), a job's spec
    library     `Client`: the typed calls of the Python library (`from trainq import Client`)

Names are loaded on first use, so importing one module of the layer (the CLI imports
`specs` to build a submission) loads neither h11 nor the others.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainq.client.api import Api
    from trainq.client.library import Client, LogLine
    from trainq.client.transport import (
        QueryValue,
        ResponseStream,
        Transport,
        build_target,
        connect_error,
        iter_lines,
    )

_HOMES = {
    "Api": "api",
    "Client": "library",
    "LogLine": "library",
    "QueryValue": "transport",
    "ResponseStream": "transport",
    "Transport": "transport",
    "build_target": "transport",
    "connect_error": "transport",
    "iter_lines": "transport",
}

__all__ = [
    "Api",
    "Client",
    "LogLine",
    "QueryValue",
    "ResponseStream",
    "Transport",
    "build_target",
    "connect_error",
    "iter_lines",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'trainq.client' has no attribute {name!r}")
    from importlib import import_module  # noqa: PLC0415

    return getattr(import_module(f"trainq.client.{_HOMES[name]}"), name)
