"""The AI SDK door: ``POST /api/chat`` and ``GET /api/chat/{id}/stream``, the routes the
``ai`` package's ``DefaultChatTransport`` (``useChat``) calls, answered with the UI message
stream of :mod:`.ai_sdk`.

The chat id is the drover session id (a new one creates the session, for the token asking).
Of the posted messages only the last is new: a user message (its text parts) starts a turn;
an assistant message whose tool parts carry approval answers (``approval-responded``) answers
the permission questions of the chat's running answer and continues it. The messages before it
must agree with the session: its user messages, in order, with the same text, and assistant
messages only where they answer one of them, carrying the id of that answer's message (their
text is not compared: the journal's is the durable one). Anything else is a clear 4xx —
``regenerate-message`` included, since drover keeps every turn.

Every stream — the answer to a POST as a resume — is the response's events from its start
(:func:`drover.server.doors.follow_response`), so a resume after a server restart is served
from the journal like any other; the transport replays it (``resumeStreamIsReplay``). The
stream ends with ``[DONE]`` after ``finish``, or at a permission question waiting for its
answer (``finishReason`` ``tool-calls``; the client's approval continues the message); a resume
when no turn of the chat runs is 204.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from drover.errors import DroverError, SessionBusyError
from drover.journal.protocol import Store
from drover.journal.records import SessionRecord, TurnRecord
from drover.server.ai_sdk import Chunk, UiMessageStream
from drover.server.auth import principal
from drover.server.bodies import json_body
from drover.server.chat_request import AnswerMessage, ChatRequest, UserMessage
from drover.server.doors import (
    DONE,
    DOOR_ID,
    KEEP_ALIVE,
    Cut,
    Ended,
    Idle,
    follow_response,
    group_of,
    log_position,
    replay_response,
    responses,
    service_of,
    start_seq,
    user_text,
)
from drover.server.errors import ApiError
from drover.server.service import NotFoundError, Service

#: The headers of a UI message stream (the ``ai`` package's own, but ``connection``).
HEADERS = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}


def _stored(turns: list[TurnRecord]) -> list[tuple[str, str]]:
    """The session as the chat's messages: ``("user", text)`` and ``("assistant", id)``."""
    out: list[tuple[str, str]] = []
    for group in responses(turns):
        text = user_text(group[0])
        if text is not None:
            out.append(("user", text))
        out.append(("assistant", group[0].id))
    return out


def _check_history(
    posted: list[UserMessage | AnswerMessage], stored: list[tuple[str, str]]
) -> None:
    """Raise a 409 unless ``posted`` (the messages before the new one) agree with the
    session: its user messages in order, assistant messages only where they answer."""
    at = 0
    for n, message in enumerate(posted, 1):
        if isinstance(message, UserMessage):
            while at < len(stored) and stored[at][0] == "assistant":
                at += 1
            if at >= len(stored) or stored[at] != ("user", message.text):
                raise ApiError(
                    409,
                    "history_mismatch",
                    f"message {n} is not the chat's user message at that place: only the last "
                    "message is new, the others must be the chat's as it was streamed",
                )
            at += 1
        else:
            found = at
            while found < len(stored) and stored[found][0] == "assistant":
                if stored[found][1] == message.id:
                    break
                found += 1
            if found >= len(stored) or stored[found] != ("assistant", message.id):
                raise ApiError(
                    409,
                    "history_mismatch",
                    f"message {n} (assistant, id {message.id[:64]!r}) is not an answer of this "
                    "chat at that place",
                )
            at = found + 1
    missing = sum(1 for role, _ in stored[at:] if role == "user")
    if missing:
        raise ApiError(
            409,
            "history_mismatch",
            f"the chat holds {missing} more user message(s) than were sent before the new one",
        )


def _approvals(message: AnswerMessage) -> dict[str, bool]:
    """``{approval id: approved}`` of the assistant message's answered approvals."""
    out: dict[str, bool] = {}
    for part in message.parts:
        approval = part.get("approval")
        if part.get("state") == "approval-responded" and isinstance(approval, dict):
            ident, approved = approval.get("id"), approval.get("approved")
            if isinstance(ident, str) and isinstance(approved, bool):
                out[ident] = approved
    return out


def _encode(chunks: list[Chunk]) -> bytes:
    return b"".join(
        b"data: %s\n\n" % json.dumps(c, ensure_ascii=False, separators=(",", ":")).encode()
        for c in chunks
    )


async def _waiting(store: Store, event: dict[str, Any]) -> bool:
    """Whether the permission question ``event`` still waits for its answer."""
    turn_id, call_id = event.get("turn_id"), event.get("call_id")
    if not isinstance(turn_id, str):
        return False
    calls = await store.tool_calls(turn_id)
    return any(c.call_id == call_id and c.state == "awaiting-permission" for c in calls)


async def _ui_stream(
    service: Service,
    record: SessionRecord,
    head: str,
    start: int,
    *,
    after: int,
    heartbeat: float,
) -> AsyncIterator[bytes]:
    """The UI message stream of the response led by ``head``; chunks of events numbered up
    to ``after`` (those the client holds) are left out, ``start`` apart."""
    translator = UiMessageStream(head)
    steps = follow_response(service, record, head, start, patience=heartbeat)
    async with contextlib.aclosing(steps):
        async for step in steps:
            if isinstance(step, Idle):
                yield KEEP_ALIVE
                continue
            if isinstance(step, Cut):
                return
            if isinstance(step, Ended):
                yield _encode(translator.end(step.event)) + DONE
                return
            event = step.event
            chunks = translator.event(event)
            held = int(event.get("seq", 0)) <= after
            if held:
                chunks = [c for c in chunks if c["type"] == "start"]
            if chunks:
                yield _encode(chunks)
            if (
                event.get("type") == "permission_request"
                and not held
                and await _waiting(service.store, event)
            ):
                yield _encode(translator.pause()) + DONE
                return


def _streaming(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=HEADERS)


async def _owned(service: Service, chat_id: str, owner: str | None) -> SessionRecord | None:
    record = await service.store.get_session(chat_id)
    if record is not None and owner is not None and record.owner != owner:
        raise ApiError(404, "not_found", f"no chat {chat_id}")
    return record


# -- handlers ------------------------------------------------------------------------------------


async def post_chat(request: Request) -> Response:
    owner = principal(request)
    body = await json_body(request, ChatRequest)
    chat_id, messages = body.id, body.messages
    service = service_of(request)
    heartbeat = request.app.state.settings.heartbeat
    record = await _owned(service, chat_id, owner)
    last = messages[-1]
    if isinstance(last, AnswerMessage):
        if record is None:
            raise ApiError(404, "not_found", f"no chat {chat_id}")
        return await _answer_approvals(service, record, messages, last, heartbeat)
    content = last.text
    if record is None:
        if len(messages) > 1:
            raise ApiError(409, "history_mismatch", "a new chat cannot start with earlier messages")
        try:
            record = await service.open_session(chat_id, owner)
        except NotFoundError:  # another token's, made since it was read
            raise ApiError(404, "not_found", f"no chat {chat_id}") from None
    # (Also for a chat made just now: another request of the same token may have made it, and
    # even started its turn, since it was read.)
    _check_history(messages[:-1], _stored(await service.store.turns(record.id)))
    before = await log_position(service, record.id)
    try:
        turn_id = await service.post_message(record, content)
        assert isinstance(turn_id, str)  # (if_busy reject: a turn, never a queued message)
    except SessionBusyError as exc:
        message = f"turn {exc.turn_id} is running on this chat"
        raise ApiError(409, "session_busy", message, turn_id=exc.turn_id) from None
    except DroverError as exc:
        raise ApiError(409, "turn_not_started", str(exc)) from None
    stream = _ui_stream(service, record, turn_id, before + 1, after=0, heartbeat=heartbeat)
    return _streaming(stream)


async def _answer_approvals(
    service: Service,
    record: SessionRecord,
    messages: list[UserMessage | AnswerMessage],
    last: AnswerMessage,
    heartbeat: float,
) -> Response:
    answers = _approvals(last)
    if not answers:
        raise ApiError(
            409,
            "no_approval",
            "the last message is an answer of the chat answering no approval: send a user "
            "message, or the answer with its approvals given",
        )
    turns = await service.store.turns(record.id)
    _check_history(messages[:-1], _stored(turns))
    groups = responses(turns)
    if not groups or groups[-1][0].id != last.id:
        raise ApiError(
            409, "history_mismatch", "the approvals answer a message that is not the chat's latest"
        )
    head = last.id
    start = await start_seq(service.store, record.id, head)
    if start is None:
        raise ApiError(404, "not_found", "the chat's latest answer has no events")
    events, _ = await replay_response(service, record, head, start)
    asked = {
        str(e.get("request_id")): int(e.get("seq", 0))
        for e in events
        if e.get("type") == "permission_request"
    }
    unknown = sorted(set(answers) - set(asked))
    if unknown:
        message = f"no approval request {unknown[0][:64]!r} in the chat's latest answer"
        raise ApiError(409, "no_approval", message)
    for approval, approved in answers.items():
        # (one answered already — by another client, or denied on timeout — stays as it was)
        await service.decide_anywhere(record.id, approval, "allow" if approved else "deny")
    after = max(asked[a] for a in answers)
    return _streaming(_ui_stream(service, record, head, start, after=after, heartbeat=heartbeat))


async def resume_chat(request: Request) -> Response:
    chat_id = request.path_params["chat_id"]
    owner = principal(request)
    if not DOOR_ID.fullmatch(chat_id):
        raise ApiError(404, "not_found", "no such chat")
    service = service_of(request)
    record = await service.store.get_session(chat_id)
    if record is None or (owner is not None and record.owner != owner):
        return Response(status_code=204)  # (another token's chat: as good as none)
    running = await service.any_running_turn_id(record.id)
    if running is None:
        return Response(status_code=204)
    group = await group_of(service.store, record.id, running)
    start = None if group is None else await start_seq(service.store, record.id, group[0].id)
    if group is None or start is None:
        return Response(status_code=204)
    heartbeat = request.app.state.settings.heartbeat
    return _streaming(_ui_stream(service, record, group[0].id, start, after=0, heartbeat=heartbeat))
