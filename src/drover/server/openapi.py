"""The OpenAPI 3.1 schema of the HTTP API, served at ``/openapi.json``.

Written by hand next to the handlers (it is short, and every answer the handlers give is listed
here); the test suite fuzzes the API from this schema with schemathesis and checks every
response against it.
"""

from __future__ import annotations

from typing import Any

from drover import __name__ as _package
from drover.journal.rules import MAX_TITLE_CHARS
from drover.server import openapi_doors
from drover.server.openapi_parts import (
    BAD_BODY,
    NO_BODY,
    NOT_BLANK,
    error_response,
    json_content,
    object_schema,
    operation,
    ref,
)

_NOT_FOUND = error_response("no such session, or not this token's")
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
        "rewound": {"type": "boolean"},
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
            "paths": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Permissions": {
        "type": "object",
        "required": ["mode", "rules", "grants"],
        "properties": {
            "mode": {"enum": ["ask", "allow", "deny", "sandboxed"]},
            "rules": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["kind", "rule", "source"],
                    "properties": {
                        "kind": {"enum": ["allow", "deny"]},
                        "rule": {"type": "string"},
                        "source": {"type": "string"},
                    },
                },
            },
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
            "forked_from": _NULLABLE_STRING,
            "forked_turn": _NULLABLE_STRING,
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


def schema() -> dict[str, Any]:
    sid = "/v1/sessions/{session_id}"
    turn = json_content(object_schema({"turn_id": {"type": "string"}}, ["turn_id"]), "the turn")
    events_params: list[dict[str, Any]] = [
        _SESSION_ID,
        {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
        {"name": "token", "in": "query", "schema": {"type": "string"}},
    ]
    paths: dict[str, Any] = {
        "/v1/sessions": {
            "post": operation(
                "Create a session",
                {
                    "201": json_content(
                        object_schema({"id": {"type": "string"}}, ["id"]), "created"
                    ),
                    **BAD_BODY,
                },
                body=object_schema({}, []),
            ),
            "get": operation(
                "List this token's sessions, most recently updated first",
                {
                    "200": json_content(
                        object_schema(
                            {"sessions": {"type": "array", "items": ref("SessionSummary")}},
                            ["sessions"],
                        ),
                        "the sessions",
                    ),
                    "400": error_response("bad limit"),
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
            "get": operation(
                "The durable transcript",
                {"200": json_content(ref("Snapshot"), "the snapshot"), "404": _NOT_FOUND},
                params=[_SESSION_ID],
            ),
            "patch": operation(
                "Give the session a title (later turns keep it)",
                {
                    "200": json_content(ref("SessionSummary"), "the renamed session"),
                    "404": _NOT_FOUND,
                    **BAD_BODY,
                },
                params=[_SESSION_ID],
                body=object_schema(
                    {"title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS}},
                    ["title"],
                ),
            ),
            "delete": operation(
                "Delete the session and everything it holds",
                {
                    "200": json_content(
                        object_schema(
                            {"id": {"type": "string"}, "deleted": {"const": True}},
                            [
                                "id",
                                "deleted",
                            ],
                        ),
                        "deleted",
                    ),
                    "404": _NOT_FOUND,
                    "409": error_response("a turn is running on the session (turn_id says which)"),
                },
                params=[_SESSION_ID],
            ),
        },
        f"{sid}/messages": {
            "post": operation(
                "Post a user message: starts a turn that runs whatever the clients do; while "
                "a turn runs, if_busy says what happens (reject: 409; enqueue: queued to run "
                "after it; interrupt: the turn stops, its work kept, and this message resumes "
                "it; rollback: the turn stops, its work discarded, and this message runs)",
                {
                    "202": json_content(
                        {
                            "oneOf": [
                                object_schema({"turn_id": {"type": "string"}}, ["turn_id"]),
                                object_schema(
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
                    "409": error_response(
                        "a turn is running on the session (turn_id says which), or none runs but "
                        "a rewind or a message replacing the turn holds it for a moment (no "
                        "turn_id)"
                    ),
                    **BAD_BODY,
                    "422": error_response(
                        "the body does not match the schema, or its webhook is not one this "
                        "server delivers to (webhook_refused)"
                    ),
                },
                params=[
                    _SESSION_ID,
                    {
                        "name": "traceparent",
                        "in": "header",
                        "description": "W3C trace context: the parent of the turn's span when "
                        "the server exports traces",
                        "schema": {"type": "string"},
                    },
                ],
                body=object_schema(
                    {
                        "content": {"type": "string", "minLength": 1, "pattern": NOT_BLANK},
                        "if_busy": {"enum": ["reject", "enqueue", "interrupt", "rollback"]},
                        "webhook": {
                            "type": "string",
                            "description": "http(s) URL told of this turn's end (signed, "
                            "retried; its origin must be allowed by the server's operator)",
                        },
                    },
                    ["content"],
                ),
            )
        },
        f"{sid}/queue/{{message_id}}": {
            "delete": operation(
                "Cancel a queued message (the journal keeps it, marked cancelled)",
                {
                    "200": json_content(
                        object_schema(
                            {"message_id": {"type": "string"}, "cancelled": {"const": True}},
                            ["message_id", "cancelled"],
                        ),
                        "cancelled",
                    ),
                    "404": error_response("no such session, or the message is not queued"),
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
            "post": operation(
                "Interrupt the running turn (its work is kept)",
                {
                    "202": turn,
                    "404": _NOT_FOUND,
                    "409": error_response("no turn is running"),
                    **NO_BODY,
                },
                params=[_SESSION_ID],
                body=object_schema({}, []),
                empty=True,
            )
        },
        f"{sid}/permissions": {
            "get": operation(
                "The session's permission mode, the allow and deny rules that apply and its "
                '"always" grants (kept in the journal)',
                {"200": json_content(ref("Permissions"), "the grants"), "404": _NOT_FOUND},
                params=[_SESSION_ID],
            ),
            "delete": operation(
                "Withdraw the session's grants (all, or the one ?rule= names)",
                {
                    "200": json_content(
                        object_schema(
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
            "post": operation(
                "Answer a permission request",
                {
                    "200": json_content(
                        object_schema(
                            {"request_id": {"type": "string"}, "decision": {"type": "string"}},
                            ["request_id", "decision"],
                        ),
                        "answered",
                    ),
                    "404": error_response("no such session or request waiting"),
                    **BAD_BODY,
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
                body=object_schema(
                    {"decision": {"enum": ["allow", "always", "deny"]}}, ["decision"]
                ),
            )
        },
        f"{sid}/events": {
            "get": operation(
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
                                "x-event-data": ref("StreamEvent"),
                            }
                        },
                    },
                    "400": error_response("bad Last-Event-ID or after"),
                    "404": _NOT_FOUND,
                },
                params=events_params,
            )
        },
        "/metrics": {
            "get": operation(
                "The process's metrics in the Prometheus text format",
                {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                },
            )
        },
    }
    paths.update(_control_paths(sid))
    paths.update(openapi_doors.paths())
    return {
        "openapi": "3.1.0",
        "info": {"title": f"{_package} server", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": {**_SCHEMAS, **openapi_doors.SCHEMAS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


_STRINGS = {"type": "array", "items": {"type": "string"}}


def _control_paths(sid: str) -> dict[str, Any]:
    """Fork and rewind."""
    no_turn = error_response("no such session, or no such turn in it")
    forked = object_schema(
        {
            "id": {"type": "string"},
            "forked_from": {"type": "string"},
            "forked_turn": _NULLABLE_STRING,
        },
        ["id", "forked_from", "forked_turn"],
    )
    rewound = {
        "type": "object",
        "required": ["session_id", "turn_id", "not_rewindable", "unrestorable"],
        "properties": {
            "session_id": {"type": "string"},
            "turn_id": {"type": "string"},
            "rewound": _STRINGS,
            "restored": _STRINGS,
            "dry_run": {"const": True},
            "turns": _STRINGS,
            "prompt": {"type": "string"},
            "files": {
                "type": "array",
                "items": object_schema(
                    {
                        "path": {"type": "string"},
                        "action": {
                            "enum": [
                                "restore",
                                "delete",
                                "unchanged",
                                "unrestorable",
                                "unreachable",
                            ]
                        },
                        "conflict": {"type": "boolean"},
                    },
                    ["path", "action", "conflict"],
                ),
            },
            "diff": {"type": "string"},
            "unrestorable": _STRINGS,
            "not_rewindable": _STRINGS,
        },
    }
    return {
        f"{sid}/fork": {
            "post": operation(
                "A new session whose history is this one's up to and including turn_id "
                "(default: every turn not running)",
                {
                    "201": json_content(forked, "the new session"),
                    "404": no_turn,
                    "409": error_response("turn_id is still running"),
                    **BAD_BODY,
                },
                params=[_SESSION_ID],
                body=object_schema({"turn_id": {"type": "string"}}, []),
            )
        },
        f"{sid}/rewind": {
            "post": operation(
                "Undo turn_id and every later turn (kept in the journal, marked rewound); with "
                "files (default true) put back what write_file and edit_file wrote in them",
                {
                    "200": json_content(
                        rewound,
                        "what was rewound and restored (with dry_run: what would be, the diff)",
                    ),
                    "404": no_turn,
                    "409": error_response(
                        "a turn is running, or the session is held for a moment by another "
                        "rewind or a message replacing its turn (session_busy), a file changed "
                        "outside drover since "
                        "(rewind_conflict, paths names them; force overwrites), or the turn was "
                        "rewound already (already_rewound)"
                    ),
                    **BAD_BODY,
                },
                params=[_SESSION_ID],
                body=object_schema(
                    {
                        "turn_id": {"type": "string"},
                        "files": {"type": "boolean"},
                        "force": {"type": "boolean"},
                        "dry_run": {"type": "boolean"},
                    },
                    ["turn_id"],
                ),
            )
        },
    }
