"""What processes sharing one PostgreSQL journal ask of it beyond the store protocol: who runs
which turn, and control messages between them.

The plans here back the public methods of :class:`~drover.store.postgres.store.PostgresStore` that
make it a :class:`~drover.cluster.claims.ClusterJournal`:

- :func:`running_turn`: the turn running on a session and the process that owns it (to send it
  an interrupt or a permission answer posted elsewhere); :func:`running_turns`, for several
  sessions at once;
- :func:`notify` / :func:`listen`: control messages between processes over ``NOTIFY`` on the
  channel :data:`CHANNEL`, when there is no Redis. ``NOTIFY`` is delivered only to listeners
  connected at commit time; a listener reconnects after a failure and misses what was sent in
  between (the sender's client sees its request go unanswered, as with a lost process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from drover.store.sql.plan import Plan, rows

log = logging.getLogger(__name__)

CHANNEL = "drover_control"
#: ``NOTIFY`` payloads are limited to 8000 bytes.
MAX_PAYLOAD = 7900


def running_turn(session_id: str) -> Plan[tuple[str, str | None] | None]:
    """``(turn_id, owner)`` of the session's running turn, or None."""
    found = yield from rows(
        "SELECT id, owner FROM turns WHERE session_id = ? AND status = 'running' "
        "ORDER BY seq DESC LIMIT 1",
        session_id,
    )
    if not found:
        return None
    owner = found[0]["owner"]
    return str(found[0]["id"]), None if owner is None else str(owner)


def running_turns(session_ids: list[str]) -> Plan[dict[str, str]]:
    """``{session_id: turn_id}`` of the sessions among these with a running turn."""
    found = yield from rows(
        "SELECT session_id, id FROM turns WHERE status = 'running' AND session_id = ANY(?)",
        list(session_ids),
    )
    return {str(r["session_id"]): str(r["id"]) for r in found}


def notify_payload(message: dict[str, Any]) -> str:
    """``message`` as a ``NOTIFY`` payload (ValueError when it is too large for one)."""
    payload = json.dumps(message, separators=(",", ":"))
    if len(payload.encode()) > MAX_PAYLOAD:
        raise ValueError("control message too large for NOTIFY")
    return payload


def notify(payload: str) -> Plan[None]:
    """Send ``payload`` (:func:`notify_payload`) to every listening process."""
    yield from rows("SELECT pg_notify(?, ?) AS sent", CHANNEL, payload)


async def listen(
    url: str, handler: Callable[[dict[str, Any]], Awaitable[None]], *, retry: float = 1.0
) -> None:
    """Deliver each control message to ``handler`` until cancelled (reconnecting as needed)."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                async for note in conn.notifies():
                    try:
                        message = json.loads(note.payload)
                    except ValueError:
                        continue
                    if isinstance(message, dict):
                        with contextlib.suppress(Exception):
                            await handler(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("control channel lost (%s); listening again in %.0f s", exc, retry)
        await asyncio.sleep(retry)
