"""Holding a session between turns: no turn starts on it but the one the holder means to start.

Some session control must not let a turn start while it works, although no turn of the session
runs: a rewind, from its plan (what it checks and puts back) to the transaction that marks the
turns; a message that stops the running turn to go next (``if_busy`` ``interrupt`` or
``rollback``), from before the stop until its own turn starts — else the takeover's sweep, or
another process, could start a queued message in between, with the work a rollback is
dropping. :meth:`SessionHolds.hold` holds the session for that while, in this process (the
runner refuses every start not given the hold's token, at once) and in the journal, for every
process (:meth:`~drover.journal.protocol.TurnLeases.hold_session`: a turn start is refused
there too), leased and renewed as a turn's lease is, so that a holder that dies frees the
session. A turn started with the token takes the hold over as it starts; a hold still there
when the holder is done is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

from drover.errors import DroverError, SessionHeldError
from drover.journal.protocol import Store

log = logging.getLogger(__name__)


class SessionHolds:
    """The holds this process has on sessions (a :class:`~drover.runtime.runner.Runner`'s)."""

    def __init__(self, store: Store, owner: str, lease_seconds: float) -> None:
        self._store = store
        self._owner = owner
        self._seconds = lease_seconds
        #: The token of each session held here.
        self._held: dict[str, str] = {}

    def check(self, session_id: str, token: str | None) -> None:
        """Refuse a turn start (:class:`~drover.errors.SessionHeldError`) on a session held
        here by another than ``token``."""
        held = self._held.get(session_id)
        if held is not None and held != token:
            raise SessionHeldError(session_id)

    def taken(self, session_id: str, token: str) -> None:
        """The turn started with ``token`` took the hold over: the session is that turn's now
        (the turns after it, the queue's, start as after any turn)."""
        if self._held.get(session_id) == token:
            del self._held[session_id]

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str, *, after: str | None = None) -> AsyncIterator[str]:
        """Hold the session while the block runs; gives the token a turn start passes to take
        the hold over. Refused (:class:`~drover.errors.SessionBusyError`) while a turn of the
        session runs — but ``after``, the turn the holder is stopping — or another holds it."""
        self.check(session_id, None)
        token = uuid.uuid4().hex
        self._held[session_id] = token  # before any await: a start here sees it at once
        try:
            try:
                await self._store.hold_session(
                    session_id, token, self._owner, self._seconds, after=after
                )
            except BaseException as exc:
                if not isinstance(exc, DroverError):  # (refused: nothing to take back)
                    # Cancelled: the write, once started, was made all the same.
                    await self._release(session_id, token)
                raise
            renewal = asyncio.get_running_loop().create_task(self._renew(session_id, token))
            try:
                yield token
            finally:
                renewal.cancel()
                await asyncio.wait([renewal])
                await self._release(session_id, token)
        finally:
            if self._held.get(session_id) == token:
                del self._held[session_id]

    async def _release(self, session_id: str, token: str) -> None:
        # (a write that has started completes even if this task is cancelled)
        try:
            await self._store.release_hold(session_id, token)
        except DroverError as exc:
            log.warning("could not release the hold of session %s: %s", session_id, exc)

    async def _renew(self, session_id: str, token: str) -> None:
        while True:
            await asyncio.sleep(self._seconds / 3)
            try:
                if not await self._store.renew_hold(session_id, token, self._seconds):
                    return  # taken over by the turn it was for, or released
            except DroverError as exc:
                log.warning("could not renew the hold of session %s: %s", session_id, exc)
