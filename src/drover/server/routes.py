"""The HTTP handlers: request validation, ownership, and the JSON answers.

Every failure is an :class:`ApiError` turned into ``{"error": {"code", "message"}}`` with a
4xx status. Bodies are read with a size limit before they are parsed; unknown fields are
refused, so a typo is an error instead of a silent default.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse

from drover.agent.rewind import RewindConflict, RewindPlan, RewindResult
from drover.errors import DroverError, SessionBusyError
from drover.journal.records import QueuedMessage, TurnRecord
from drover.server import api_models as m
from drover.server.auth import principal
from drover.server.bodies import empty_body, headers_of, json_body, query_of
from drover.server.config import ServerSettings
from drover.server.errors import ApiError
from drover.server.service import NoRunningTurnError, NotFoundError, Service, WebhookRefused
from drover.server.snapshot import session_summary
from drover.server.sse import event_stream

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


async def _session(request: Request) -> Any:
    session_id = request.path_params["session_id"]
    owner = principal(request)
    if not _ID.fullmatch(session_id):
        raise ApiError(404, "not_found", "no such session")
    try:
        return await _service(request).session(session_id, owner)
    except NotFoundError:
        raise ApiError(404, "not_found", f"no session {session_id}") from None


# -- handlers ------------------------------------------------------------------------------------


async def index(request: Request) -> Response:
    page = _settings(request).static_dir / "index.html"
    if not page.is_file():
        raise ApiError(404, "not_found", "the web page is not installed")
    return FileResponse(page, media_type="text/html; charset=utf-8")


async def sessions(request: Request) -> Response:
    if request.method == "POST":
        return await create_session(request)
    return await list_sessions(request)


async def create_session(request: Request) -> Response:
    owner = principal(request)
    await json_body(request, m.Empty)
    record = await _service(request).create_session(owner)
    return JSONResponse({"id": record.id}, status_code=201)


async def list_sessions(request: Request) -> Response:
    owner = principal(request)
    limit = query_of(request, m.ListQuery).limit
    service = _service(request)
    records = await service.list_sessions(owner, limit)
    running = await service.running_turn_ids([r.id for r in records])
    return JSONResponse({"sessions": [session_summary(r, running.get(r.id)) for r in records]})


async def session(request: Request) -> Response:
    """The transcript (GET), a new title (PATCH ``{"title"}``), or the session deleted
    (DELETE; refused while a turn of it runs, in any process)."""
    if request.method == "PATCH":
        return await rename_session(request)
    if request.method == "DELETE":
        return await delete_session(request)
    record = await _session(request)
    return JSONResponse(await _service(request).snapshot(record))


async def rename_session(request: Request) -> Response:
    record = await _session(request)
    title = (await json_body(request, m.Rename)).title
    service = _service(request)
    renamed = await service.rename(record, title)
    return JSONResponse(session_summary(renamed, await service.any_running_turn_id(record.id)))


async def delete_session(request: Request) -> Response:
    record = await _session(request)
    try:
        await _service(request).delete(record)
    except SessionBusyError as exc:
        raise _busy(exc, "interrupt it first") from None
    return JSONResponse({"id": record.id, "deleted": True})


async def post_message(request: Request) -> Response:
    record = await _session(request)
    body = await json_body(request, m.PostMessage)
    try:
        sent = await _service(request).post_message(
            record, body.content, request.headers, webhook=body.webhook, if_busy=body.if_busy
        )
    except WebhookRefused as exc:
        raise ApiError(422, "webhook_refused", str(exc)) from None
    except SessionBusyError as exc:
        raise _busy(exc) from None
    except DroverError as exc:
        raise ApiError(409, "turn_not_started", str(exc)) from None
    if isinstance(sent, QueuedMessage):
        return JSONResponse({"queued": True, "message_id": sent.id}, status_code=202)
    return JSONResponse({"turn_id": sent}, status_code=202)


def _busy(exc: SessionBusyError, advice: str = "") -> ApiError:
    """409 ``session_busy``, naming the running turn (none: the session is held for a moment
    by a rewind or a message replacing its turn, :class:`~drover.errors.SessionHeldError`)."""
    if not exc.turn_id:
        return ApiError(409, "session_busy", str(exc))
    message = f"turn {exc.turn_id} is running on this session" + (f": {advice}" if advice else "")
    return ApiError(409, "session_busy", message, turn_id=exc.turn_id)


async def cancel_queued(request: Request) -> Response:
    """Cancel a queued message (it stays in the journal, marked cancelled)."""
    record = await _session(request)
    message_id = request.path_params["message_id"]
    if not _ID.fullmatch(message_id) or not await _service(request).cancel_queued(
        record, message_id
    ):
        raise ApiError(404, "not_found", "no such message waiting in the queue")
    return JSONResponse({"message_id": message_id, "cancelled": True})


async def interrupt(request: Request) -> Response:
    record = await _session(request)
    await empty_body(request)
    try:
        turn_id = await _service(request).interrupt(record.id)
    except NoRunningTurnError as exc:
        raise ApiError(409, "no_running_turn", str(exc)) from None
    return JSONResponse({"turn_id": turn_id}, status_code=202)


async def permissions(request: Request) -> Response:
    """The session's mode, the rules that apply and its grants (GET), or withdraw grants
    (DELETE, one with ``?rule=``)."""
    record = await _session(request)
    service = _service(request)
    if request.method == "DELETE":
        rule = query_of(request, m.RevokeQuery).rule
        return JSONResponse({"revoked": await service.revoke(record, rule)})
    grants = [{"rule": g.rule, "created_at": g.created_at} for g in await service.grants(record)]
    agent = service.agent
    rules = [
        {"kind": kind, "rule": rule.text, "source": rule.source}
        for kind, kept in (("deny", agent.deny_rules), ("allow", agent.allow_rules))
        for rule in kept
    ]
    return JSONResponse({"mode": agent.permission_mode, "rules": rules, "grants": grants})


async def decide(request: Request) -> Response:
    record = await _session(request)
    request_id = request.path_params["request_id"]
    decision = (await json_body(request, m.Decide)).decision
    if not _ID.fullmatch(request_id) or not await _service(request).decide_anywhere(
        record.id, request_id, decision
    ):
        raise ApiError(404, "not_found", "no such permission request waiting for an answer")
    return JSONResponse({"request_id": request_id, "decision": decision})


async def events(request: Request) -> Response:
    record = await _session(request)
    header = headers_of(request, m.EventsHeaders).last_event_id
    after = int(header) if header else query_of(request, m.EventsQuery).after
    body = event_stream(_service(request), record, after, heartbeat=_settings(request).heartbeat)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


async def metrics(request: Request) -> Response:
    """The process's metrics in the Prometheus text format (behind the token, when one is
    set)."""
    principal(request)
    kept = _service(request).metrics
    if kept is None:
        raise ApiError(404, "not_found", "this server keeps no metrics")
    from drover.telemetry.metrics import CONTENT_TYPE

    return Response(kept.exposition(), media_type=CONTENT_TYPE)


# -- fork and rewind ------------------------------------------------------------------------------


async def fork(request: Request) -> Response:
    """A new session with the history up to and including ``turn_id`` (default: all)."""
    record = await _session(request)
    turn_id = (await json_body(request, m.Fork)).turn_id
    if turn_id is not None:
        await _turn_of(request, record.id, turn_id)
    try:
        forked = await _service(request).fork(record, turn_id)
    except SessionBusyError as exc:
        message = f"turn {exc.turn_id} is still running: fork at an earlier turn"
        raise ApiError(409, "session_busy", message, turn_id=exc.turn_id) from None
    return JSONResponse(
        {"id": forked.id, "forked_from": record.id, "forked_turn": forked.forked_turn},
        status_code=201,
    )


async def rewind(request: Request) -> Response:
    """Undo ``turn_id`` and the turns after it (with ``files``, what they wrote to files)."""
    record = await _session(request)
    body = await json_body(request, m.Rewind)
    turn = await _turn_of(request, record.id, body.turn_id)
    if turn.rewound:
        raise ApiError(409, "already_rewound", f"turn {turn.id} was rewound already")
    try:
        done = await _service(request).rewind(
            record, turn.id, files=body.files, force=body.force, dry_run=body.dry_run
        )
    except SessionBusyError as exc:
        raise _busy(exc, "interrupt it first") from None
    except RewindConflict as exc:
        raise ApiError(409, "rewind_conflict", str(exc), paths=list(exc.paths)) from None
    except DroverError as exc:
        raise ApiError(409, "not_rewound", str(exc)) from None
    return JSONResponse(rewind_json(done))


async def _turn_of(request: Request, session_id: str, turn_id: str) -> TurnRecord:
    turn = None
    if _ID.fullmatch(turn_id):
        turn = await _service(request).store.get_turn(turn_id)
    if turn is None or turn.session_id != session_id:
        raise ApiError(404, "not_found", f"no turn {turn_id} in session {session_id}")
    return turn


def rewind_json(done: RewindPlan | RewindResult) -> dict[str, Any]:
    """A rewind's answer: what it did, or (a dry run) what it would do."""
    if isinstance(done, RewindResult):
        return {
            "session_id": done.session_id,
            "turn_id": done.turn_id,
            "rewound": list(done.rewound),
            "restored": list(done.restored),
            "unrestorable": list(done.unrestorable),
            "not_rewindable": list(done.not_rewindable),
        }
    return {
        "session_id": done.session_id,
        "turn_id": done.turn_id,
        "dry_run": True,
        "turns": list(done.turns),
        "prompt": done.prompt,
        "files": [
            {"path": f.shown, "action": f.action, "conflict": f.conflict} for f in done.files
        ],
        "diff": done.diff(),
        "unrestorable": list(done.unrestorable),
        "not_rewindable": list(done.not_rewindable),
    }


async def openapi(request: Request) -> Response:
    from drover.server.openapi import schema

    return JSONResponse(schema())
