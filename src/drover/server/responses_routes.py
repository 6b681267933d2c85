"""The OpenAI Responses door: ``POST /v1/responses``, ``GET /v1/responses/{id}`` (poll, or
``?stream=true&starting_after=N`` to resume the stream), ``GET /v1/responses/{id}/input_items``,
``POST /v1/responses/{id}/cancel`` and ``DELETE /v1/responses/{id}``, answered with
:mod:`.responses_api`'s events and objects. It is where a framework that speaks the Responses
API (the OpenAI Agents SDK, pydantic-ai, ``@ai-sdk/openai``) gets drover's agent as its model.

A response is a drover turn (:mod:`.responses_api` gives the mapping). ``POST`` takes what
maps to one (:mod:`.responses_input`: the fields, the input, its history) and runs it where
it belongs: after ``previous_response_id`` (the latest response of its conversation: drover
does not branch), on ``conversation`` (a session id), on the conversation the input's history
names by its items' ids, or on a new session. Every turn runs in the background, whatever the
client asks; the request answers with the response's events (``stream``), with the Response
as it starts (``background``), or else with the Response once it ended — white space before
the JSON for each heartbeat meanwhile, so a proxy sees the connection alive. A client that
drops the request loses nothing: the response goes on and is retrieved by its id.

Every stream, the answer to a ``POST`` as a resume, is the response's events from its start
(:func:`drover.server.doors.follow_response`), numbered from drover's own numbers and served
after ``starting_after``. When ``starting_after`` names a point the journal cannot continue
from exactly — a number a crash lost, or one inside text the log holds redacted — the whole
stream is served again from ``response.created``: the analogue of the SSE stream's ``reset``.
A stream ends after the response's terminal event (then ``data: [DONE]``).

A response's input items are its user message. Deleting a response rewinds it (its turns are
kept in the journal, marked rewound; files stay as they are): only a conversation's latest
response, once it ended, so the conversation goes on from before it; a deleted response is
not found any more.
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
from drover.server.auth import principal
from drover.server.bodies import empty_body, json_body, query_of
from drover.server.doors import (
    DONE,
    DOOR_ID,
    KEEP_ALIVE,
    Cut,
    Ended,
    Idle,
    follow_response,
    log_position,
    replay_response,
    responses,
    service_of,
    start_seq,
    user_text,
)
from drover.server.errors import ApiError
from drover.server.replay import continuable
from drover.server.responses_api import (
    MESSAGE_PREFIX,
    RESPONSE_PREFIX,
    SEQ_STRIDE,
    ResponseStream,
)
from drover.server.responses_input import (
    Posted,
    check_history,
    mismatch,
    named_turn,
    read_request,
)
from drover.server.responses_request import ItemsQuery, ResponsesRequest, RetrieveQuery
from drover.server.service import NoRunningTurnError, NotFoundError, Service

#: What a non-streamed answer sends for each heartbeat until the response ends (JSON allows
#: white space before its value).
_STILL_RUNNING = b" "


def _turn_id(response_id: str) -> str:
    ident = response_id.removeprefix(RESPONSE_PREFIX)
    if not response_id.startswith(RESPONSE_PREFIX) or not DOOR_ID.fullmatch(ident):
        raise ApiError(404, "not_found", "no such response")
    return ident


async def _groups(service: Service, session_id: str) -> list[list[TurnRecord]]:
    """The session's responses, in order; a deleted (rewound) one is none any more."""
    return responses([turn for turn in await service.store.turns(session_id) if not turn.rewound])


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
    for group in await _groups(service, record.id):
        if group[0].id == turn_id:
            return record, group
    raise missing


async def _latest(
    service: Service, response_id: str, owner: str | None, *, instead: str
) -> tuple[SessionRecord, list[TurnRecord]]:
    """:func:`_response`, which must be the latest of its conversation (409 otherwise:
    ``instead`` says what drover does)."""
    record, group = await _response(service, response_id, owner)
    if (await _groups(service, record.id))[-1][0].id != group[0].id:
        raise ApiError(
            409,
            "not_latest",
            f"{response_id[:160]} is not the latest response of its conversation: {instead}",
        )
    return record, group


async def _base(service: Service, record: SessionRecord, head: TurnRecord) -> dict[str, Any]:
    """The fixed fields of a response's object."""
    previous = None
    for group in await _groups(service, record.id):
        if group[0].id == head.id:
            break
        previous = f"{RESPONSE_PREFIX}{group[0].id}"
    return {
        "id": f"{RESPONSE_PREFIX}{head.id}",
        "created_at": int(head.created_at),  # (whole seconds: the API's type)
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


async def _where(
    service: Service, body: ResponsesRequest, history: list[Posted], owner: str | None
) -> SessionRecord:
    """The session a new response runs on."""
    previous, ident = body.previous_response_id, body.conversation_id
    if previous is not None:
        instead = "drover continues a conversation from its end"
        return (await _latest(service, previous, owner, instead=instead))[0]
    if ident is not None:
        try:
            return await service.session(ident, owner)
        except NotFoundError:
            raise ApiError(404, "not_found", f"no conversation {ident}") from None
    named = named_turn(history)
    if named is not None:
        turn = await service.store.get_turn(named)
        with contextlib.suppress(NotFoundError):
            if turn is not None:
                return await service.session(turn.session_id, owner)
        raise mismatch("the input's items name a response of no conversation of this token's")
    if history:
        raise mismatch(
            "the input holds earlier items, but none names a response of drover's (by its "
            "id): continue a conversation with previous_response_id or conversation"
        )
    return await service.create_session(owner)


async def _until_ended(
    service: Service, record: SessionRecord, head: TurnRecord, start: int, *, heartbeat: float
) -> AsyncIterator[bytes]:
    """The Response once it ended, after white space for each heartbeat until then (or as it
    stands when the server closes the stream)."""
    base = await _base(service, record, head)
    while True:
        translator = ResponseStream(base)
        steps = follow_response(service, record, head.id, start, patience=heartbeat)
        async with contextlib.aclosing(steps):
            async for step in steps:
                if isinstance(step, Idle):
                    yield _STILL_RUNNING
                elif isinstance(step, Cut):
                    break  # (fell behind: read it again, from the journal)
                elif isinstance(step, Ended):
                    translator.end(step.event)
                    yield _json(translator.response())
                    return
                else:
                    translator.event(step.event)
            else:
                yield _json(translator.response())
                return


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# -- handlers ------------------------------------------------------------------------------------


async def create(request: Request) -> Response:
    owner = principal(request)
    body = await json_body(request, ResponsesRequest)
    asked = read_request(body)
    service = service_of(request)
    record = await _where(service, body, asked.history, owner)
    if asked.history:
        check_history(asked.history, await _groups(service, record.id))
    before = await log_position(service, record.id)
    try:
        turn_id = await service.post_message(record, asked.text)
        assert isinstance(turn_id, str)  # (if_busy reject: a turn, never a queued message)
    except SessionBusyError as exc:
        message = f"response {RESPONSE_PREFIX}{exc.turn_id} is in progress on this conversation"
        raise ApiError(409, "session_busy", message, turn_id=exc.turn_id) from None
    except DroverError as exc:
        raise ApiError(409, "turn_not_started", str(exc)) from None
    head = await service.store.get_turn(turn_id)
    assert head is not None, "a started turn is recorded"
    heartbeat = request.app.state.settings.heartbeat
    if asked.stream:
        events = _stream(service, record, head, before + 1, after=None, heartbeat=heartbeat)
        return _streaming(events)
    if asked.wait:
        ended = _until_ended(service, record, head, before + 1, heartbeat=heartbeat)
        return StreamingResponse(ended, media_type="application/json")
    return JSONResponse(await _snapshot(service, record, head, before + 1))


async def response(request: Request) -> Response:
    if request.method == "DELETE":
        return await delete(request)
    return await retrieve(request)


async def retrieve(request: Request) -> Response:
    owner = principal(request)
    service = service_of(request)
    record, group = await _response(service, request.path_params["response_id"], owner)
    head = group[0]
    start = await start_seq(service.store, record.id, head.id)
    if start is None:
        raise ApiError(404, "not_found", "the response has no events")
    asked = query_of(request, RetrieveQuery)
    if asked.stream != "true":
        return JSONResponse(await _snapshot(service, record, head, start))
    after = asked.starting_after
    if after is not None:
        seq = after // SEQ_STRIDE
        if seq >= start:
            rows = await service.store.events_after(record.id, max(seq - 1, 0), limit=4)
            if not continuable(seq, rows, service.hub.feed(record.id)):
                after = None  # (a point the journal lost: the whole stream again)
    heartbeat = request.app.state.settings.heartbeat
    return _streaming(_stream(service, record, head, start, after=after, heartbeat=heartbeat))


async def cancel(request: Request) -> Response:
    owner = principal(request)
    await empty_body(request)
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


async def delete(request: Request) -> Response:
    owner = principal(request)
    service = service_of(request)
    response_id = request.path_params["response_id"]
    instead = "delete a conversation's responses from its end"
    record, group = await _latest(service, response_id, owner, instead=instead)
    try:
        await service.rewind(record, group[0].id, files=False, force=False, dry_run=False)
    except SessionBusyError as exc:
        message = f"response {response_id[:160]} is in progress: cancel it first"
        raise ApiError(409, "session_busy", message, turn_id=exc.turn_id) from None
    except DroverError as exc:
        raise ApiError(409, "not_deleted", str(exc)) from None
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


async def input_items(request: Request) -> Response:
    owner = principal(request)
    service = service_of(request)
    _, group = await _response(service, request.path_params["response_id"], owner)
    head = group[0]
    text = user_text(head)
    items: list[dict[str, Any]] = []
    if text is not None:
        content = [{"type": "input_text", "text": text}]
        items.append(
            {
                "id": f"{MESSAGE_PREFIX}{head.id}_input",
                "type": "message",
                "role": "user",
                "status": "completed",
                "content": content,
            }
        )
    page_asked = query_of(request, ItemsQuery)
    if page_asked.order == "desc":
        items.reverse()
    at = 0
    after = page_asked.after
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(404, "not_found", f"no input item {after[:160]} in this response")
        at = ids.index(after) + 1
    page = items[at : at + page_asked.limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": at + len(page) < len(items),
        }
    )
