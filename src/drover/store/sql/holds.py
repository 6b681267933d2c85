"""Session holds in the SQL journal: a session kept from every turn start but one, between turns.

A rewind holds its session from its plan to the transaction that marks the turns, and a message
that stops the running turn (``if_busy`` ``interrupt`` or ``rollback``) holds it from before the
stop until its own turn starts: in between, no turn runs, yet none may start — not another
message, not a queued one started by the takeover's sweep, in this process or another. A hold
is a row of ``session_holds`` (one per session) naming a token, the process that took it and
a lease, as a running turn does: :func:`check` refuses a turn start (or another hold) while a
hold that is not the caller's is live, and a hold whose process died or whose lease ran out
counts for nothing. Every plan here runs under the session's lock, taken first.
"""

from __future__ import annotations

from collections.abc import Callable

from drover.errors import SessionBusyError, SessionHeldError
from drover.journal.owners import holder_gone
from drover.store.sql.common import first_value, lock_session, need_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.plan import Plan, execute, rows


def check(
    session_id: str, token: str | None, now: float, alive: Callable[[str], bool]
) -> Plan[bool]:
    """Refuse (:class:`~drover.errors.SessionHeldError`) when a live hold of the session is
    not ``token``'s; whether ``token`` holds it. The caller holds the session's lock."""
    found = yield from rows(
        "SELECT token, owner, expires_at FROM session_holds WHERE session_id = ?", session_id
    )
    if not found:
        return False
    if token is not None and str(first_value(found, "token")) == token:
        return True
    if not holder_gone(first_value(found, "owner"), first_value(found, "expires_at"), now, alive):
        raise SessionHeldError(session_id)
    return False


def drop(session_id: str, token: str) -> Plan[int]:
    """Release ``token``'s hold of the session (0: it held none). The caller holds the
    session's lock."""
    return execute(
        "DELETE FROM session_holds WHERE session_id = ? AND token = ?", session_id, token
    )


def hold(
    d: Dialect,
    session_id: str,
    token: str,
    owner: str,
    seconds: float,
    after: str | None,
    now: float,
    alive: Callable[[str], bool],
) -> Plan[None]:
    """Hold the session for ``token`` (``owner``'s, for ``seconds``). Refused while a turn of
    the session runs (:class:`~drover.errors.SessionBusyError`) — but the turn ``after``, which
    the hold is to follow — or another live hold is on it
    (:class:`~drover.errors.SessionHeldError`)."""
    yield from need_session(d, session_id)
    running = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1", session_id
    )
    if running and str(first_value(running, "id")) != after:
        raise SessionBusyError(session_id, str(first_value(running, "id")))
    yield from check(session_id, token, now, alive)
    yield from execute("DELETE FROM session_holds WHERE session_id = ?", session_id)
    yield from execute(
        "INSERT INTO session_holds (session_id, token, owner, expires_at, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        session_id,
        token,
        owner,
        now + seconds,
        now,
    )


def renew(session_id: str, token: str, seconds: float, now: float) -> Plan[int]:
    """Extend ``token``'s hold; the rows renewed (0: the hold is gone)."""
    return execute(
        "UPDATE session_holds SET expires_at = ? WHERE session_id = ? AND token = ?",
        now + seconds,
        session_id,
        token,
    )


def release(d: Dialect, session_id: str, token: str) -> Plan[None]:
    """Release ``token``'s hold (nothing when it holds none any more)."""
    if (yield from lock_session(d, session_id)):
        yield from drop(session_id, token)
