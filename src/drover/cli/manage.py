"""The journal's commands that change it: ``drover rename ID TITLE``, ``drover rm ID
[--yes]`` and ``drover fork ID [--turn T]``. ID may be any unique start of a session's id
(:mod:`drover.cli.session_ids`), T a turn's number in the session or (the start of) its id.

``rm`` asks first (on stderr, the answer read from stdin: ``y`` deletes, anything else or no
answer keeps it) unless ``--yes``; a session whose turn is running in a live process is
refused, one left ``running`` by a dead process is recovered first and then deleted.
"""

from __future__ import annotations

import argparse
import sys

from drover.cli.admin import on_journal
from drover.cli.session_ids import resolve_session, resolve_turn
from drover.errors import DroverError
from drover.journal.protocol import Store
from drover.journal.rules import user_title


def rename_session(args: argparse.Namespace) -> int:
    try:
        title = user_title(args.title)
    except ValueError as exc:
        raise DroverError(str(exc)) from None

    async def rename(store: Store) -> str:
        async with store:
            session_id = await resolve_session(store, args.session_id)
            await store.rename_session(session_id, title)
            return session_id

    session_id = on_journal(args.db, rename)
    print(f"renamed session {session_id}: {title}")
    return 0


async def _describe(store: Store, text: str) -> tuple[str, str]:
    async with store:
        session_id = await resolve_session(store, text)
        record = await store.get_session(session_id)
        turns = await store.turns(session_id)
    title = f" “{record.title}”" if record is not None and record.title else ""
    count = f"{len(turns)} turn{'' if len(turns) == 1 else 's'}"
    return session_id, f"session {session_id}{title} ({count})"


async def _delete(store: Store, session_id: str) -> None:
    async with store:
        await store.recover_orphans(session_id=session_id)
        if not await store.delete_session(session_id):
            raise DroverError(f"no session {session_id} in this journal")


def _confirmed(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, UnicodeDecodeError, ValueError):
        answer = ""
    if not answer.endswith("\n"):  # no answer: end the question's line
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def remove_session(args: argparse.Namespace) -> int:
    session_id, described = on_journal(args.db, lambda store: _describe(store, args.session_id))
    if not args.yes and not _confirmed(f"delete {described} and everything it holds? [y/N] "):
        print("not deleted (answer y to delete, or pass --yes)", file=sys.stderr)
        return 1
    on_journal(args.db, lambda store: _delete(store, session_id))
    print(f"deleted {described}")
    return 0


def fork_session(args: argparse.Namespace) -> int:
    """``drover fork ID [--turn T]``: a new session with ID's history up to and including turn
    T (default: every turn not running); prints how to go on in it."""

    async def fork(store: Store) -> tuple[str, str, int]:
        async with store:
            source = await resolve_session(store, args.session_id)
            turn_id = None
            if args.turn is not None:
                turn_id = (await resolve_turn(store, source, args.turn)).id
            record = await store.fork_session(source, turn_id=turn_id)
            return source, record.id, len(await store.turns(record.id))

    source, forked, count = on_journal(args.db, fork)
    turns = f"{count} turn{'' if count == 1 else 's'}"
    print(
        f"forked session {forked} from {source} ({turns}); go on in it: drover --session {forked}"
    )
    return 0
