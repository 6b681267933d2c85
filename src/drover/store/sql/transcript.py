"""A session's transcript read in one snapshot of the journal (``GET /v1/sessions/{id}``).

The turns, their messages (a step still streaming folded from its ``partial_text`` rows), the
tool calls, the queued messages and the log's last number are read in one transaction, so the
number is exactly the one the rest is current to: every row a flush commits is either all in
the read or not at all. (Read separately, a flush between the reads made the text trail the
number, and a client replaying after it lost the deltas in between.)
"""

from __future__ import annotations

from drover.core.messages import Usage
from drover.journal.records import Transcript
from drover.store.sql.dialect import Dialect
from drover.store.sql.log import last_event_seq, running_usage
from drover.store.sql.plan import Plan
from drover.store.sql.queue import queued
from drover.store.sql.sessions import get_session
from drover.store.sql.turns import turns_with_messages
from drover.store.sql.work import tool_calls


def transcript(d: Dialect, session_id: str, now: float) -> Plan[Transcript | None]:
    """The session's :class:`~drover.journal.records.Transcript` (None: no such session); run
    it in a snapshot."""
    session = yield from get_session(session_id)
    if session is None:
        return None
    turns = yield from turns_with_messages(session_id, now)
    calls = yield from tool_calls(None, session_id)
    waiting = yield from queued(session_id)
    last = yield from last_event_seq(d, session_id)
    usage: dict[str, Usage] = {}
    for turn, _ in turns:
        if turn.status == "running" and turn.usage is None:
            so_far = yield from running_usage(d, session_id, turn.id)
            if so_far is not None:
                usage[turn.id] = so_far
    return Transcript(
        session=session,
        turns=turns,
        tool_calls=calls,
        queued=waiting,
        last_seq=last,
        running_usage=usage,
    )
