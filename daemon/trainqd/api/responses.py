"""The bytes of the API's responses: status lines, common headers, JSON bodies."""

from __future__ import annotations

import functools
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

import h11
import pydantic_core
from pydantic import BaseModel

from trainq.core import __version__
from trainqd.api.routing import JSON_CONTENT_TYPE, Encoded

_SERVER = f"trainqd/{__version__}".encode()


def json_response(
    status: int,
    body: BaseModel | dict[str, Any] | list[Any] | Encoded | None,
    extra: list[tuple[str, str]],
) -> tuple[h11.Response, bytes]:
    # Built (and so validated) before anything is sent: a handler's bad header or unserializable
    # body becomes a 500 instead of a half-written response.
    if body is None:
        payload = b""
    elif isinstance(body, Encoded):
        payload = body.payload
    elif isinstance(body, BaseModel):
        payload = body.model_dump_json().encode()
    else:
        payload = pydantic_core.to_json(body)
    headers = common_headers()
    if status >= 200 and status not in {204, 304}:
        headers.append((b"content-length", str(len(payload)).encode()))
    if payload:
        media = body.content_type if isinstance(body, Encoded) else JSON_CONTENT_TYPE
        headers.append((b"content-type", media.encode()))
    headers.extend(encoded(extra))
    return h11.Response(status_code=status, headers=headers, reason=reason_phrase(status)), payload


@functools.cache
def reason_phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


_date_cache: tuple[int, bytes] = (0, b"")


def common_headers() -> list[tuple[bytes, bytes]]:
    global _date_cache  # noqa: PLW0603 (the formatted date changes once a second)
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return [(b"server", _SERVER), (b"date", _date_cache[1])]
