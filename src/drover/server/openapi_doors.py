"""The OpenAPI paths of the front doors of other protocols: the AI SDK's ``/api/chat`` and
OpenAI-style background responses (``/v1/responses``), beside :mod:`.openapi`'s own."""

from __future__ import annotations

from typing import Any

from drover.server.openapi_parts import (
    BAD_BODY,
    ID_PATTERN,
    NOT_BLANK,
    error_response,
    json_content,
    object_schema,
    operation,
    ref,
)

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
                {
                    "type": "array",
                    "minItems": 1,
                    "items": object_schema(
                        {"type": {"const": "input_text"}, "text": {"type": "string"}},
                        ["type", "text"],
                    ),
                    "contains": {"properties": {"text": _NOT_BLANK}},
                },
            ]
        },
    },
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
            "session, output items message, function_call and function_call_output"
        ),
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "number"},
            "status": {"enum": ["in_progress", "completed", "incomplete", "cancelled", "failed"]},
            "model": {"type": "string"},
            "output": {"type": "array", "items": {"type": "object"}},
            "background": {"type": "boolean"},
            "conversation": {"type": "object"},
            "previous_response_id": {"type": ["string", "null"]},
            "error": {"type": ["object", "null"]},
            "incomplete_details": {"type": ["object", "null"]},
            "usage": {"type": ["object", "null"]},
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
                "Start a background response: a turn on a new session, on conversation, or "
                "after previous_response_id",
                {
                    "200": {
                        "description": "the Response (in progress), or with stream its events",
                        "content": {
                            **_RESPONSE_OR_EVENTS,
                        },
                    },
                    "404": error_response("no such conversation or previous response"),
                    "409": error_response(
                        "a response is in progress on the conversation, or "
                        "previous_response_id is not its latest"
                    ),
                    **BAD_BODY,
                },
                body={
                    "type": "object",
                    "required": ["model", "input", "background"],
                    "additionalProperties": False,
                    "not": {
                        "required": ["previous_response_id", "conversation"],
                        "properties": {
                            "previous_response_id": {"type": "string"},
                            "conversation": {"not": {"type": "null"}},
                        },
                    },
                    "properties": {
                        "model": {"type": "string", "minLength": 1},
                        "input": {
                            "oneOf": [
                                _NOT_BLANK,
                                {
                                    "type": "array",
                                    "minItems": 1,
                                    "maxItems": 1,
                                    "items": _INPUT_MESSAGE,
                                },
                            ]
                        },
                        "background": {"const": True},
                        "stream": {"type": "boolean"},
                        "store": {"const": True},
                        "previous_response_id": {"type": ["string", "null"]},
                        "conversation": {
                            "oneOf": [
                                {"type": "null"},
                                {"type": "string", "pattern": ID_PATTERN},
                                object_schema(
                                    {"id": {"type": "string", "pattern": ID_PATTERN}}, ["id"]
                                ),
                            ]
                        },
                        "stream_options": object_schema(
                            {"include_obfuscation": {"type": "boolean"}}, []
                        ),
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
            )
        },
        "/v1/responses/{response_id}/cancel": {
            "post": operation(
                "Cancel a response in progress (its turn is interrupted; its work is kept)",
                {
                    "200": response,
                    "404": error_response("no such response, or not this token's"),
                    "409": error_response("the response is not in progress"),
                    **BAD_BODY,
                },
                params=[_RESPONSE_ID],
                body=object_schema({}, []),
            )
        },
    }
