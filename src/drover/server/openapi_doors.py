"""The OpenAPI paths of the front doors of other protocols: the AI SDK's ``/api/chat`` and
OpenAI-style responses (``/v1/responses``), beside :mod:`.openapi`'s own."""

from __future__ import annotations

from typing import Any

from drover.server.openapi_parts import (
    BAD_BODY,
    ID_PATTERN,
    NO_BODY,
    NOT_BLANK,
    error_response,
    json_content,
    object_schema,
    operation,
    ref,
)
from drover.server.responses_input import NULL_ONLY

_CHAT_ID: dict[str, Any] = {
    "name": "chat_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}
_RESPONSE_ID: dict[str, Any] = {
    "name": "response_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}
#: One event of an event stream (each event's schema, before OpenAPI 3.2's itemSchema).
_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
_UI_STREAM = {
    "description": (
        "the AI SDK's UI message stream, protocol v1 (header x-vercel-ai-ui-message-stream: "
        "v1): each event's data a UIMessageChunk as JSON, the last one [DONE]"
    ),
    "content": {"text/event-stream": {"schema": _SSE_EVENT}},
}
#: Text with something in it besides white space (a JSON Schema regex).
_NOT_BLANK = {"type": "string", "pattern": NOT_BLANK}
_TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
_USER_MESSAGE = {
    "type": "object",
    "required": ["id", "role", "parts"],
    "properties": {
        "id": {"type": "string"},
        "role": {"const": "user"},
        "parts": {
            "description": "text parts (data- parts are left out), at least one not blank",
            "type": "array",
            "items": {
                "oneOf": [
                    _TEXT_PART,
                    {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"type": "string", "pattern": "^data-"}},
                    },
                ]
            },
            "contains": {
                **_TEXT_PART,
                "properties": {"type": {"const": "text"}, "text": _NOT_BLANK},
            },
        },
        "metadata": {},
    },
}
_ASSISTANT_MESSAGE = {
    "type": "object",
    "required": ["id", "role", "parts"],
    "properties": {
        "id": {"type": "string"},
        "role": {"const": "assistant"},
        "parts": {"type": "array", "items": {"type": "object"}},
        "metadata": {},
    },
}
_INPUT_TEXT = {
    "type": "array",
    "items": object_schema(
        {"type": {"const": "input_text"}, "text": {"type": "string"}}, ["type", "text"]
    ),
}
#: A user message of a Responses input: the new one at its end, or one of its history.
_INPUT_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "message"},
        "role": {"const": "user"},
        "content": {
            "oneOf": [
                _NOT_BLANK,
                {**_INPUT_TEXT, "minItems": 1, "contains": {"properties": {"text": _NOT_BLANK}}},
            ]
        },
        "id": {"type": "string"},
        "status": {"type": "string"},
    },
}
#: An item of an answer of drover's, sent back in a history (its id names the response;
#: its content is not read: the journal's is the durable one).
_ANSWER_ITEMS = [
    {
        "type": "object",
        "required": ["role"],
        "properties": {"type": {"const": "message"}, "role": {"const": "assistant"}},
    },
    {
        "type": "object",
        "required": ["type", "id"],
        "properties": {"type": {"const": "mcp_call"}, "id": {"type": "string"}},
    },
]
_NULL = {"type": "null"}


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [_NULL, schema]}


#: The Responses API's fields drover takes only with a value that changes nothing
#: (drover.server.responses_input), each also null.
_NO_OPS: dict[str, Any] = {
    "include": _or_null({"type": "array", "items": {"const": "reasoning.encrypted_content"}}),
    "tools": _or_null({"type": "array", "maxItems": 0}),
    "tool_choice": _or_null({"const": "auto"}),
    "parallel_tool_calls": _or_null({"const": True}),
    "top_logprobs": _or_null({"const": 0}),
    "reasoning": _or_null({"type": "object", "additionalProperties": _NULL}),
    "text": _or_null(
        object_schema(
            {
                "format": object_schema({"type": {"const": "text"}}, ["type"]),
                "verbosity": _NULL,
            },
            [],
        )
    ),
    "truncation": _or_null({"const": "auto"}),
    "metadata": _or_null({"type": "object", "maxProperties": 0}),
    "service_tier": _or_null({"enum": ["auto", "default"]}),
    **{
        name: _or_null({"type": "string"})
        for name in ("user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention")
    },
    **dict.fromkeys(NULL_ONLY, _NULL),
}
#: A response as JSON, or as its streaming events (event: TYPE, data: JSON with
#: sequence_number, then data: [DONE]).
_RESPONSE_OR_EVENTS: dict[str, Any] = {
    "application/json": {"schema": ref("Response")},
    "text/event-stream": {"schema": _SSE_EVENT},
}

SCHEMAS: dict[str, Any] = {
    "Response": {
        "description": (
            "An OpenAI Responses API Response object: id resp_TURN, conversation.id the "
            "session, output items message and mcp_call (a tool call drover ran); "
            "drover_reason why it did not complete"
        ),
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"enum": ["in_progress", "completed", "incomplete", "cancelled", "failed"]},
            "model": {"type": "string"},
            "output": {"type": "array", "items": {"type": "object"}},
            "background": {"type": "boolean"},
            "conversation": {"type": "object"},
            "previous_response_id": {"type": ["string", "null"]},
            "error": {"type": ["object", "null"]},
            "incomplete_details": {
                "oneOf": [
                    _NULL,
                    object_schema(
                        {"reason": {"enum": ["max_output_tokens", "content_filter"]}}, ["reason"]
                    ),
                ]
            },
            "drover_reason": {"type": ["string", "null"]},
            "usage": {"type": ["object", "null"]},
        },
    },
    "InputItems": {
        "description": "A page of a response's input items (its user message)",
        "type": "object",
        "required": ["object", "data", "first_id", "last_id", "has_more"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": object_schema(
                    {
                        "id": {"type": "string"},
                        "type": {"const": "message"},
                        "role": {"const": "user"},
                        "status": {"const": "completed"},
                        "content": _INPUT_TEXT,
                    },
                    ["id", "type", "role", "status", "content"],
                ),
            },
            "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"},
        },
    },
}


def paths() -> dict[str, Any]:
    response = json_content(ref("Response"), "the response")
    return {
        "/api/chat": {
            "post": operation(
                "Send a chat message (the AI SDK's DefaultChatTransport): the chat id is the "
                "session id; only the last message is new (a user message, or an assistant "
                "message answering tool approvals)",
                {
                    "200": _UI_STREAM,
                    "404": error_response("an approval for a chat this token does not have"),
                    "409": error_response(
                        "history_mismatch (the earlier messages are not the chat's), "
                        "session_busy (turn_id says which turn runs), or no_approval (the last "
                        "message, an answer of the chat, answers no approval it waits for)"
                    ),
                    **BAD_BODY,
                },
                body=object_schema(
                    {
                        "id": {"type": "string", "pattern": ID_PATTERN},
                        "messages": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"oneOf": [_USER_MESSAGE, _ASSISTANT_MESSAGE]},
                        },
                        "trigger": {"const": "submit-message"},
                        "messageId": {"type": "string"},
                    },
                    ["id", "messages"],
                ),
            )
        },
        "/api/chat/{chat_id}/stream": {
            "get": operation(
                "Resume the chat's running answer (useChat's resume), replayed from its start",
                {
                    "200": _UI_STREAM,
                    "204": {"description": "no answer of the chat is running"},
                    "404": error_response("not a chat id"),
                },
                params=[_CHAT_ID],
            )
        },
        "/v1/responses": {
            "post": operation(
                "Start a response: a turn on a new session, on conversation, after "
                "previous_response_id, or on the conversation the input's history names by its "
                "ids; answered with the Response as it starts (background), once it ended "
                "(white space before it meanwhile), or with its events (stream)",
                {
                    "200": {
                        "description": "the Response, or with stream its events",
                        "content": {
                            **_RESPONSE_OR_EVENTS,
                        },
                    },
                    "404": error_response("no such conversation or previous response"),
                    "409": error_response(
                        "session_busy (a response is in progress on the conversation), "
                        "not_latest (previous_response_id is not its latest), "
                        "history_mismatch (the input's earlier items are not the "
                        "conversation's), or no_new_message (the input ends with an answer)"
                    ),
                    **BAD_BODY,
                },
                body={
                    "type": "object",
                    "required": ["model", "input"],
                    "additionalProperties": False,
                    "not": {
                        "required": ["previous_response_id", "conversation"],
                        "properties": {
                            "previous_response_id": {"type": "string"},
                            "conversation": {"not": _NULL},
                        },
                    },
                    "properties": {
                        "model": {"type": "string", "minLength": 1},
                        "input": {
                            "oneOf": [
                                _NOT_BLANK,
                                {
                                    "description": (
                                        "the history the client holds (the conversation's own) "
                                        "and, at its end, the new user message"
                                    ),
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {"oneOf": [_INPUT_MESSAGE, *_ANSWER_ITEMS]},
                                },
                            ]
                        },
                        "background": _or_null({"type": "boolean"}),
                        "stream": _or_null({"type": "boolean"}),
                        "store": _or_null({"const": True}),
                        "previous_response_id": _or_null({"type": "string"}),
                        "conversation": {
                            "oneOf": [
                                _NULL,
                                {"type": "string", "pattern": ID_PATTERN},
                                object_schema(
                                    {"id": {"type": "string", "pattern": ID_PATTERN}}, ["id"]
                                ),
                            ]
                        },
                        "stream_options": _or_null(
                            object_schema({"include_obfuscation": {"type": "boolean"}}, [])
                        ),
                        **_NO_OPS,
                    },
                },
            )
        },
        "/v1/responses/{response_id}": {
            "get": operation(
                "Poll a response, or with stream=true resume its events after starting_after",
                {
                    "200": {
                        "description": "the Response, or with stream=true its events",
                        "content": {
                            **_RESPONSE_OR_EVENTS,
                        },
                    },
                    "400": error_response("bad stream or starting_after"),
                    "404": error_response("no such response, or not this token's"),
                },
                params=[
                    _RESPONSE_ID,
                    {"name": "stream", "in": "query", "schema": {"enum": ["true", "false"]}},
                    {
                        "name": "starting_after",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 0},
                    },
                ],
            ),
            "delete": operation(
                "Delete the latest response of its conversation, once it ended: its turns are "
                "rewound (kept in the journal, marked so; files stay as they are)",
                {
                    "200": json_content(
                        object_schema(
                            {
                                "id": {"type": "string"},
                                "object": {"const": "response"},
                                "deleted": {"const": True},
                            },
                            ["id", "object", "deleted"],
                        ),
                        "the response is deleted",
                    ),
                    "404": error_response("no such response, or not this token's"),
                    "409": error_response(
                        "not_latest (a later response of its conversation exists) or "
                        "session_busy (a response of its conversation is in progress)"
                    ),
                },
                params=[_RESPONSE_ID],
            ),
        },
        "/v1/responses/{response_id}/input_items": {
            "get": operation(
                "A response's input items: the user message it answers",
                {
                    "200": json_content(ref("InputItems"), "a page of its input items"),
                    "400": error_response("bad limit or order"),
                    "404": error_response(
                        "no such response, or not this token's, or no input item after"
                    ),
                },
                params=[
                    _RESPONSE_ID,
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                    {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                ],
            )
        },
        "/v1/responses/{response_id}/cancel": {
            "post": operation(
                "Cancel a response in progress (its turn is interrupted; its work is kept)",
                {
                    "200": response,
                    "404": error_response("no such response, or not this token's"),
                    "409": error_response("the response is not in progress"),
                    **NO_BODY,
                },
                params=[_RESPONSE_ID],
                body=object_schema({}, []),
                empty=True,
            )
        },
    }
