"""The pieces the OpenAPI schema is built from: references, JSON bodies and answers, operations
(each with the answers every route may give: no token, the guard's refusals) and objects.
Shared by :mod:`.openapi` (drover's own routes) and :mod:`.openapi_doors` (the other
protocols' front doors)."""

from __future__ import annotations

from typing import Any

# The schemas' pattern of a text that is not blank: the library refuses such a prompt alike.
from drover.core.messages import NOT_BLANK as NOT_BLANK

ID_PATTERN = "^[A-Za-z0-9_-]{1,128}$"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_response(description: str) -> dict[str, Any]:
    return json_content(ref("Error"), description)


_UNAUTHORIZED = error_response("missing or unknown bearer token (only when the server has tokens)")
#: What the guard answers on every route (drover.server.guard).
_GUARDED = {
    "403": error_response(
        "sent from a web page of another origin (not the server's own, not a --cors-origin)"
    ),
    "421": error_response(
        "the Host header names neither loopback, the bound address nor --allowed-host"
    ),
}
BAD_BODY = {
    "400": error_response("the body is not JSON"),
    "413": error_response("the body is too large"),
    "415": error_response("no Content-Type: application/json (required even for an empty body)"),
    "422": error_response("the body does not match the schema"),
}
#: What a route that takes no body answers to one (no body at all is taken, as ``{}`` is).
NO_BODY = {
    **BAD_BODY,
    "415": error_response("a body without Content-Type: application/json"),
}


def operation(
    summary: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    empty: bool = False,
) -> dict[str, Any]:
    """An operation; ``empty``: its ``body`` may also be left out (a route that takes none)."""
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {**responses, "401": _UNAUTHORIZED, **_GUARDED},
    }
    if params:
        op["parameters"] = params
    if body is not None:
        # Required: the Content-Type is, even when the JSON object is empty.
        content = {"application/json": {"schema": body}}
        op["requestBody"] = {"required": not empty, "content": content}
    return op


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
