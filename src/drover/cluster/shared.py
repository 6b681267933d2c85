"""One server process among several on a shared journal (PostgreSQL, and optionally Redis).

What a process adds when its journal is shared (a :class:`~drover.cluster.claims.ClusterJournal`):
the :class:`~drover.cluster.relay.Relay` (other processes' live events for its clients, Redis
or the log) and a listener for control messages (interrupts and permission answers posted to
another process, when Redis cannot carry them), sealed with the cluster's key
(:mod:`drover.cluster.signing`). One process on SQLite needs neither; every
server runs the takeover watch (:mod:`drover.cluster.takeover`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from drover.cluster.claims import ControlHandler, SharedJournal, is_shared
from drover.cluster.relay import Relay
from drover.cluster.signing import Seal, cluster_key
from drover.errors import ConfigError
from drover.journal.protocol import Store
from drover.runtime.hub import Hub
from drover.store.postgres.connection import redact

__all__ = ["DEFAULT_LEASE", "Shared", "is_shared"]

#: Seconds a turn's lease lasts; a dead process's turn is taken over within about this.
DEFAULT_LEASE = 15.0


@dataclass(eq=False)
class Shared:
    store: SharedJournal
    relay: Relay
    redis_url: str | None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    def open(cls, store: Store, owner: str, hub: Hub, redis_url: str | None) -> Shared:
        if not is_shared(store):
            raise ConfigError("processes share a PostgreSQL journal (--db postgresql://…)")
        if redis_url is not None and not redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"not a Redis URL (redis://, rediss:// or unix://): {redis_url}")
        seal = Seal(cluster_key())
        relay = Relay(hub, store, owner=owner, redis_url=redis_url, notify=store.notify, seal=seal)
        return cls(store=store, relay=relay, redis_url=redis_url)

    async def running_turn(self, session_id: str) -> tuple[str, str | None] | None:
        return await self.store.running_turn(session_id)

    async def running_turns(self, session_ids: list[str]) -> dict[str, str]:
        return await self.store.running_turns(session_ids)

    async def start(self, on_control: ControlHandler) -> None:
        """Starts relaying; ``on_control`` takes the control messages sent to this process (a
        stop or a permission answer for a turn it runs)."""
        self.relay.on_control = on_control
        await self.relay.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.store.listen(self.relay.received)))

    def describe(self) -> str:
        live = (
            "the journal's log"
            if self.redis_url is None
            else redact(self.redis_url, self.redis_url)
        )
        return f"shared journal; live events between processes via {live}"

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.relay.close()
