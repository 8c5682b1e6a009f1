"""The OpenAPI document generated from a route table shaped like trainqd's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from trainq.core.spec import JobSpec
from trainq.core.wire import EventRecord, GpuList, HealthRecord, JobList, JobRecord, StopRequest
from trainqd.api.openapi import build_openapi
from trainqd.api.routing import QueryParam, Request, Response, Route


async def handler(request: Request) -> Response:
    return Response()


ROUTES = [
    Route("POST", "/v1/jobs", handler, "Submit a job", JobSpec, JobRecord, status=201),
    Route(
        "GET",
        "/v1/jobs",
        handler,
        "List jobs",
        response_model=JobList,
        query=[QueryParam("all", "boolean", "finished jobs too", default=False)],
    ),
    Route("GET", "/v1/jobs/{id}", handler, "Show a job", response_model=JobRecord),
    Route("POST", "/v1/jobs/{id}/stop", handler, "Stop a job", StopRequest, JobRecord),
    Route(
        "GET",
        "/v1/jobs/{id}/logs",
        handler,
        "A job's output",
        query=[QueryParam("follow", "boolean"), QueryParam("tail", "integer", minimum=0)],
        streaming_content_type="text/plain",
    ),
    Route("GET", "/v1/gpus", handler, "GPUs", response_model=GpuList),
    Route(
        "GET",
        "/v1/events",
        handler,
        "Job events as they happen",
        response_model=EventRecord,
        streaming_content_type="application/x-ndjson",
    ),
    Route("GET", "/v1/health", handler, "Health", response_model=HealthRecord),
    Route("GET", "/v1/openapi.json", handler, "This document"),
]


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    built = build_openapi(ROUTES, version="0.1.0")
    ready: dict[str, Any] = json.loads(json.dumps(built))  # as a client reads it
    return ready


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_header(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "trainq"
    assert document["info"]["version"] == "0.1.0"


def test_every_ref_resolves_and_points_into_components(document: dict[str, Any]) -> None:
    found = set(refs(document))
    assert "#/components/schemas/JobRecord" in found
    for ref in found:
        assert ref.startswith("#/components/"), ref
        assert isinstance(resolve(document, ref), dict)
    assert "$defs" not in json.dumps(document)  # nothing left in pydantic's local form


def test_every_route_is_an_operation(document: dict[str, Any]) -> None:
    for route in ROUTES:
        operation = document["paths"][route.pattern][route.method.lower()]
        assert operation["summary"] == route.summary
        assert "4XX" in operation["responses"]
        assert "5XX" in operation["responses"]
    ids = [op["operationId"] for path in document["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)) == len(ROUTES)


def test_wire_model_schemas_are_present_once(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for name in (
        "JobSpec",
        "ChannelSpec",
        "JobRecord",
        "AttemptRecord",
        "Owner",
        "JobList",
        "GpuList",
        "GpuRecord",
        "EventRecord",
        "HealthRecord",
        "StopRequest",
        "ErrorBody",
        "ErrorDetail",
    ):
        assert name in schemas, name
    assert schemas["JobRecord"]["properties"]["attempts"]["items"] == {
        "$ref": "#/components/schemas/AttemptRecord"
    }
    error = document["components"]["responses"]["Error"]["content"]["application/json"]
    assert error["schema"] == {"$ref": "#/components/schemas/ErrorBody"}


def test_request_bodies_parameters_and_success_responses(document: dict[str, Any]) -> None:
    submit = document["paths"]["/v1/jobs"]["post"]
    body = submit["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/JobSpec"}
    created = submit["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"$ref": "#/components/schemas/JobRecord"}

    listing = document["paths"]["/v1/jobs"]["get"]
    assert listing["parameters"] == [
        {
            "name": "all",
            "in": "query",
            "schema": {"type": "boolean", "default": False},
            "description": "finished jobs too",
        }
    ]
    logs = document["paths"]["/v1/jobs/{id}/logs"]["get"]
    assert logs["parameters"][0] == {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    assert logs["parameters"][2]["schema"] == {"type": "integer", "minimum": 0}
    assert logs["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    events = document["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    assert events == {
        "application/x-ndjson": {"schema": {"$ref": "#/components/schemas/EventRecord"}}
    }
    assert "content" not in document["paths"]["/v1/openapi.json"]["get"]["responses"]["200"]
