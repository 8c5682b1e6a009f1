"""The API's request, response and route types, and the router; no I/O happens here.

A handler takes a `Request` (with the caller's identity from SO_PEERCRED already filled in)
and returns a `Response` (a JSON body) or a `StreamResponse` (chunks sent as they come).
Every caller mistake a handler finds is a `TrainqError` raised with one line a person can act
on; the server turns it into its status and `{"error": {...}}` body. `Router` maps
`(method, path)` to a `Route` and its path parameters, with literal segments winning over
`{param}` segments; a HEAD is answered by the GET route (the server leaves out the body).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import pydantic_core
from pydantic import BaseModel, ValidationError

from trainq.core.errors import InvalidRequest, InvalidSpec, MethodNotAllowed, NotFound
from trainq.core.spec import JobSpec, describe_validation_error

M = TypeVar("M", bound=BaseModel)

JSON_CONTENT_TYPE = "application/json"

# SQLite's integers are signed 64-bit: a number beyond them names nothing stored, and handing
# one to the database would be an OverflowError rather than an answer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# ASCII digits only: int() would also take " 12", "1_2" or "١٢".
_DECIMAL = re.compile(r"-?[0-9]+")

_TRUE = frozenset({"", "1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is on the other end of the connection, as the kernel saw it at connect()."""

    uid: int
    gid: int
    pid: int


@dataclass(frozen=True, slots=True)
class QueryParam:
    """A query parameter a route accepts; the server refuses any it does not declare."""

    name: str
    type: Literal["string", "integer", "boolean"] = "string"
    description: str = ""
    default: str | int | bool | None = None
    minimum: int | None = None
    maximum: int | None = None
    required: bool = False


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: list[tuple[str, str]]  # names in lower case, in the order they came
    body: bytes
    caller: Caller
    params: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        """The last value of header `name` (lower case), or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    def _check_content_type(self) -> None:
        given = self.header("content-type")
        if given is None:
            return
        media = given.split(";", 1)[0].strip().lower()
        if media != JSON_CONTENT_TYPE and not (
            media.startswith("application/") and media.endswith("+json")
        ):
            raise InvalidRequest(
                f"request body must be sent as Content-Type: {JSON_CONTENT_TYPE}, not {media!r}"
            )

    def json(self) -> Any:
        """The body parsed as JSON."""
        self._check_content_type()
        if not self.body.strip():
            raise InvalidRequest("request body is empty; expected JSON")
        try:
            # pydantic's parser rather than the json module: the same messages as `model()`,
            # and a depth limit where the json module would hit Python's recursion limit.
            return pydantic_core.from_json(self.body, allow_inf_nan=False)
        except ValueError as exc:
            raise InvalidRequest(f"request body is not valid JSON: {exc}") from None

    def model(self, cls: type[M], *, allow_empty: bool = False) -> M:
        """The body validated as `cls`. A job spec's problems are InvalidSpec, anything else's
        InvalidRequest; either way one line. With `allow_empty`, no body means `{}`."""
        self._check_content_type()
        body = self.body
        if not body.strip():
            if not allow_empty:
                raise InvalidRequest("request body is empty; expected a JSON object")
            body = b"{}"
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0] if exc.error_count() else None
            if first is not None and first["type"] == "json_invalid":
                detail = str(first.get("ctx", {}).get("error", first["msg"]))
                raise InvalidRequest(f"request body is not valid JSON: {detail}") from None
            if issubclass(cls, JobSpec):
                raise InvalidSpec(describe_validation_error(exc, "spec")) from None
            raise InvalidRequest(describe_validation_error(exc, "request body")) from None

    def _query_value(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def query_str(self, name: str, default: str | None = None) -> str | None:
        value = self._query_value(name)
        return default if value is None else value

    def query_int(
        self,
        name: str,
        default: int | None = None,
        min: int | None = None,
        max: int | None = None,
    ) -> int | None:
        text = self._query_value(name)
        if text is None:
            return default
        value = decimal(text)
        if value is None:
            raise InvalidRequest(f"query parameter {name!r} must be an integer")
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidRequest(f"query parameter {name!r} is out of range")
        if (min is not None and value < min) or (max is not None and value > max):
            if max is None:
                bounds = f"at least {min}"
            elif min is None:
                bounds = f"at most {max}"
            else:
                bounds = f"between {min} and {max}"
            raise InvalidRequest(f"query parameter {name!r} must be {bounds}")
        return value

    def query_bool(self, name: str, default: bool = False) -> bool:
        text = self._query_value(name)
        if text is None:
            return default
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise InvalidRequest(f"query parameter {name!r} must be true or false")


def decimal(text: str) -> int | None:
    """`text` as a base-10 integer written in ASCII digits (a leading '-' allowed), or None."""
    if not _DECIMAL.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:  # thousands of digits: past Python's limit on conversions
        return None


@dataclass(slots=True)
class Encoded:
    """A body already encoded: JSON a handler built off the event loop, or a file of the
    web pages (`content_type` then says what it is)."""

    payload: bytes
    content_type: str = JSON_CONTENT_TYPE


@dataclass(slots=True)
class Response:
    """A JSON response: a pydantic model, a dict or a list; None sends no body."""

    status: int = 200
    body: BaseModel | dict[str, Any] | list[Any] | Encoded | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class StreamResponse:
    """A response whose body is sent chunk by chunk as `chunks` yields them.

    Headers go out at once, so anything that could fail the request (unknown job, no
    permission) must be checked before this is returned; afterwards an error can only cut the
    stream short. When the client goes away, `chunks` is cancelled and closed."""

    content_type: str
    chunks: AsyncIterator[bytes]
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str  # "/v1/jobs/{id}": a {name} segment matches one non-empty path segment
    handler: Handler
    summary: str
    request_model: Any = None  # a model class or a type such as JobSpec | list[JobSpec]
    response_model: Any = None  # a model class or a type such as list[GpuRecord]
    query: Sequence[QueryParam] = ()
    streaming_content_type: str | None = None
    status: int = 200  # the success status, for the OpenAPI document
    body_optional: bool = False  # the request body may be left out (an empty body is {})
    max_body: int | None = None  # a larger body than the server's limit (bytes), or None
    # Request headers it reads, for the OpenAPI document: (name, description).
    headers: Sequence[tuple[str, str]] = ()

    @property
    def param_names(self) -> list[str]:
        return [s[1:-1] for s in self.pattern.split("/") if _is_param(s)]

    def check_query(self, query: dict[str, list[str]]) -> None:
        """Refuse query parameters the route does not declare: a typo ('?folow=1') gets a
        400 that names it instead of being silently ignored."""
        names = [param.name for param in self.query]
        for name in query:
            if name not in names:
                takes = f"it takes {', '.join(names)}" if names else "it takes none"
                raise InvalidRequest(
                    f"unknown query parameter {name!r} for {self.method} {self.pattern}; {takes}"
                )


class WrongMethod(MethodNotAllowed):
    """405 that knows which methods the path does take (for the Allow header)."""

    def __init__(self, message: str, allowed: Sequence[str]) -> None:
        super().__init__(message)
        self.allowed = tuple(allowed)


def _is_param(segment: str) -> bool:
    return len(segment) > 2 and segment[0] == "{" and segment[-1] == "}"


@dataclass
class _Node:
    literal: dict[str, _Node] = field(default_factory=dict)
    param: tuple[str, _Node] | None = None
    routes: dict[str, Route] = field(default_factory=dict)


class Router:
    """Finds the route for a method and a (percent-decoded, query-less) path."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes: tuple[Route, ...] = tuple(routes)
        self._root = _Node()
        for route in self.routes:
            self._add(route)

    def _add(self, route: Route) -> None:
        if not route.pattern.startswith("/"):
            raise ValueError(f"route pattern {route.pattern!r} must start with '/'")
        if route.method != route.method.upper() or not route.method.isalpha():
            raise ValueError(f"route method {route.method!r} must be an upper-case HTTP method")
        names = route.param_names
        if len(set(names)) != len(names):
            raise ValueError(f"route pattern {route.pattern!r} repeats a parameter name")
        node = self._root
        for segment in route.pattern.split("/")[1:]:
            if _is_param(segment):
                name = segment[1:-1]
                if not name.isidentifier():
                    raise ValueError(f"route pattern {route.pattern!r}: bad parameter {name!r}")
                if node.param is None:
                    node.param = (name, _Node())
                elif node.param[0] != name:
                    raise ValueError(
                        f"route pattern {route.pattern!r} names parameter {name!r} where "
                        f"another route names it {node.param[0]!r}"
                    )
                node = node.param[1]
            else:
                if "{" in segment or "}" in segment:
                    raise ValueError(f"route pattern {route.pattern!r}: bad segment {segment!r}")
                node = node.literal.setdefault(segment, _Node())
        if route.method in node.routes:
            raise ValueError(f"two routes for {route.method} {route.pattern}")
        node.routes[route.method] = route

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route and its path parameters; NotFound or WrongMethod otherwise."""
        segments = path.split("/")
        if segments[0] != "":
            raise NotFound(f"no such path: {path}")
        params: dict[str, str] = {}
        node = _walk(self._root, segments, 1, params)
        if node is None:
            raise NotFound(f"no such path: {path}")
        route = node.routes.get(method)
        if route is None and method == "HEAD":
            route = node.routes.get("GET")  # the GET's answer without its body
        if route is None:
            allowed = sorted({*node.routes, *(["HEAD"] if "GET" in node.routes else [])})
            choices = " or ".join(
                [", ".join(allowed[:-1]), allowed[-1]] if allowed[1:] else allowed
            )
            raise WrongMethod(f"{method} {path}: use {choices}", allowed)
        return route, params


def _walk(node: _Node, segments: list[str], at: int, params: dict[str, str]) -> _Node | None:
    if at == len(segments):
        return node if node.routes else None
    segment = segments[at]
    child = node.literal.get(segment)
    if child is not None:
        found = _walk(child, segments, at + 1, params)
        if found is not None:
            return found
    if node.param is not None and segment:
        name, child = node.param
        found = _walk(child, segments, at + 1, params)
        if found is not None:
            params[name] = segment
            return found
    return None


def split_target(target: str) -> tuple[str, dict[str, list[str]]]:
    """A request-target's percent-decoded path and its query. An encoded '/' decodes like
    any other character: no job name or id may contain one, so no route could want it."""
    if target.startswith(("http://", "https://")):  # absolute form, as sent through a proxy
        parts = urlsplit(target)
        raw_path, raw_query = parts.path or "/", parts.query
    else:
        raw_path, _, raw_query = target.partition("?")
    path = unquote(raw_path) if "%" in raw_path else raw_path
    query = parse_qs(raw_query, keep_blank_values=True) if raw_query else {}
    return path, query
