"""The journal's readers: ``drover sessions [--json]``, ``drover show ID [--json]``, ``drover
export ID [--format markdown|jsonl]`` and ``drover models`` (``rename`` and ``rm``, which
change it, are :mod:`drover.cli.manage`). Every ID may be any unique start of a session's id
(:mod:`drover.cli.session_ids`).

These commands answer in a new process each time, so what they import is most of what they
cost (issue #12: ≤ 200 ms on a journal of 10,000 sessions). On SQLite they work on the journal
on the calling thread, without an event loop or the store's worker thread: asyncio (with the
ssl, socket, subprocess and logging modules it loads) and concurrent.futures are never imported
by the readers. A test (tests/cli/test_journal_commands.py) keeps the list of what they load
short.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from drover.cli.session_ids import resolve_session
from drover.core.events import TERMINAL_TOOL_STATES
from drover.core.messages import message_to_dict
from drover.core.visible import visible
from drover.errors import DroverError
from drover.journal.owners import holder_gone
from drover.journal.protocol import Store
from drover.journal.records import ToolCallRecord, TurnRecord
from drover.journal.worker_log import worker_call_prefix
from drover.store import open_store
from drover.store.sql.dialect import SQLITE
from drover.store.sql.store import SqlStore
from drover.store.sqlite.connection import InlineSqliteConnection
from drover.store.sqlite.store import SqliteStore

if TYPE_CHECKING:  # drover.runtime.workers is the agent's machinery: not imported to read a journal
    from drover.runtime.workers import WorkerLogReader

T = TypeVar("T")


def _run_inline(work: Coroutine[Any, Any, T]) -> T:
    """The result of ``work``, which must finish without waiting on anything (every await in it
    ends in a call of an :class:`~drover.store.sqlite.connection.InlineSqliteConnection`)."""
    try:
        work.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    work.close()
    raise RuntimeError("a journal read waited for the event loop")


def on_journal(db: str | None, work: Callable[[Store], Coroutine[Any, Any, T]]) -> T:
    """``work`` run on the journal at ``db`` (or ``DROVER_DB``, or the default file); on
    SQLite on this thread, without an event loop."""
    store = open_store(db or os.environ.get("DROVER_DB"))
    if type(store) is SqliteStore:
        inline = SqlStore(
            SQLITE, InlineSqliteConnection(store.path, create_parent=store.create_parent)
        )
        return _run_inline(work(inline))
    import asyncio  # PostgreSQL: the driver is asynchronous

    return asyncio.run(work(store))


def print_models() -> int:
    from drover.config.settings import list_models, load_config

    config = load_config()
    for spec, source in list_models(config):
        print(f"{spec}\t{source}")
    return 0


#: How ``drover show`` explains an abandoned turn.
ABANDONED_NOTE = (
    "abandoned: recorded as running, but the process that ran it is gone (its lease expired "
    "or its pid is not running); the next run on this session ends it interrupted and resumes "
    "its work"
)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def abandoned(turn: TurnRecord) -> bool:
    """Whether ``turn`` is recorded ``running`` with nobody left to run it (killed with -9, a
    crash): the readers say so instead of calling it running, until recovery ends it."""
    return turn.status == "running" and holder_gone(turn.owner, turn.lease_expires_at, time.time())


def print_sessions(args: argparse.Namespace) -> int:
    return on_journal(args.db, lambda store: _print_sessions(store, args.limit, args.json))


async def _print_sessions(store: Store, limit: int, as_json: bool) -> int:
    async with store:
        listed = []
        for record in await store.list_sessions(limit=limit):
            turns = await store.turns(record.id)
            final = turns[-1] if turns else None
            listed.append((record, len(turns), final.status if final else None, _gone(final)))
    if as_json:
        rows = [
            {
                "id": record.id,
                "title": record.title,
                "model": record.model,
                "workdir": record.workdir,
                "created_at": record.created_at,
                "updated_at": record.updated_at,
                "turns": count,
                "last_status": last,
                "last_abandoned": gone,
            }
            for record, count, last, gone in listed
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not listed:
        print("no sessions yet")
    for record, count, last, gone in listed:
        when = _when(record.updated_at)
        status = "abandoned" if gone else last or "empty"
        _say(f"{record.id}  {when}  {count:>3} turns  {status:<11}  {record.title or ''}")
    return 0


def _gone(turn: TurnRecord | None) -> bool:
    return turn is not None and abandoned(turn)


async def session_report(store: WorkerLogReader, session_id: str) -> dict[str, Any]:
    """Everything the journal holds about a session, as JSON-ready data."""
    record = await store.get_session(session_id)
    if record is None:
        raise DroverError(f"no session {session_id} in this journal")
    turns_out: list[dict[str, Any]] = []
    workers = await _workers(store, session_id)
    worker_calls = {c["call_id"] for ws in workers.values() for w in ws for c in w["tool_calls"]}
    for turn in await store.turns(session_id):
        messages = await store.turn_messages(turn.id)
        calls = [c for c in await store.tool_calls(turn.id) if c.call_id not in worker_calls]
        turns_out.append(
            {
                "id": turn.id,
                "seq": turn.seq,
                "status": turn.status,
                "abandoned": abandoned(turn),
                "reason": turn.reason,
                "error": turn.error,
                "discarded": turn.discarded,
                "usage": turn.usage.to_dict() if turn.usage else None,
                "user_message": message_to_dict(turn.user_message, image_data=False)
                if turn.user_message
                else None,
                "messages": [
                    {**message_to_dict(m.message, image_data=False), "partial": m.partial}
                    for m in messages
                ],
                "tool_calls": [
                    {**_call_dict(c), "workers": workers.get(c.call_id, [])} for c in calls
                ],
            }
        )
    return {
        "id": record.id,
        "workdir": record.workdir,
        "model": record.model,
        "title": record.title,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "turns": turns_out,
    }


def _call_dict(call: ToolCallRecord) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "name": call.name,
        "state": call.state,
        "input": dict(call.input) if call.input is not None else None,
        "output": call.output,
        "is_error": call.is_error,
        "outcome_unknown": call.outcome_unknown,
    }


async def _workers(store: WorkerLogReader, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """The workers of each ``task`` call (by call id), from the event log: prompt, how each
    last ended, and its tool calls (stored under scoped ids, see ``drover.journal.worker_log``)."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for record in await store.events_after(session_id):
        payload = record.payload
        if payload.get("type") != "worker":
            continue
        inner, parent, index = (
            payload.get("event") or {},
            payload["parent_call_id"],
            payload["worker"],
        )
        worker = found.setdefault(parent, {}).setdefault(
            index,
            {"worker": index, "status": "running", "prompt": None, "answer": None, "usage": None},
        )
        kind = inner.get("type")
        if kind == "turn_started" and worker["prompt"] is None and inner.get("user_message"):
            worker["prompt"] = inner["user_message"]
        elif kind in ("done", "incomplete", "error"):
            worker["status"] = inner.get("status", kind)
            worker["answer"] = inner.get("text") if kind == "done" else inner.get("error")
            worker["usage"] = inner.get("usage")
    calls = await store.tool_calls(session_id=session_id)
    out: dict[str, list[dict[str, Any]]] = {}
    for parent, by_index in found.items():
        for index, worker in sorted(by_index.items()):
            prefix = worker_call_prefix(parent, index)
            worker["tool_calls"] = [_call_dict(c) for c in calls if c.call_id.startswith(prefix)]
            out.setdefault(parent, []).append(worker)
    return out


async def _report(store: Store, session_id: str) -> dict[str, Any]:
    async with store:
        return await session_report(store, await resolve_session(store, session_id))


def export_session(args: argparse.Namespace) -> int:
    from drover.cli.export import export_session as render

    report = on_journal(args.db, lambda store: _report(store, args.session_id))
    sys.stdout.write(render(report, args.format))
    return 0


def show_session(args: argparse.Namespace) -> int:
    report = on_journal(args.db, lambda store: _report(store, args.session_id))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    _say(f"session {report['id']}  model {report['model']}  in {report['workdir']}")
    for turn in report["turns"]:
        flag = " (discarded)" if turn["discarded"] else ""
        status = ABANDONED_NOTE if turn["abandoned"] else turn["status"]
        _say(f"\nturn {turn['seq']}: {status}{flag}")
        if turn["error"]:
            _say(f"  ended: {turn['reason']}: {turn['error']}")
        if turn["user_message"]:
            _say(f"  user: {_text(turn['user_message'])}")
        calls = {call["call_id"]: call for call in turn["tool_calls"]}
        for message in turn["messages"]:
            partial = " [partial]" if message["partial"] else ""
            text = _text(message)
            if text:
                _say(f"  {message['role']}{partial}: {text}")
            for block in message["content"]:
                if block.get("type") == "tool_use" and block.get("id") in calls:
                    _say(_call_line(calls.pop(block["id"]), turn["abandoned"]), code=True)
        # Calls cut off before their message was complete appear in no message.
        for call in calls.values():
            _say(_call_line(call, turn["abandoned"]), code=True)
    return 0


def _say(line: str, *, code: bool = False) -> None:
    """Print ``line`` with what the model and its tools wrote shown, never obeyed, by the
    terminal (:func:`~drover.core.visible.visible`; ``code`` for tool calls)."""
    print(visible(line, code=code))


def _call_line(call: dict[str, Any], abandoned: bool = False) -> str:
    note = " (outcome unknown)" if call["outcome_unknown"] else ""
    state = call["state"]
    if abandoned and state not in TERMINAL_TOOL_STATES:
        state = f"abandoned while {state}"  # nobody runs it any more
    lines = [f"  tool {call['name']} [{state}]{note}"]
    for worker in call.get("workers", ()):
        prompt = _text(worker["prompt"]) if worker["prompt"] else ""
        lines.append(f"    worker {worker['worker']} [{worker['status']}]: {prompt}")
        lines.extend(f"  {_call_line(inner)}" for inner in worker["tool_calls"])
        if worker["answer"]:
            lines.append(f"      answer: {_short(worker['answer'])}")
    return "\n".join(lines)


def _text(message: dict[str, Any]) -> str:
    return _short(
        " ".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
    )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 100 else text[:99] + "…"
