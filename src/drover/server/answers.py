"""The models of what the routes answer with, for the schema only (:mod:`.openapi`): the
routes build their answers from the journal's records (:mod:`.snapshot`, :mod:`.responses_api`)
and the fuzz test checks each one against these. Imported when the schema is asked for, not
when the server starts.
"""

from typing import Any, Literal

from pydantic import Field

from drover.core.events import ToolState, TurnStatus
from drover.core.messages import Role
from drover.server.wire import Answer, Omittable, OpenAnswer


class ErrorDetail(OpenAnswer):
    code: str
    message: str


class Error(OpenAnswer):
    """A refusal: its code and message; ``turn_id`` names a running turn, ``paths`` the files
    of a rewind's conflict."""

    error: ErrorDetail
    turn_id: Omittable[str] = None
    paths: Omittable[list[str]] = None


class Created(Answer):
    id: str


class SessionSummary(OpenAnswer):
    id: str
    title: str | None
    model: str
    created_at: float
    updated_at: float
    running_turn_id: str | None


class SessionList(Answer):
    sessions: list[SessionSummary]


class Message(OpenAnswer):
    role: Role
    content: list[dict[str, Any]]
    meta: Omittable[dict[str, Any]] = None


class StoredMessage(OpenAnswer):
    seq: int
    partial: bool
    message: Message


class ToolCall(OpenAnswer):
    call_id: str
    step: Omittable[int] = None
    call_index: Omittable[int] = None
    name: str
    state: ToolState
    input: dict[str, Any] | None = None
    output: str | None = None
    is_error: Omittable[bool] = None
    outcome_unknown: Omittable[bool] = None


class Turn(OpenAnswer):
    id: str
    seq: int
    status: TurnStatus
    reason: str | None = None
    error: str | None = None
    discarded: Omittable[bool] = None
    rewound: Omittable[bool] = None
    created_at: Omittable[float] = None
    ended_at: float | None = None
    usage: dict[str, Any] | None = None
    user_message: Message | None = None
    messages: list[StoredMessage]
    tool_calls: list[ToolCall]


class QueuedItem(OpenAnswer):
    message_id: str
    content: str
    created_at: float


class PendingPermission(OpenAnswer):
    request_id: Any
    call_id: Any
    tool_name: Any
    input: Any
    summary: Any


class Snapshot(SessionSummary):
    """The durable transcript: the session, its turns with their messages and tool calls,
    the number of the last event it is current to, the permission questions waiting and the
    messages queued."""

    forked_from: str | None = None
    forked_turn: str | None = None
    last_event_id: int = Field(ge=0)
    turns: list[Turn]
    pending_permissions: list[PendingPermission]
    queued: list[QueuedItem] = Field(
        description="messages waiting for the running turn to end, in run order"
    )


class Deleted(Answer):
    id: str
    deleted: Literal[True]


class TurnStarted(Answer):
    turn_id: str


class Queued(Answer):
    queued: Literal[True]
    message_id: str


class Cancelled(Answer):
    message_id: str
    cancelled: Literal[True]


class Rule(OpenAnswer):
    kind: Literal["allow", "deny"]
    rule: str
    source: str


class Grant(OpenAnswer):
    rule: str
    created_at: float


class Permissions(OpenAnswer):
    mode: Literal["ask", "allow", "deny", "sandboxed"]
    rules: list[Rule]
    grants: list[Grant]


class Revoked(Answer):
    revoked: list[str]


class Answered(Answer):
    request_id: str
    decision: str


class Forked(Answer):
    id: str
    forked_from: str
    forked_turn: str | None


class FileAction(Answer):
    path: str
    action: Literal["restore", "delete", "unchanged", "unrestorable", "unreachable"]
    conflict: bool


class Rewound(OpenAnswer):
    session_id: str
    turn_id: str
    rewound: Omittable[list[str]] = None
    restored: Omittable[list[str]] = None
    dry_run: Omittable[Literal[True]] = None
    turns: Omittable[list[str]] = None
    prompt: Omittable[str] = None
    files: Omittable[list[FileAction]] = None
    diff: Omittable[str] = None
    unrestorable: list[str]
    not_rewindable: list[str]


class StreamEvent(OpenAnswer):
    """The data of a numbered event of the stream (id: SEQ, event: TYPE): the event's fields,
    then seq, prev and turn_id. prev is the number of the event before it in the session's
    log: an event whose prev is not the id last received means events were missed (reconnect
    with Last-Event-ID: the server serves them or a reset)."""

    type: str
    seq: int = Field(ge=1)
    prev: int = Field(ge=0)
    turn_id: str | None


class SseEvent(OpenAnswer):
    """One event of an event stream (each event's schema, before OpenAPI 3.2's itemSchema)."""

    data: str
    event: Omittable[str] = None
    id: Omittable[str] = None
    retry: Omittable[int] = None


# -- the Responses door --------------------------------------------------------------------------


class IncompleteDetails(Answer):
    reason: Literal["max_output_tokens", "content_filter"]


class Response(OpenAnswer):
    """An OpenAI Responses API Response object: id resp_TURN, conversation.id the session,
    output items message and mcp_call (a tool call drover ran); drover_reason why it did not
    complete"""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "cancelled", "failed"]
    model: str
    output: list[dict[str, Any]]
    background: Omittable[bool] = None
    conversation: Omittable[dict[str, Any]] = None
    previous_response_id: str | None = None
    error: dict[str, Any] | None = None
    incomplete_details: IncompleteDetails | None = None
    drover_reason: str | None = None
    usage: dict[str, Any] | None = None


class InputText(Answer):
    type: Literal["input_text"]
    text: str


class InputItem(Answer):
    id: str
    type: Literal["message"]
    role: Literal["user"]
    status: Literal["completed"]
    content: list[InputText]


class InputItems(OpenAnswer):
    """A page of a response's input items (its user message)"""

    object: Literal["list"]
    data: list[InputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ResponseDeleted(Answer):
    id: str
    object: Literal["response"]
    deleted: Literal[True]
