"""The OpenAI Responses door, background mode: ``POST /v1/responses``, ``GET
/v1/responses/{id}`` (poll, or ``?stream=true&starting_after=N`` to resume the stream) and
``POST /v1/responses/{id}/cancel``, answered with :mod:`.responses_api`'s events and objects.

A response is a drover turn (:mod:`.responses_api` gives the mapping). ``POST`` takes only
what maps to one: ``input`` — a string, or a list of one user message whose content is a
string or ``input_text`` parts —, ``background: true`` (drover's turns run in the background
whatever the client does), ``stream``, ``store`` (true: the journal keeps everything),
``model`` (any: the server's agent runs the turn, and its model is reported), and where it
runs: a new session, ``conversation`` (a session id) or ``previous_response_id`` (that
response's session — the latest response of it: drover does not branch). Everything else —
``instructions``, ``tools``, sampling settings, ``metadata``, other input items — is refused
with a 422 naming it.

Every stream, the answer to a ``POST`` as a resume, is the response's events from its start
(:func:`drover.server.doors.follow_response`), numbered from drover's own numbers and served
after ``starting_after``. When ``starting_after`` names a point the journal cannot continue
from exactly — a number a crash lost, or one inside text the log holds redacted — the whole
stream is served again from ``response.created``: the analogue of the SSE stream's ``reset``.
A stream ends after the response's terminal event (then ``data: [DONE]``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from drover.errors import DroverError, SessionBusyError
from drover.journal.records import SessionRecord, TurnRecord
from drover.messages import blank
from drover.server.auth import principal
from drover.server.doors import (
    DONE,
    DOOR_ID,
    KEEP_ALIVE,
    Cut,
    Ended,
    Idle,
    follow_response,
    group_of,
    invalid,
    log_position,
    replay_response,
    responses,
    service_of,
    start_seq,
)
from drover.server.errors import ApiError
from drover.server.replay import continuable
from drover.server.responses_api import RESPONSE_PREFIX, SEQ_STRIDE, ResponseStream
from drover.server.routes import MAX_CONTENT, json_body
from drover.server.service import NoRunningTurnError, NotFoundError, Service

#: What a request may hold (each is checked below); the rest of the Responses API's fields are
#: refused by name.
_FIELDS: dict[str, type] = {
    "model": str,
    "input": object,
    "background": bool,
    "stream": bool,
    "store": bool,
    "previous_response_id": object,
    "conversation": object,
    "stream_options": dict,
}
_REFUSED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_logprobs",
    "reasoning",
    "text",
    "truncation",
    "metadata",
    "include",
    "prompt",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "user",
)
_TAKEN = "model, input, background, stream, store, conversation, previous_response_id"


def _input_text(value: Any) -> str:
    """The user's text: ``input`` as a string, or as a list of one user message."""
    if isinstance(value, list):
        if len(value) != 1 or not isinstance(value[0], dict):
            raise invalid(
                "input must be one user message: drover keeps the conversation (continue it "
                "with previous_response_id or conversation)"
            )
        item = value[0]
        if item.get("type", "message") != "message" or item.get("role") != "user":
            raise invalid(
                "input's item must be a user message (drover runs its own tools and keeps "
                "its own history)"
            )
        unknown = sorted(set(item) - {"type", "role", "content"})
        if unknown:
            raise invalid(f"unsupported field in the input message: {unknown[0]}")
        content = item.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "input_text":
                    kind = part.get("type") if isinstance(part, dict) else part
                    raise invalid(f"only input_text content is taken, not {str(kind)[:40]!r}")
                if not isinstance(part.get("text"), str) or set(part) != {"type", "text"}:
                    raise invalid('an input_text part is {"type": "input_text", "text"}')
                texts.append(part["text"])
            value = "\n".join(texts)
        else:
            value = content
    if not isinstance(value, str) or blank(value):
        raise invalid("input must be a non-empty string or a user message")
    if len(value) > MAX_CONTENT:
        raise ApiError(413, "body_too_large", f"input is over {MAX_CONTENT} characters")
    return value


def _turn_id(response_id: str) -> str:
    ident = response_id.removeprefix(RESPONSE_PREFIX)
    if not response_id.startswith(RESPONSE_PREFIX) or not DOOR_ID.fullmatch(ident):
        raise ApiError(404, "not_found", "no such response")
    return ident


async def _response(
    service: Service, response_id: str, owner: str | None
) -> tuple[SessionRecord, list[TurnRecord]]:
    """The session and turns of a response this token may see; 404 otherwise."""
    turn_id = _turn_id(response_id)
    turn = await service.store.get_turn(turn_id)
    missing = ApiError(404, "not_found", f"no response {response_id[:160]}")
    if turn is None:
        raise missing
    try:
        record = await service.session(turn.session_id, owner)
    except NotFoundError:
        raise missing from None
    group = await group_of(service.store, record.id, turn_id)
    if group is None or group[0].id != turn_id:
        raise missing
    return record, group


async def _base(service: Service, record: SessionRecord, head: TurnRecord) -> dict[str, Any]:
    """The fixed fields of a response's object."""
    previous = None
    for group in responses(await service.store.turns(record.id)):
        if group[0].id == head.id:
            break
        previous = f"{RESPONSE_PREFIX}{group[0].id}"
    return {
        "id": f"{RESPONSE_PREFIX}{head.id}",
        "created_at": head.created_at,
        "model": record.model,
        "conversation": {"id": record.id},
        "previous_response_id": previous,
    }


async def _snapshot(
    service: Service, record: SessionRecord, head: TurnRecord, start: int
) -> dict[str, Any]:
    translator = ResponseStream(await _base(service, record, head))
    events, ended = await replay_response(service, record, head.id, start)
    for event in events:
        translator.event(event)
    if ended is not None:
        translator.end(ended.event)
    return translator.response()


def _sse(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


async def _stream(
    service: Service,
    record: SessionRecord,
    head: TurnRecord,
    start: int,
    *,
    after: int | None,
    heartbeat: float,
) -> AsyncIterator[bytes]:
    """The response's events numbered above ``after`` (None: all), until it ends."""
    translator = ResponseStream(await _base(service, record, head))
    floor = -1 if after is None else after
    steps = follow_response(service, record, head.id, start, patience=heartbeat)
    async with contextlib.aclosing(steps):
        async for step in steps:
            if isinstance(step, Idle):
                yield KEEP_ALIVE
                continue
            if isinstance(step, Cut):
                return
            ended = isinstance(step, Ended)
            events = translator.end(step.event) if ended else translator.event(step.event)
            chunk = b"".join(_sse(e) for e in events if e["sequence_number"] > floor)
            if chunk:
                yield chunk
            if ended:
                yield DONE
                return


def _streaming(body: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


async def _where(service: Service, data: dict[str, Any], owner: str | None) -> SessionRecord:
    """The session a new response runs on."""
    previous, conversation = data.get("previous_response_id"), data.get("conversation")
    if previous is not None and not isinstance(previous, str):
        raise invalid("previous_response_id must be a response id")
    if previous is not None and conversation is not None:
        raise invalid("give previous_response_id or conversation, not both")
    if previous is not None:
        record, group = await _response(service, previous, owner)
        last = await service.store.last_turn(record.id)
        latest = await group_of(service.store, record.id, last.id) if last else None
        if latest is None or latest[0].id != group[0].id:
            raise ApiError(
                409,
                "not_latest",
                f"{previous[:160]} is not the latest response of its conversation: drover "
                "continues a conversation from its end",
            )
        return record
    if conversation is not None:
        ident = conversation.get("id") if isinstance(conversation, dict) else conversation
        extra = isinstance(conversation, dict) and set(conversation) != {"id"}
        if extra or not isinstance(ident, str) or not DOOR_ID.fullmatch(ident):
            raise invalid('conversation must be a session id (or {"id": ...})')
        try:
            return await service.session(ident, owner)
        except NotFoundError:
            raise ApiError(404, "not_found", f"no conversation {ident}") from None
    return await service.create_session(owner)


# -- handlers ------------------------------------------------------------------------------------


async def create(request: Request) -> Response:
    owner = principal(request)
    data = await json_body(request, {**_FIELDS, **dict.fromkeys(_REFUSED, object)})
    refused = sorted(set(data) & set(_REFUSED))
    if refused:
        raise invalid(
            f"{refused[0]} is not supported: the server's agent decides it (drover takes {_TAKEN})"
        )
    if data.get("background") is not True:
        raise invalid("background must be true: drover runs every response in the background")
    if data.get("store") is False:
        raise invalid("store must be true: drover's journal keeps every response")
    if not isinstance(data.get("model"), str) or not data["model"]:
        raise invalid("model is required (any name: the server's agent runs the turn)")
    options = data.get("stream_options", {})
    if set(options) - {"include_obfuscation"} or not all(
        isinstance(v, bool) for v in options.values()
    ):
        raise invalid("stream_options takes only include_obfuscation, true or false")
    text = _input_text(data.get("input"))
    service = service_of(request)
    record = await _where(service, data, owner)
    before = await log_position(service, record.id)
    try:
        turn_id = await service.post_message(record, text)
        assert isinstance(turn_id, str)  # (if_busy reject: a turn, never a queued message)
    except SessionBusyError as exc:
        message = f"response {RESPONSE_PREFIX}{exc.turn_id} is in progress on this conversation"
        raise ApiError(409, "session_busy", message, turn_id=exc.turn_id) from None
    except DroverError as exc:
        raise ApiError(409, "turn_not_started", str(exc)) from None
    head = await service.store.get_turn(turn_id)
    assert head is not None, "a started turn is recorded"
    if data.get("stream"):
        heartbeat = request.app.state.settings.heartbeat
        body = _stream(service, record, head, before + 1, after=None, heartbeat=heartbeat)
        return _streaming(body)
    return JSONResponse(await _snapshot(service, record, head, before + 1))


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false"):
        raise ApiError(400, "invalid_request", f"{name} must be true or false")
    return value == "true"


async def retrieve(request: Request) -> Response:
    owner = principal(request)
    service = service_of(request)
    record, group = await _response(service, request.path_params["response_id"], owner)
    head = group[0]
    start = await start_seq(service.store, record.id, head.id)
    if start is None:
        raise ApiError(404, "not_found", "the response has no events")
    if not _flag(request, "stream"):
        return JSONResponse(await _snapshot(service, record, head, start))
    after = None
    raw = request.query_params.get("starting_after")
    if raw is not None:
        if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
            raise ApiError(400, "invalid_request", "starting_after must be a whole number ≥ 0")
        after = int(raw)
        seq = after // SEQ_STRIDE
        if seq >= start:
            rows = await service.store.events_after(record.id, max(seq - 1, 0), limit=4)
            if not continuable(seq, rows, service.hub.feed(record.id)):
                after = None  # (a point the journal lost: the whole stream again)
    heartbeat = request.app.state.settings.heartbeat
    return _streaming(_stream(service, record, head, start, after=after, heartbeat=heartbeat))


async def cancel(request: Request) -> Response:
    owner = principal(request)
    await json_body(request, {})
    service = service_of(request)
    response_id = request.path_params["response_id"]
    record, group = await _response(service, response_id, owner)
    head = group[0]
    start = await start_seq(service.store, record.id, head.id)
    if start is None:
        raise ApiError(404, "not_found", "the response has no events")
    running = await service.any_running_turn_id(record.id)
    if running is not None and running in {turn.id for turn in group}:
        with contextlib.suppress(NoRunningTurnError):  # (it ended meanwhile)
            await service.interrupt(record.id)
        # Until the turn has recorded how it ended: the answer is the cancelled response.
        steps = follow_response(service, record, head.id, start, patience=3600.0)
        async with contextlib.aclosing(steps):
            async for step in steps:
                if isinstance(step, Ended | Cut):
                    break
    snapshot = await _snapshot(service, record, head, start)
    if snapshot["status"] not in ("cancelled", "in_progress"):
        raise ApiError(
            409,
            "not_running",
            f"{response_id[:160]} is not in progress (it is {snapshot['status']})",
        )
    return JSONResponse(snapshot)
