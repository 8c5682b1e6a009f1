"""The OpenAPI document generated from trainqd's own route table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.inprocess import trainqd_api
from trainqd.api.openapi import build_openapi
from trainqd.api.routing import Route


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> list[Route]:
    """trainqd's route table, as the daemon builds it."""
    return trainqd_api(tmp_path_factory.mktemp("api")).routes()


@pytest.fixture(scope="module")
def document(table: list[Route]) -> dict[str, Any]:
    built = build_openapi(table, version="0.1.0")
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


def test_every_route_is_an_operation(table: list[Route], document: dict[str, Any]) -> None:
    for route in table:
        operation = document["paths"][route.pattern][route.method.lower()]
        assert operation["summary"] == route.summary
        assert "4XX" in operation["responses"]
        assert "5XX" in operation["responses"]
    ids = [op["operationId"] for path in document["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids)) == len(table)


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
    spec = {"$ref": "#/components/schemas/JobSpec"}
    assert body == {"anyOf": [spec, {"type": "array", "items": spec}]}  # a job or a sweep
    created = submit["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {
        "anyOf": [
            {"$ref": "#/components/schemas/JobRecord"},
            {"$ref": "#/components/schemas/SubmittedGroup"},
        ]
    }

    listing = {p["name"]: p for p in document["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert listing["all"] == {
        "name": "all",
        "in": "query",
        "schema": {"type": "boolean", "default": False},
        "description": "include ended jobs",
    }
    assert listing["group"]["schema"] == {"type": "integer", "minimum": 1}
    logs = document["paths"]["/v1/jobs/{id}/logs"]["get"]
    assert logs["parameters"][0] == {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    text = {"text/plain; charset=utf-8": {"schema": {"type": "string"}}}
    assert logs["responses"]["200"]["content"] == text
    events = document["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    assert events == {
        "application/x-ndjson": {"schema": {"$ref": "#/components/schemas/EventRecord"}}
    }
    assert "content" not in document["paths"]["/v1/openapi.json"]["get"]["responses"]["200"]
