"""The API's routing and request parsing, without sockets: trainqd's own route table in its
router, and the matcher's corners on a table made up for them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.support.inprocess import trainqd_api
from trainq.core.errors import InvalidRequest, InvalidSpec, NotFound
from trainq.core.spec import JobSpec
from trainq.core.wire import StopRequest
from trainqd.api.routing import (
    Caller,
    QueryParam,
    Request,
    Response,
    Route,
    Router,
    WrongMethod,
    split_target,
)


async def handler(request: Request) -> Response:
    return Response()


def route(method: str, pattern: str, query: Sequence[QueryParam] = ()) -> Route:
    return Route(method, pattern, handler, f"{method} {pattern}", query=query)


def request(body: bytes = b"", query: str = "", content_type: str | None = None) -> Request:
    headers = [("content-type", content_type)] if content_type else []
    _, parsed = split_target(f"/x?{query}")
    return Request("POST", "/x", parsed, headers, body, Caller(uid=1000, gid=1000, pid=42))


# A table made up to reach the matcher's corners (a literal segment beside a parameter, a
# literal dead end to back out of); trainqd's own table is `trainqd_table` below.
CORNERS = Router(
    [
        route("GET", "/v1/jobs/{id}"),
        route("GET", "/v1/jobs/active"),
        route("GET", "/v1/files/{id}/raw"),
        route("GET", "/v1/files/latest/meta"),
    ]
)


@pytest.fixture(scope="module")
def trainqd_table(tmp_path_factory: pytest.TempPathFactory) -> list[Route]:
    """The routes of trainqd's API, as the daemon builds them."""
    return trainqd_api(tmp_path_factory.mktemp("api")).routes()


@pytest.fixture(scope="module")
def router(trainqd_table: list[Route]) -> Router:
    """trainqd's router on its own table (the daemon makes no other)."""
    return Router(trainqd_table)


def sample_path(route: Route) -> tuple[str, dict[str, str]]:
    """A path that `route` names, each parameter given a value of its own."""
    params = {name: f"{name}-{n + 7}" for n, name in enumerate(route.param_names)}
    return route.pattern.format(**params), params


def test_every_route_of_trainqd_is_reached_by_its_own_paths(
    trainqd_table: list[Route], router: Router
) -> None:
    assert len(trainqd_table) > 20  # the whole table: jobs, sharing, again, tunes, pages
    for route in trainqd_table:
        path, params = sample_path(route)
        found, found_params = router.match(route.method, path)
        assert found is route, f"{route.method} {path} reaches {found.method} {found.pattern}"
        assert found_params == params


def test_routes_and_path_parameters(router: Router) -> None:
    found, params = router.match("GET", "/v1/jobs/17")
    assert (found.pattern, params) == ("/v1/jobs/{id}", {"id": "17"})
    found, params = router.match("POST", "/v1/jobs/17/stop")
    assert (found.pattern, params) == ("/v1/jobs/{id}/stop", {"id": "17"})
    assert router.match("GET", "/v1/jobs")[0].method == "GET"
    assert router.match("POST", "/v1/jobs")[0].method == "POST"


def test_a_literal_segment_wins_over_a_parameter() -> None:
    assert CORNERS.match("GET", "/v1/jobs/active") == (CORNERS.routes[1], {})
    assert CORNERS.match("GET", "/v1/jobs/activ") == (CORNERS.routes[0], {"id": "activ"})


def test_matching_backtracks_from_a_literal_dead_end() -> None:
    found, params = CORNERS.match("GET", "/v1/files/latest/raw")
    assert (found.pattern, params) == ("/v1/files/{id}/raw", {"id": "latest"})


@pytest.mark.parametrize("path", ["/v1/jobz", "/v1/jobs/", "/v1/jobs/1/2", "/", "v1/jobs", ""])
def test_unknown_paths(router: Router, path: str) -> None:
    with pytest.raises(NotFound, match="no such path"):
        router.match("GET", path)


def test_wrong_method_names_the_right_ones(router: Router) -> None:
    with pytest.raises(WrongMethod) as wrong:
        router.match("GET", "/v1/jobs/3/stop")
    assert str(wrong.value) == "GET /v1/jobs/3/stop: use POST"
    assert wrong.value.allowed == ("POST",)
    with pytest.raises(WrongMethod, match=r"PUT /v1/jobs: use GET, HEAD or POST"):
        router.match("PUT", "/v1/jobs")


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ([route("GET", "/a"), route("GET", "/a")], "two routes for GET /a"),
        ([route("GET", "/a/{x}"), route("POST", "/a/{y}")], "another route names it 'x'"),
        ([route("GET", "a")], "must start with '/'"),
        ([route("get", "/a")], "upper-case"),
        ([route("GET", "/a/{x}/{x}")], "repeats a parameter"),
        ([route("GET", "/a/{1x}")], "bad parameter"),
        ([route("GET", "/a/b{x}")], "bad segment"),
    ],
)
def test_bad_route_tables_are_refused(routes: list[Route], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Router(routes)


@given(
    st.text(alphabet="/abcdefijlnoprstuv1{}%-_. ", max_size=40),
    st.sampled_from(["GET", "POST", "PATCH", "DELETE"]),
)
def test_any_path_matches_or_is_a_clean_404_or_405(router: Router, path: str, method: str) -> None:
    try:
        found, params = router.match(method, path)
    except (NotFound, WrongMethod):
        return
    assert found.method == method
    assert set(params) == set(found.param_names)
    assert all(params.values())


def test_split_target() -> None:
    assert split_target("/v1/jobs?all=1&all=&x=a%20b") == (
        "/v1/jobs",
        {"all": ["1", ""], "x": ["a b"]},
    )
    assert split_target("/v1/jobs/a%20b") == ("/v1/jobs/a b", {})
    assert split_target("http://trainq/v1/gpus?json") == ("/v1/gpus", {"json": [""]})


def test_query_values() -> None:
    r = request(query="n=5&follow&quiet=no&name=a&name=b&neg=-3")
    assert r.query_int("n") == 5
    assert r.query_int("missing", 7) == 7
    assert r.query_int("neg") == -3
    assert r.query_bool("follow") is True  # present without a value
    assert r.query_bool("quiet", default=True) is False
    assert r.query_bool("missing") is False
    assert r.query_str("name") == "b"  # the last one counts
    assert r.query_str("missing", "x") == "x"


@pytest.mark.parametrize(
    ("query", "call", "message"),
    [
        ("n=five", lambda r: r.query_int("n"), "query parameter 'n' must be an integer"),
        ("n=1.5", lambda r: r.query_int("n"), "must be an integer"),
        ("n=0", lambda r: r.query_int("n", 1, 1), "query parameter 'n' must be at least 1"),
        ("n=9", lambda r: r.query_int("n", 1, None, 5), "must be at most 5"),
        ("n=9", lambda r: r.query_int("n", 1, 1, 5), "must be between 1 and 5"),
        ("f=perhaps", lambda r: r.query_bool("f"), "query parameter 'f' must be true or false"),
    ],
)
def test_bad_query_values(query: str, call: Callable[[Request], object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        call(request(query=query))


def test_undeclared_query_parameters_are_refused() -> None:
    declared = route("GET", "/v1/jobs/{id}/logs", query=[QueryParam("follow", "boolean")])
    declared.check_query({"follow": ["1"]})
    with pytest.raises(InvalidRequest) as refused:
        declared.check_query({"folow": ["1"]})
    assert str(refused.value) == (
        "unknown query parameter 'folow' for GET /v1/jobs/{id}/logs; it takes follow"
    )
    with pytest.raises(InvalidRequest, match="it takes none"):
        route("GET", "/v1/gpus").check_query({"all": [""]})


def test_json_bodies() -> None:
    assert request(b'{"a": [1, 2]}').json() == {"a": [1, 2]}
    assert request(b"[]", content_type="application/json; charset=utf-8").json() == []
    assert request(b"1", content_type="application/problem+json").json() == 1
    with pytest.raises(InvalidRequest) as bad:
        request(b'{"a": }').json()
    assert str(bad.value) == "request body is not valid JSON: expected value at line 1 column 7"
    with pytest.raises(InvalidRequest, match="not valid JSON: invalid unicode"):
        request(b'"\xff\xfe\xfa"').json()
    with pytest.raises(InvalidRequest, match="not valid JSON: recursion limit exceeded"):
        request(b"[" * 100_000 + b"]" * 100_000).json()
    with pytest.raises(InvalidRequest, match="not valid JSON: expected value"):
        request(b"NaN").json()
    with pytest.raises(InvalidRequest, match="request body is empty"):
        request(b"  ").json()
    with pytest.raises(InvalidRequest, match="not 'application/x-www-form-urlencoded'"):
        request(b"{}", content_type="application/x-www-form-urlencoded").json()


def test_models_from_bodies() -> None:
    spec = request(b'{"command": ["true"], "gpus": 1}').model(JobSpec)
    assert (spec.command, spec.gpus) == (["true"], 1)
    assert request(b"").model(StopRequest, allow_empty=True) == StopRequest()
    assert request(b'{"grace_seconds": 5}').model(StopRequest).grace_seconds == 5


@pytest.mark.parametrize(
    ("body", "model", "error", "message"),
    [
        (b'{"gpus": 1}', JobSpec, InvalidSpec, "spec: give exactly one of 'command'"),
        (b'{"command": ["x"], "gpu": 1}', JobSpec, InvalidSpec, "spec: gpu: unknown key"),
        (b'{"command": "x"}', JobSpec, InvalidSpec, "spec: command: Input should be"),
        (b'{"grace_seconds": -1}', StopRequest, InvalidRequest, "request body: grace_seconds:"),
        (b'{"grace_seconds": 1', StopRequest, InvalidRequest, "request body is not valid JSON"),
        (b"", StopRequest, InvalidRequest, "request body is empty"),
    ],
)
def test_model_errors_are_one_line(
    body: bytes, model: type[BaseModel], error: type[InvalidRequest], message: str
) -> None:
    with pytest.raises(error) as raised:
        request(body).model(model)
    assert type(raised.value) is error
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_headers_are_looked_up_by_lower_case_name() -> None:
    r = Request("GET", "/", {}, [("x-a", "1"), ("x-a", "2")], b"", Caller(0, 0, 1))
    assert r.header("x-a") == "2"
    assert r.header("x-b") is None
