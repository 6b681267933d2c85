"""The REPL's session commands, the same in both of its modes: ``/rename TITLE`` (the open
session), ``/rm ID`` or ``/delete ID`` (another stored session, after a yes to a question),
``/export [FILE]`` (the open session, as Markdown, or JSON Lines when FILE ends in
``.jsonl``). Each answers with the lines to print. IDs may be any unique start of an id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from drover.agent.agent import Agent
from drover.agent.session import Session
from drover.cli.admin import session_report
from drover.cli.export import Format, export_session
from drover.cli.session_ids import resolve_session
from drover.errors import DroverError
from drover.journal.rules import user_title

#: Asks the user a yes/no question; True for yes.
Confirm = Callable[[str], Awaitable[bool]]


async def rename_command(agent: Agent, session: Session, arg: str) -> list[str]:
    if not arg:
        return ["usage: /rename TITLE (the open session's new title)"]
    try:
        title = user_title(arg)
    except ValueError as exc:
        return [f"error: {exc}"]
    await agent.store.rename_session(session.id, title)
    return [f"renamed session {session.id}: {title}"]


async def remove_command(agent: Agent, session: Session, arg: str, confirm: Confirm) -> list[str]:
    if not arg or " " in arg:
        return ["usage: /rm ID (a stored session other than the open one; also /delete ID)"]
    session_id = await resolve_session(agent.store, arg)
    if session_id == session.id:
        return [
            f"{session_id} is the open session: open another one first (/clear starts a new "
            "one), or delete it after leaving with drover rm ID"
        ]
    record = await agent.store.get_session(session_id)
    turns = len(await agent.store.turns(session_id))
    title = f" “{record.title}”" if record is not None and record.title else ""
    question = (
        f"delete session {session_id}{title} ({turns} turn{'' if turns == 1 else 's'}) and "
        "everything it holds? [y/N] "
    )
    if not await confirm(question):
        return ["not deleted"]
    if not await agent.delete_session(session_id):
        return [f"no session {session_id} in this journal"]
    return [f"deleted session {session_id}{title}"]


async def export_command(agent: Agent, session: Session, arg: str) -> list[str]:
    """Write the open session to FILE (relative to the current directory; default
    ``drover-ID.md``), never over an existing file."""
    name = arg or f"drover-{session.id[:12]}.md"
    fmt: Format = "jsonl" if name.lower().endswith(".jsonl") else "markdown"
    text = export_session(await session_report(agent.store, session.id), fmt)
    try:
        path = await asyncio.to_thread(_write_new, name, text)
    except FileExistsError:
        return [f"error: {name} exists; give another file name (/export FILE)"]
    except OSError as exc:
        raise DroverError(f"cannot write {name}: {exc.strerror or exc}") from None
    return [f"exported session {session.id} to {path} ({fmt})"]


def _write_new(name: str, text: str) -> Path:
    path = Path(name).expanduser()
    with path.open("x", encoding="utf-8") as out:
        out.write(text)
    return path
