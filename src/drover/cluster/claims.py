"""What server processes sharing one journal ask of it beyond the store protocol.

A journal several processes run turns on (PostgreSQL) is a :class:`ClusterJournal` as well as a
:class:`~drover.journal.protocol.Store`: it says which process holds a session's running turn
(each turn records its owner and lease, which the store's recovery already honours), and it
carries control messages — an interrupt or a permission answer posted to one process for a
turn another runs — when there is no Redis. A journal only one process uses (SQLite) is not
one, and a server on it runs alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeGuard, runtime_checkable

from drover.journal.protocol import Store

#: Where a control message is delivered.
ControlHandler = Callable[[dict[str, Any]], Awaitable[None]]


@runtime_checkable
class ClusterJournal(Protocol):
    """Claims on turns and control messages, as the shared journal keeps them."""

    async def running_turn(self, session_id: str) -> tuple[str, str | None] | None:
        """``(turn_id, owner)`` of the session's running turn, or None."""
        ...

    async def running_turns(self, session_ids: list[str]) -> dict[str, str]:
        """``{session_id: turn_id}`` of the sessions among these with a running turn."""
        ...

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a control message (a JSON object) to every process that listens (ValueError:
        too large to be sent)."""
        ...

    async def listen(self, handler: ControlHandler, *, retry: float = 1.0) -> None:
        """Deliver each control message to ``handler`` until cancelled, reconnecting after
        ``retry`` seconds when the way messages come is lost (what is sent meanwhile is
        missed)."""
        ...


class SharedJournal(Store, ClusterJournal, Protocol):
    """A journal several server processes share: the store and its cluster's claims."""


def is_shared(store: Store) -> TypeGuard[SharedJournal]:
    """Whether several server processes can run turns on ``store`` together."""
    return isinstance(store, ClusterJournal)
