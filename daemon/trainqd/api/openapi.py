"""The API described as an OpenAPI 3.1 document, generated from the routes themselves.

Each route contributes its method, path parameters, declared query parameters, request body
and success response; every operation also documents the shared error body for 4xx and 5xx.
All schemas come from the pydantic models in one pass, so a model used by several routes
(or nested in another) appears once under `components/schemas` and everything else refers
to it with `$ref`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaValue

from trainq.core.wire import ErrorBody
from trainqd.api.routing import JSON_CONTENT_TYPE, QueryParam, Route

OPENAPI_VERSION = "3.1.0"
_REF_TEMPLATE = "#/components/schemas/{model}"
_ERROR_RESPONSE = {"$ref": "#/components/responses/Error"}

_Mode = Literal["validation", "serialization"]
_SchemaKey = tuple[str, int]  # ("request" | "response" | "error", route index)


def build_openapi(routes: Sequence[Route], *, version: str) -> dict[str, Any]:
    """The OpenAPI document (a JSON-ready dict) for `routes`."""
    schemas, components = _schemas(routes)
    paths: dict[str, dict[str, Any]] = {}
    for index, route in enumerate(routes):
        operation = _operation(route, index, schemas)
        paths.setdefault(route.pattern, {})[route.method.lower()] = operation
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "trainq",
            "version": version,
            "description": (
                "The trainqd API: HTTP/1.1 with JSON bodies on a unix socket, e.g. "
                "`curl --unix-socket /run/trainq/trainq.sock http://trainq/v1/jobs`. "
                "Callers are identified by the kernel (SO_PEERCRED), not by credentials."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": {
                "Error": {
                    "description": "The request failed; `error.message` says why in one line.",
                    "content": {JSON_CONTENT_TYPE: {"schema": schemas[("error", 0)]}},
                }
            },
        },
    }


def _schemas(
    routes: Sequence[Route],
) -> tuple[dict[_SchemaKey, JsonSchemaValue], dict[str, JsonSchemaValue]]:
    """Every route's request and response schema from one generator run, so shared models
    land once in the definitions (pydantic names them apart only if their schemas differ)."""
    inputs: list[tuple[_SchemaKey, _Mode, TypeAdapter[Any]]] = [
        (("error", 0), "serialization", TypeAdapter(ErrorBody))
    ]
    for index, route in enumerate(routes):
        if route.request_model is not None:
            inputs.append((("request", index), "validation", TypeAdapter(route.request_model)))
        if route.response_model is not None:
            inputs.append((("response", index), "serialization", TypeAdapter(route.response_model)))
    by_key, definitions = TypeAdapter.json_schemas(inputs, ref_template=_REF_TEMPLATE)
    schemas = {key: schema for (key, _mode), schema in by_key.items()}
    return schemas, dict(definitions.get("$defs", {}))


def _operation(
    route: Route, index: int, schemas: dict[_SchemaKey, JsonSchemaValue]
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": _operation_id(route),
        "summary": route.summary,
    }
    parameters = [_path_parameter(name) for name in route.param_names]
    parameters += [_query_parameter(param) for param in route.query]
    parameters += [
        {"name": name, "in": "header", "schema": {"type": "string"}, "description": about}
        for name, about in route.headers
    ]
    if parameters:
        operation["parameters"] = parameters
    if route.request_model is not None:
        operation["requestBody"] = {
            "required": not route.body_optional,
            "content": {JSON_CONTENT_TYPE: {"schema": schemas[("request", index)]}},
        }
    operation["responses"] = {
        str(route.status): _success(route, schemas.get(("response", index))),
        "4XX": _ERROR_RESPONSE,
        "5XX": _ERROR_RESPONSE,
    }
    return operation


def _success(route: Route, schema: JsonSchemaValue | None) -> dict[str, Any]:
    if route.streaming_content_type is not None:
        media: dict[str, Any] = {"schema": schema or {"type": "string"}}
        described = "each line one document of this schema" if schema else "raw bytes"
        return {
            "description": f"A stream, sent as it is produced ({described}).",
            "content": {route.streaming_content_type: media},
        }
    if schema is None:
        return {"description": route.summary}
    return {"description": route.summary, "content": {JSON_CONTENT_TYPE: {"schema": schema}}}


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query_parameter(param: QueryParam) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": param.type}
    if param.default is not None:
        schema["default"] = param.default
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.maximum is not None:
        schema["maximum"] = param.maximum
    described: dict[str, Any] = {"name": param.name, "in": "query", "schema": schema}
    if param.required:
        described["required"] = True
    if param.description:
        described["description"] = param.description
    return described


def _operation_id(route: Route) -> str:
    """`get_v1_jobs_id_logs`: unique per method and pattern, which the router enforces (a
    trailing slash is a word too: `/ui/` is `get_ui_slash`, `/ui` is `get_ui`)."""
    words = [route.method.lower()]
    words += [segment.strip("{}") or "slash" for segment in route.pattern.split("/")[1:]]
    return "_".join(word.replace("-", "_").replace(".", "_") for word in words)
