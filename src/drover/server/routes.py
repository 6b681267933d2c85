"""The HTTP handlers: request validation, ownership, and the JSON answers.

Every failure is an :class:`ApiError` turned into ``{"error": {"code", "message"}}`` with a
4xx status. Bodies are read with a size limit before they are parsed; unknown fields are
refused, so a typo is an error instead of a silent default.
"""

from __future__ import annotations

import re
from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse

from drover.agent.rewind import RewindConflict, RewindPlan, RewindResult
from drover.core.events import Decision
from drover.core.messages import blank
from drover.errors import DroverError, SessionBusyError
from drover.journal.records import QueuedMessage, TurnRecord
from drover.journal.rules import user_title
from drover.runtime.queue import IfBusy
from drover.server.auth import principal
from drover.server.bodies import MAX_CONTENT, empty_body, json_body
from drover.server.config import ServerSettings
from drover.server.errors import ApiError
from drover.server.service import NoRunningTurnError, NotFoundError, Service, WebhookRefused
from drover.server.snapshot import session_summary
from drover.server.sse import event_stream

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_DECISIONS: tuple[str, ...] = get_args(Decision)
_IF_BUSY: tuple[str, ...] = get_args(IfBusy)
MAX_LIST = 200


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


def _nonnegative(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ApiError(400, "invalid_request", f"{what} must be a whole number ≥ 0")
    return int(text)


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
    await json_body(request, {})
    record = await _service(request).create_session(owner)
    return JSONResponse({"id": record.id}, status_code=201)


async def list_sessions(request: Request) -> Response:
    owner = principal(request)
    limit = MAX_LIST
    if "limit" in request.query_params:
        limit = _nonnegative(request.query_params["limit"], "limit")
        if not 1 <= limit <= MAX_LIST:
            raise ApiError(400, "invalid_request", f"limit must be between 1 and {MAX_LIST}")
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
    data = await json_body(request, {"title": str})
    if "title" not in data:
        raise ApiError(422, "invalid_request", "title is required")
    try:
        title = user_title(data["title"])
    except ValueError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
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
    data = await json_body(request, {"content": str, "webhook": str, "if_busy": str})
    content = data.get("content")
    # Blank as the schema's \S pattern sees it (not str.strip's, which takes more for space).
    if not isinstance(content, str) or blank(content):
        raise ApiError(422, "invalid_request", "content must be a non-empty string")
    if len(content) > MAX_CONTENT:
        raise ApiError(413, "body_too_large", f"content is over {MAX_CONTENT} characters")
    if_busy = data.get("if_busy", "reject")
    if if_busy not in _IF_BUSY:
        raise ApiError(422, "invalid_request", f"if_busy must be one of {', '.join(_IF_BUSY)}")
    try:
        sent = await _service(request).post_message(
            record, content, request.headers, webhook=data.get("webhook"), if_busy=if_busy
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
        rule = request.query_params.get("rule")
        if rule is not None and not rule.strip():
            raise ApiError(400, "invalid_request", "rule must not be empty")
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
    data = await json_body(request, {"decision": str})
    decision = data.get("decision")
    if decision not in _DECISIONS:
        raise ApiError(422, "invalid_request", f"decision must be one of {', '.join(_DECISIONS)}")
    if not _ID.fullmatch(request_id) or not await _service(request).decide_anywhere(
        record.id, request_id, decision
    ):
        raise ApiError(404, "not_found", "no such permission request waiting for an answer")
    return JSONResponse({"request_id": request_id, "decision": decision})


async def events(request: Request) -> Response:
    record = await _session(request)
    after = 0
    header = request.headers.get("last-event-id")
    if header is not None and header.strip():
        after = _nonnegative(header.strip(), "Last-Event-ID")
    elif "after" in request.query_params:
        after = _nonnegative(request.query_params["after"], "after")
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
    data = await json_body(request, {"turn_id": str})
    turn_id = data.get("turn_id")
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
    fields = {"turn_id": str, "files": bool, "force": bool, "dry_run": bool}
    data = await json_body(request, fields)
    if "turn_id" not in data:
        raise ApiError(422, "invalid_request", "turn_id is required")
    turn = await _turn_of(request, record.id, data["turn_id"])
    if turn.rewound:
        raise ApiError(409, "already_rewound", f"turn {turn.id} was rewound already")
    try:
        done = await _service(request).rewind(
            record,
            turn.id,
            files=data.get("files", True),
            force=data.get("force", False),
            dry_run=data.get("dry_run", False),
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
