"""The OpenAPI 3.1 schema of the HTTP API, served at ``/openapi.json``.

Written by hand next to the handlers (it is short, and every answer the handlers give is listed
here); the test suite fuzzes the API from this schema with schemathesis and checks every
response against it.
"""

from __future__ import annotations

from typing import Any

from drover import __name__ as _package
from drover.journal.rules import MAX_TITLE_CHARS

_ID_PATTERN = "^[A-Za-z0-9_-]{1,128}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_UNAUTHORIZED = _error("missing or unknown bearer token (only when the server has tokens)")
#: What the guard answers on every route (drover.server.guard).
_GUARDED = {
    "403": _error(
        "sent from a web page of another origin (not the server's own, not a --cors-origin)"
    ),
    "421": _error("the Host header names neither loopback, the bound address nor --allowed-host"),
}
_NOT_FOUND = _error("no such session, or not this token's")
_BAD_BODY = {
    "400": _error("the body is not JSON"),
    "413": _error("the body is too large"),
    "415": _error("no Content-Type: application/json (required even for an empty body)"),
    "422": _error("the body does not match the schema"),
}
_SESSION_ID: dict[str, Any] = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}
_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_NUMBER = {"type": ["number", "null"]}
_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {"type": "array", "items": {"type": "object"}},
        "meta": {"type": "object"},
    },
}
_SUMMARY_FIELDS: dict[str, Any] = {
    "id": {"type": "string"},
    "title": _NULLABLE_STRING,
    "model": {"type": "string"},
    "created_at": {"type": "number"},
    "updated_at": {"type": "number"},
    "running_turn_id": _NULLABLE_STRING,
}
_TOOL_CALL = {
    "type": "object",
    "required": ["call_id", "name", "state"],
    "properties": {
        "call_id": {"type": "string"},
        "step": {"type": "integer"},
        "call_index": {"type": "integer"},
        "name": {"type": "string"},
        "state": {
            "enum": [
                "input-streaming",
                "input-available",
                "awaiting-permission",
                "running",
                "output-available",
                "output-error",
                "denied",
                "interrupted",
            ]
        },
        "input": {"type": ["object", "null"]},
        "output": _NULLABLE_STRING,
        "is_error": {"type": "boolean"},
        "outcome_unknown": {"type": "boolean"},
    },
}
_TURN = {
    "type": "object",
    "required": ["id", "seq", "status", "messages", "tool_calls"],
    "properties": {
        "id": {"type": "string"},
        "seq": {"type": "integer"},
        "status": {"enum": ["running", "completed", "incomplete", "failed", "interrupted"]},
        "reason": _NULLABLE_STRING,
        "error": _NULLABLE_STRING,
        "discarded": {"type": "boolean"},
        "created_at": {"type": "number"},
        "ended_at": _NULLABLE_NUMBER,
        "usage": {"type": ["object", "null"]},
        "user_message": {"oneOf": [_MESSAGE, {"type": "null"}]},
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["seq", "partial", "message"],
                "properties": {
                    "seq": {"type": "integer"},
                    "partial": {"type": "boolean"},
                    "message": _MESSAGE,
                },
            },
        },
        "tool_calls": {"type": "array", "items": _TOOL_CALL},
    },
}
_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            },
            "turn_id": {"type": "string"},
        },
    },
    "Permissions": {
        "type": "object",
        "required": ["mode", "grants"],
        "properties": {
            "mode": {"enum": ["ask", "allow", "deny", "sandboxed"]},
            "grants": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["rule", "created_at"],
                    "properties": {"rule": {"type": "string"}, "created_at": {"type": "number"}},
                },
            },
        },
    },
    "SessionSummary": {
        "type": "object",
        "required": list(_SUMMARY_FIELDS),
        "properties": _SUMMARY_FIELDS,
    },
    "StreamEvent": {
        "description": (
            "The data of a numbered event of the stream (id: SEQ, event: TYPE): the event's "
            "fields, then seq, prev and turn_id. prev is the number of the event before it in "
            "the session's log: an event whose prev is not the id last received means events "
            "were missed (reconnect with Last-Event-ID: the server serves them or a reset)."
        ),
        "type": "object",
        "required": ["type", "seq", "prev", "turn_id"],
        "properties": {
            "type": {"type": "string"},
            "seq": {"type": "integer", "minimum": 1},
            "prev": {"type": "integer", "minimum": 0},
            "turn_id": _NULLABLE_STRING,
        },
    },
    "Snapshot": {
        "type": "object",
        "required": [
            *_SUMMARY_FIELDS,
            "last_event_id",
            "turns",
            "pending_permissions",
            "queued",
        ],
        "properties": {
            **_SUMMARY_FIELDS,
            "last_event_id": {"type": "integer", "minimum": 0},
            "turns": {"type": "array", "items": _TURN},
            "queued": {
                "description": "messages waiting for the running turn to end, in run order",
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["message_id", "content", "created_at"],
                    "properties": {
                        "message_id": {"type": "string"},
                        "content": {"type": "string"},
                        "created_at": {"type": "number"},
                    },
                },
            },
            "pending_permissions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["request_id", "call_id", "tool_name", "input", "summary"],
                },
            },
        },
    },
}


def _op(
    summary: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {**responses, "401": _UNAUTHORIZED, **_GUARDED},
    }
    if params:
        op["parameters"] = params
    if body is not None:
        # Required: the Content-Type is, even when the JSON object is empty.
        content = {"application/json": {"schema": body}}
        op["requestBody"] = {"required": True, "content": content}
    return op


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def schema() -> dict[str, Any]:
    sid = "/v1/sessions/{session_id}"
    turn = _json(_object({"turn_id": {"type": "string"}}, ["turn_id"]), "the turn")
    events_params: list[dict[str, Any]] = [
        _SESSION_ID,
        {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
        {"name": "token", "in": "query", "schema": {"type": "string"}},
    ]
    paths: dict[str, Any] = {
        "/v1/sessions": {
            "post": _op(
                "Create a session",
                {"201": _json(_object({"id": {"type": "string"}}, ["id"]), "created"), **_BAD_BODY},
                body=_object({}, []),
            ),
            "get": _op(
                "List this token's sessions, most recently updated first",
                {
                    "200": _json(
                        _object(
                            {"sessions": {"type": "array", "items": _ref("SessionSummary")}},
                            ["sessions"],
                        ),
                        "the sessions",
                    ),
                    "400": _error("bad limit"),
                },
                params=[
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 200},
                    }
                ],
            ),
        },
        sid: {
            "get": _op(
                "The durable transcript",
                {"200": _json(_ref("Snapshot"), "the snapshot"), "404": _NOT_FOUND},
                params=[_SESSION_ID],
            ),
            "patch": _op(
                "Give the session a title (later turns keep it)",
                {
                    "200": _json(_ref("SessionSummary"), "the renamed session"),
                    "404": _NOT_FOUND,
                    **_BAD_BODY,
                },
                params=[_SESSION_ID],
                body=_object(
                    {"title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS}},
                    ["title"],
                ),
            ),
            "delete": _op(
                "Delete the session and everything it holds",
                {
                    "200": _json(
                        _object(
                            {"id": {"type": "string"}, "deleted": {"const": True}},
                            [
                                "id",
                                "deleted",
                            ],
                        ),
                        "deleted",
                    ),
                    "404": _NOT_FOUND,
                    "409": _error("a turn is running on the session (turn_id says which)"),
                },
                params=[_SESSION_ID],
            ),
        },
        f"{sid}/messages": {
            "post": _op(
                "Post a user message: starts a turn that runs whatever the clients do; while "
                "a turn runs, if_busy says what happens (reject: 409; enqueue: queued to run "
                "after it; interrupt: the turn stops, its work kept, and this message resumes "
                "it; rollback: the turn stops, its work discarded, and this message runs)",
                {
                    "202": _json(
                        {
                            "oneOf": [
                                _object({"turn_id": {"type": "string"}}, ["turn_id"]),
                                _object(
                                    {
                                        "queued": {"const": True},
                                        "message_id": {"type": "string"},
                                    },
                                    ["queued", "message_id"],
                                ),
                            ]
                        },
                        "the turn started, or the message queued",
                    ),
                    "404": _NOT_FOUND,
                    "409": _error("a turn is running on the session (turn_id says which)"),
                    **_BAD_BODY,
                },
                params=[_SESSION_ID],
                body=_object(
                    {
                        "content": {"type": "string", "minLength": 1},
                        "if_busy": {"enum": ["reject", "enqueue", "interrupt", "rollback"]},
                    },
                    ["content"],
                ),
            )
        },
        f"{sid}/queue/{{message_id}}": {
            "delete": _op(
                "Cancel a queued message (the journal keeps it, marked cancelled)",
                {
                    "200": _json(
                        _object(
                            {"message_id": {"type": "string"}, "cancelled": {"const": True}},
                            ["message_id", "cancelled"],
                        ),
                        "cancelled",
                    ),
                    "404": _error("no such session, or the message is not queued"),
                },
                params=[
                    _SESSION_ID,
                    {
                        "name": "message_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
            )
        },
        f"{sid}/interrupt": {
            "post": _op(
                "Interrupt the running turn (its work is kept)",
                {"202": turn, "404": _NOT_FOUND, "409": _error("no turn is running"), **_BAD_BODY},
                params=[_SESSION_ID],
                body=_object({}, []),
            )
        },
        f"{sid}/permissions": {
            "get": _op(
                'The session\'s permission mode and its "always" grants (kept in the journal)',
                {"200": _json(_ref("Permissions"), "the grants"), "404": _NOT_FOUND},
                params=[_SESSION_ID],
            ),
            "delete": _op(
                "Withdraw the session's grants (all, or the one ?rule= names)",
                {
                    "200": _json(
                        _object(
                            {"revoked": {"type": "array", "items": {"type": "string"}}},
                            ["revoked"],
                        ),
                        "the rules withdrawn",
                    ),
                    "404": _NOT_FOUND,
                },
                params=[
                    _SESSION_ID,
                    {"name": "rule", "in": "query", "schema": {"type": "string", "minLength": 1}},
                ],
            ),
        },
        f"{sid}/permissions/{{request_id}}": {
            "post": _op(
                "Answer a permission request",
                {
                    "200": _json(
                        _object(
                            {"request_id": {"type": "string"}, "decision": {"type": "string"}},
                            ["request_id", "decision"],
                        ),
                        "answered",
                    ),
                    "404": _error("no such session or request waiting"),
                    **_BAD_BODY,
                },
                params=[
                    _SESSION_ID,
                    {
                        "name": "request_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
                body=_object({"decision": {"enum": ["allow", "always", "deny"]}}, ["decision"]),
            )
        },
        f"{sid}/events": {
            "get": _op(
                "The session's event stream (SSE), resumed after Last-Event-ID or ?after=N",
                {
                    "200": {
                        "description": (
                            "text/event-stream; the data of each numbered event is a "
                            "StreamEvent, of a reset a Snapshot (see the drover.server "
                            "docstring)"
                        ),
                        "content": {
                            "text/event-stream": {
                                "schema": {"type": "string"},
                                "x-event-data": _ref("StreamEvent"),
                            }
                        },
                    },
                    "400": _error("bad Last-Event-ID or after"),
                    "404": _NOT_FOUND,
                },
                params=events_params,
            )
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": f"{_package} server", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }
