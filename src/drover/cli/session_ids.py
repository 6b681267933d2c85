"""Session ids as the command line takes them: what an id may be, and which stored session an id
the user typed — maybe only its start — names.

* An id is 1 to 128 letters, digits, ``-`` or ``_`` (what the server's routes take too), so
  every id a hint prints can be typed back as it is; anything else is a usage error.
* Wherever an id names a stored session (``--session``, ``--resume``, ``drover show``,
  ``rename``, ``rm``, ``export``, the REPL's ``/resume``, ``/rm``, ``/export``) any unique
  start of it will do: the session with exactly that id, else the one whose id starts with
  it. When several do, it is an error that lists them.
* ``--session ID`` starts a new session when no id starts with ``ID`` — unless ``ID`` is 6 to
  31 lowercase hexadecimal digits: drover's own ids are 32 of them, and the REPL and the
  hints show their first 12, so that reads as the start of an id this journal does not hold
  (a session of another journal, a typo), and is an error. A shorter name (``s1``, ``dead``),
  one with any other character (``fix-parser``), or a whole 32-digit id is created as
  given.

Ids are found exactly as typed; the library (:meth:`drover.agent.agent.Agent.session`) and the
HTTP API take whole ids only.
"""

from __future__ import annotations

import argparse
import re

from drover.errors import DroverError
from drover.journal.protocol import SessionStore
from drover.journal.records import SessionRecord, TurnRecord

_VALID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SHORTENED = re.compile(r"[0-9a-f]{6,31}")
#: Sessions named in the error about an id that starts several.
SHOWN = 5


def session_id_arg(text: str) -> str:
    """The argparse type of a session id argument (a usage error when it cannot be one)."""
    problem = id_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def id_problem(text: str) -> str | None:
    """Why ``text`` cannot be a session id, or None."""
    if not text.strip():
        return "an empty session id"
    if not _VALID.fullmatch(text):
        return (
            f"not a session id: {text!r} (ids are 1-128 letters, digits, '-' or '_'; "
            "no spaces or '/')"
        )
    return None


def _label(record: SessionRecord) -> str:
    title = f" ({record.title})" if record.title else ""
    return f"{record.id}{title}"


async def resolve_session(store: SessionStore, text: str, *, may_create: bool = False) -> str:
    """The id of the stored session ``text`` names (see the module docstring). With
    ``may_create``, an id nothing starts with is returned as it is, for a new session."""
    problem = id_problem(text)
    if problem is not None:
        raise DroverError(problem)
    if await store.get_session(text) is not None:
        return text
    found = await store.find_sessions(text, limit=SHOWN + 1)
    if len(found) == 1:
        return found[0].id
    if found:
        listed = ", ".join(_label(r) for r in found[:SHOWN])
        more = ", …" if len(found) > SHOWN else ""
        raise DroverError(
            f"{text} is the start of several session ids: {listed}{more}; type more of the id"
        )
    if not may_create:
        raise DroverError(f"no session {text} in this journal")
    if _SHORTENED.fullmatch(text):
        raise DroverError(
            f"no session id starts with {text} in this journal (6 to 31 hexadecimal digits "
            f"read as a shortened id, not as a new session's name: add another character, "
            f"e.g. {text}-new)"
        )
    return text


async def resolve_turn(store: SessionStore, session_id: str, text: str) -> TurnRecord:
    """The turn of the session that ``text`` names: its number in the session (``3``), or its
    id or any unique start of it; a :class:`DroverError` that says what was meant otherwise."""
    turns = await store.turns(session_id)
    if text.isascii() and text.isdigit():
        found = [t for t in turns if t.seq == int(text)]
    else:
        found = [t for t in turns if t.id == text] or [t for t in turns if t.id.startswith(text)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise DroverError(
            f"no turn {text!r} in session {session_id} (give its number, 1-{len(turns)}, or its id)"
            if turns
            else f"session {session_id} has no turns yet"
        )
    raise DroverError(f"{text!r} starts the ids of {len(found)} turns; give more of it")
