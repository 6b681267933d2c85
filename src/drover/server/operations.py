"""The route table of the HTTP API as its schema tells it: each operation's method, path,
summary, the models of what it takes (body, query string, headers) and its answers by status.
:mod:`.openapi` builds the document from it; the routes validate with the same models (and a
test holds the table to the routes the application serves)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drover.server import answers as a
from drover.server import api_models as m
from drover.server.answers import InputItems, Response, ResponseDeleted
from drover.server.chat_request import ChatRequest
from drover.server.responses_request import ItemsQuery, ResponsesRequest, RetrieveQuery
from drover.server.wire import Wire


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer: what it means, and the type of its body (None: no body) as ``media``;
    ``extra``: more keys of that media, each a type described as a schema; ``also``: other
    media the answer may come as, and their types."""

    description: str
    model: Any = None
    media: str = "application/json"
    extra: Mapping[str, Any] = field(default_factory=dict)
    also: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Op:
    """An operation (every one also answers 401, 403 and 421; one with a body 400, 413, 415
    and 422 about it: :mod:`.openapi`). ``optional_body``: no body at all is taken too."""

    method: str
    path: str
    summary: str
    replies: Mapping[int, Reply]
    body: type[Wire] | None = None
    optional_body: bool = False
    query: type[Wire] | None = None
    headers: type[Wire] | None = None


def _error(description: str) -> Reply:
    return Reply(description, a.Error)


_SID = "/v1/sessions/{session_id}"
_NOT_FOUND = _error("no such session, or not this token's")
_NO_TURN = _error("no such session, or no such turn in it")
#: The UI message stream of the AI SDK's door.
_UI_STREAM = Reply(
    "the AI SDK's UI message stream, protocol v1 (header x-vercel-ai-ui-message-stream: v1): "
    "each event's data a UIMessageChunk as JSON, the last one [DONE]",
    a.SseEvent,
    media="text/event-stream",
)
_NOT_YOURS = _error("no such response, or not this token's")


def _response_or_events(description: str) -> Reply:
    """A Response as JSON, or as its streaming events (event: TYPE, data: JSON with
    sequence_number, then data: [DONE]): two media of one answer."""
    return Reply(description, Response, also={"text/event-stream": a.SseEvent})


OPERATIONS: tuple[Op, ...] = (
    Op(
        "POST",
        "/v1/sessions",
        "Create a session",
        {201: Reply("created", a.Created)},
        body=m.Empty,
    ),
    Op(
        "GET",
        "/v1/sessions",
        "List this token's sessions, most recently updated first",
        {200: Reply("the sessions", a.SessionList), 400: _error("bad limit")},
        query=m.ListQuery,
    ),
    Op(
        "GET",
        _SID,
        "The durable transcript",
        {200: Reply("the snapshot", a.Snapshot), 404: _NOT_FOUND},
    ),
    Op(
        "PATCH",
        _SID,
        "Give the session a title (later turns keep it)",
        {200: Reply("the renamed session", a.SessionSummary), 404: _NOT_FOUND},
        body=m.Rename,
    ),
    Op(
        "DELETE",
        _SID,
        "Delete the session and everything it holds",
        {
            200: Reply("deleted", a.Deleted),
            404: _NOT_FOUND,
            409: _error("a turn is running on the session (turn_id says which)"),
        },
    ),
    Op(
        "POST",
        f"{_SID}/messages",
        "Post a user message: starts a turn that runs whatever the clients do; while a turn "
        "runs, if_busy says what happens (reject: 409; enqueue: queued to run after it; "
        "interrupt: the turn stops, its work kept, and this message resumes it; rollback: the "
        "turn stops, its work discarded, and this message runs)",
        {
            202: Reply("the turn started, or the message queued", a.TurnStarted | a.Queued),
            404: _NOT_FOUND,
            409: _error(
                "a turn is running on the session (turn_id says which), or none runs but a "
                "rewind or a message replacing the turn holds it for a moment (no turn_id)"
            ),
            422: _error(
                "the body does not match the schema, or its webhook is not one this server "
                "delivers to (webhook_refused)"
            ),
        },
        body=m.PostMessage,
        headers=m.MessageHeaders,
    ),
    Op(
        "POST",
        f"{_SID}/interrupt",
        "Interrupt the running turn (its work is kept)",
        {
            202: Reply("the turn", a.TurnStarted),
            404: _NOT_FOUND,
            409: _error("no turn is running"),
        },
        body=m.Empty,
        optional_body=True,
    ),
    Op(
        "POST",
        f"{_SID}/fork",
        "A new session whose history is this one's up to and including turn_id (default: "
        "every turn not running)",
        {
            201: Reply("the new session", a.Forked),
            404: _NO_TURN,
            409: _error("turn_id is still running"),
        },
        body=m.Fork,
    ),
    Op(
        "POST",
        f"{_SID}/rewind",
        "Undo turn_id and every later turn (kept in the journal, marked rewound); with files "
        "(default true) put back what write_file and edit_file wrote in them",
        {
            200: Reply(
                "what was rewound and restored (with dry_run: what would be, the diff)",
                a.Rewound,
            ),
            404: _NO_TURN,
            409: _error(
                "a turn is running, or the session is held for a moment by another rewind or a "
                "message replacing its turn (session_busy), a file changed outside drover since "
                "(rewind_conflict, paths names them; force overwrites), or the turn was rewound "
                "already (already_rewound)"
            ),
        },
        body=m.Rewind,
    ),
    Op(
        "DELETE",
        f"{_SID}/queue/{{message_id}}",
        "Cancel a queued message (the journal keeps it, marked cancelled)",
        {
            200: Reply("cancelled", a.Cancelled),
            404: _error("no such session, or the message is not queued"),
        },
    ),
    Op(
        "GET",
        f"{_SID}/permissions",
        "The session's permission mode, the allow and deny rules that apply and its "
        '"always" grants (kept in the journal)',
        {200: Reply("the grants", a.Permissions), 404: _NOT_FOUND},
    ),
    Op(
        "DELETE",
        f"{_SID}/permissions",
        "Withdraw the session's grants (all, or the one ?rule= names)",
        {
            200: Reply("the rules withdrawn", a.Revoked),
            400: _error("an empty rule"),
            404: _NOT_FOUND,
        },
        query=m.RevokeQuery,
    ),
    Op(
        "POST",
        f"{_SID}/permissions/{{request_id}}",
        "Answer a permission request",
        {
            200: Reply("answered", a.Answered),
            404: _error("no such session or request waiting"),
        },
        body=m.Decide,
    ),
    Op(
        "GET",
        f"{_SID}/events",
        "The session's event stream (SSE), resumed after Last-Event-ID or ?after=N",
        {
            200: Reply(
                "text/event-stream; the data of each numbered event is a StreamEvent, of a "
                "reset a Snapshot (see the drover.server docstring)",
                str,
                media="text/event-stream",
                extra={"x-event-data": a.StreamEvent},
            ),
            400: _error("bad Last-Event-ID or after"),
            404: _NOT_FOUND,
        },
        query=m.EventsQuery,
        headers=m.EventsHeaders,
    ),
    Op(
        "GET",
        "/metrics",
        "The process's metrics in the Prometheus text format",
        {200: Reply("Prometheus text exposition format 0.0.4", str, media="text/plain")},
    ),
    Op(
        "POST",
        "/api/chat",
        "Send a chat message (the AI SDK's DefaultChatTransport): the chat id is the session "
        "id; only the last message is new (a user message, or an assistant message answering "
        "tool approvals)",
        {
            200: _UI_STREAM,
            404: _error("an approval for a chat this token does not have"),
            409: _error(
                "history_mismatch (the earlier messages are not the chat's), session_busy "
                "(turn_id says which turn runs), or no_approval (the last message, an answer "
                "of the chat, answers no approval it waits for)"
            ),
        },
        body=ChatRequest,
    ),
    Op(
        "GET",
        "/api/chat/{chat_id}/stream",
        "Resume the chat's running answer (useChat's resume), replayed from its start",
        {
            200: _UI_STREAM,
            204: Reply("no answer of the chat is running"),
            404: _error("not a chat id"),
        },
    ),
    Op(
        "POST",
        "/v1/responses",
        "Start a response: a turn on a new session, on conversation, after "
        "previous_response_id, or on the conversation the input's history names by its ids; "
        "answered with the Response as it starts (background), once it ended (white space "
        "before it meanwhile), or with its events (stream)",
        {
            200: _response_or_events("the Response, or with stream its events"),
            404: _error("no such conversation or previous response"),
            409: _error(
                "session_busy (a response is in progress on the conversation), not_latest "
                "(previous_response_id is not its latest), history_mismatch (the input's "
                "earlier items are not the conversation's), or no_new_message (the input ends "
                "with an answer)"
            ),
        },
        body=ResponsesRequest,
    ),
    Op(
        "GET",
        "/v1/responses/{response_id}",
        "Poll a response, or with stream=true resume its events after starting_after",
        {
            200: _response_or_events("the Response, or with stream=true its events"),
            400: _error("bad stream or starting_after"),
            404: _NOT_YOURS,
        },
        query=RetrieveQuery,
    ),
    Op(
        "DELETE",
        "/v1/responses/{response_id}",
        "Delete the latest response of its conversation, once it ended: its turns are "
        "rewound (kept in the journal, marked so; files stay as they are)",
        {
            200: Reply("the response is deleted", ResponseDeleted),
            404: _NOT_YOURS,
            409: _error(
                "not_latest (a later response of its conversation exists) or session_busy (a "
                "response of its conversation is in progress)"
            ),
        },
    ),
    Op(
        "GET",
        "/v1/responses/{response_id}/input_items",
        "A response's input items: the user message it answers",
        {
            200: Reply("a page of its input items", InputItems),
            400: _error("bad limit or order"),
            404: _error("no such response, or not this token's, or no input item after"),
        },
        query=ItemsQuery,
    ),
    Op(
        "POST",
        "/v1/responses/{response_id}/cancel",
        "Cancel a response in progress (its turn is interrupted; its work is kept)",
        {
            200: Reply("the response", Response),
            404: _NOT_YOURS,
            409: _error("the response is not in progress"),
        },
        body=m.Empty,
        optional_body=True,
    ),
)
