"""``drover sessions``, ``drover show ID [--json]`` and ``drover models``: reading, not running."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from drover.config import list_models, load_config
from drover.errors import DroverError
from drover.messages import message_to_dict
from drover.store import open_store
from drover.store.base import Store


def print_models() -> int:
    config = load_config()
    for spec, source in list_models(config):
        print(f"{spec}\t{source}")
    return 0


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


async def print_sessions(args: argparse.Namespace) -> int:
    store = open_store(args.db or os.environ.get("DROVER_DB"))
    async with store:
        sessions = await store.list_sessions(limit=args.limit)
        if not sessions:
            print("no sessions yet")
        for record in sessions:
            turns = await store.turns(record.id)
            last = turns[-1].status if turns else "empty"
            title = record.title or ""
            when = _when(record.updated_at)
            print(f"{record.id}  {when}  {len(turns):>3} turns  {last:<11}  {title}")
    return 0


async def session_report(store: Store, session_id: str) -> dict[str, Any]:
    """Everything the journal holds about a session, as JSON-ready data."""
    record = await store.get_session(session_id)
    if record is None:
        raise DroverError(f"no session {session_id} in this journal")
    turns_out: list[dict[str, Any]] = []
    for turn in await store.turns(session_id):
        messages = await store.turn_messages(turn.id)
        calls = await store.tool_calls(turn.id)
        turns_out.append(
            {
                "id": turn.id,
                "seq": turn.seq,
                "status": turn.status,
                "reason": turn.reason,
                "error": turn.error,
                "discarded": turn.discarded,
                "usage": turn.usage.to_dict() if turn.usage else None,
                "user_message": message_to_dict(turn.user_message) if turn.user_message else None,
                "messages": [
                    {**message_to_dict(m.message), "partial": m.partial} for m in messages
                ],
                "tool_calls": [
                    {
                        "call_id": c.call_id,
                        "name": c.name,
                        "state": c.state,
                        "input": dict(c.input) if c.input is not None else None,
                        "output": c.output,
                        "is_error": c.is_error,
                        "outcome_unknown": c.outcome_unknown,
                    }
                    for c in calls
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


async def show_session(args: argparse.Namespace) -> int:
    store = open_store(args.db or os.environ.get("DROVER_DB"))
    async with store:
        report = await session_report(store, args.session_id)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    print(f"session {report['id']}  model {report['model']}  in {report['workdir']}")
    for turn in report["turns"]:
        flag = " (discarded)" if turn["discarded"] else ""
        print(f"\nturn {turn['seq']}: {turn['status']}{flag}")
        if turn["error"]:
            print(f"  ended: {turn['reason']}: {turn['error']}")
        if turn["user_message"]:
            print(f"  user: {_text(turn['user_message'])}")
        calls = {call["call_id"]: call for call in turn["tool_calls"]}
        for message in turn["messages"]:
            partial = " [partial]" if message["partial"] else ""
            text = _text(message)
            if text:
                print(f"  {message['role']}{partial}: {text}")
            for block in message["content"]:
                if block.get("type") == "tool_use" and block.get("id") in calls:
                    print(_call_line(calls.pop(block["id"])))
        # Calls cut off before their message was complete appear in no message.
        for call in calls.values():
            print(_call_line(call))
    return 0


def _call_line(call: dict[str, Any]) -> str:
    note = " (outcome unknown)" if call["outcome_unknown"] else ""
    return f"  tool {call['name']} [{call['state']}]{note}"


def _text(message: dict[str, Any]) -> str:
    text = " ".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
    text = " ".join(text.split())
    return text if len(text) <= 100 else text[:99] + "…"
