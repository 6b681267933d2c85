"""Live events between server processes: a Redis Streams feed, or the journal's log without one.

Each process's hub serves the turns it runs from memory. When several ``drover serve`` processes
share a PostgreSQL journal, a client may follow on process A a turn that process B runs; the
relay carries B's numbered events to A's hub.

With Redis (``--redis``), every event a process numbers is also appended (XADD, trimmed to about
:data:`STREAM_LEN` entries) to the session's stream ``drover:events:{session}``, with the number
of the event before it in the log (``prev``, as the journal numbered it; an entry of an older
version may leave it empty). A
process whose clients follow a session reads that stream (one XREAD BLOCK for all of them),
first from its beginning (the stream holds far more than the journal's unflushed tail), then as
it grows, and publishes each entry into its own feed. An entry is taken only when nothing can be
missing before it: its ``prev`` is at most what the feed or the log already covers. Anything
else — entries Redis lost (a restart, a flush, a write that failed), a turn that began after
events only the log holds (recovery of a dead process's turn) — sends the session's subscribers
back to the log: they continue from it when their id is in it, and get an explicit ``reset``
otherwise. The journal stays the source of truth; Redis only carries what is live.

Without Redis, or while Redis is unreachable, a process polls the log of the sessions its
clients follow and sends them back to it whenever it grew: live deltas then arrive at the
journal's flush pace (250 ms), in order and without holes.

The relay also carries requests a process cannot serve itself — an interrupt or a permission
answer posted to A for a turn B runs — to the process that runs the turn (:meth:`control`):
over the Redis stream ``drover:control:{owner}`` of that process, or the shared journal's own
control messages without Redis (PostgreSQL ``NOTIFY``, see
:meth:`~drover.cluster.claims.ClusterJournal.notify`). Each is sealed with the cluster's key,
and one that is not genuine, not for this process, stale or replayed is dropped
(:mod:`drover.cluster.signing`): reaching Redis is not enough to approve a permission request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from drover.cluster.claims import ControlHandler
from drover.cluster.signing import Seal
from drover.journal.protocol import Store
from drover.runtime.hub import Frame, Hub

log = logging.getLogger(__name__)

#: Entries a session's stream keeps (trimmed approximately): minutes of live deltas.
STREAM_LEN = 4096
#: Seconds an idle session stream survives its last entry.
STREAM_TTL = 3600
#: Seconds between looks at the log when following it instead of Redis.
POLL = 0.25
#: Entries read per page when a process starts following a session.
PRIME_PAGE = 256
#: Milliseconds one XREAD waits for entries.
BLOCK_MS = 200
#: Events waiting to be written to Redis before the oldest are dropped (readers see the gap).
OUTBOX_LIMIT = 100_000

Notify = Callable[[dict[str, Any]], Awaitable[None]]
#: What a stream's ``resync`` entry is sealed as.
RESYNC = "resync"


def events_key(session_id: str) -> str:
    return f"drover:events:{session_id}"


def control_key(owner: str) -> str:
    return f"drover:control:{owner}"


@dataclass(eq=False)
class _Follow:
    """A session whose clients this process serves: how far its feed is known complete."""

    refs: int = 1
    covered: int = 0
    pos: str = "0-0"
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class Relay:
    def __init__(
        self,
        hub: Hub,
        store: Store,
        *,
        owner: str,
        redis_url: str | None = None,
        poll: float = POLL,
        stream_len: int = STREAM_LEN,
        notify: Notify | None = None,
        seal: Seal,
    ) -> None:
        """``notify`` carries a control message without Redis (PostgreSQL ``NOTIFY``);
        ``seal`` seals the control messages sent and opens those received."""
        self._seal = seal
        self._hub = hub
        self._store = store
        self._owner = owner
        self._url = redis_url
        self._poll = poll
        self._stream_len = stream_len
        self._notify = notify
        self._redis: Any = None
        self._up = False
        self._follows: dict[str, _Follow] = {}
        self._outbox: deque[tuple[str, dict[str, Any]]] = deque()
        self._outbox_ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._control_pos = "0-0"
        self.on_control: ControlHandler | None = None
        self.dropped = 0

    @property
    def redis_up(self) -> bool:
        return self._up

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._url is not None:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._redis = Redis.from_url(
                self._url,
                socket_timeout=10,
                socket_connect_timeout=2,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                await self._redis.ping()
                self._up = True
            except Exception as exc:
                log.warning("redis %s unreachable (%s): following the journal", self._url, exc)
            self._tasks.append(loop.create_task(self._write_loop()))
            self._tasks.append(loop.create_task(self._read_loop()))
        else:
            self._tasks.append(loop.create_task(self._poll_loop()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.delete(control_key(self._owner))
            await self._redis.aclose()

    # -- publishing (the runner's hook) --------------------------------------------------------

    def publish(
        self, session_id: str, seq: int, turn_id: str | None, payload: dict[str, Any], prev: int
    ) -> None:
        feed = self._hub.feed(session_id)
        frame = feed.frame(seq, turn_id, payload, prev)
        feed.publish(frame)
        if self._redis is None:
            return
        fields: dict[str, Any] = {"seq": seq, "prev": prev, "wire": frame.wire}
        fields["mac"] = self._seal.sign(_entry_bytes(session_id, str(seq), str(prev), frame.wire))
        if len(self._outbox) >= OUTBOX_LIMIT:
            self._outbox.popleft()
            self.dropped += 1
        self._outbox.append((events_key(session_id), fields))
        self._outbox_ready.set()

    def nudge(self, session_id: str) -> None:
        """Events of the session were written to the log without being published (a dead
        process's turn recovered): every follower goes back to the log, here and elsewhere."""
        self._hub.resync(session_id, drop_ring=True)
        if self._redis is not None:
            mac = self._seal.sign(_entry_bytes(session_id, RESYNC))
            self._outbox.append((events_key(session_id), {"resync": 1, "mac": mac}))
            self._outbox_ready.set()

    async def _write_loop(self) -> None:
        warned = 0.0
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            if not self._outbox:
                continue
            batch = list(self._outbox)
            self._outbox.clear()
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for key, fields in batch:
                        pipe.xadd(key, fields, maxlen=self._stream_len, approximate=True)
                    for key in {key for key, _ in batch}:
                        pipe.expire(key, STREAM_TTL)
                    await pipe.execute()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.dropped += len(batch)
                if time.monotonic() - warned > 5:
                    warned = time.monotonic()
                    log.warning("redis: %d live events not relayed (%s)", len(batch), exc)

    # -- following sessions --------------------------------------------------------------------

    async def attach(self, session_id: str) -> None:
        """This process has a client for the session: follow it (returns once the feed holds
        what Redis still has of it, so the client's backlog has no hole)."""
        follow = self._follows.get(session_id)
        if follow is not None:
            follow.refs += 1
            await follow.ready.wait()
            return
        follow = self._follows[session_id] = _Follow()
        try:
            follow.covered = await self._store.last_event_seq(session_id)
            if self._up:
                await self._prime(session_id, follow)
        except Exception as exc:
            log.warning("relay: could not start following %s (%s)", session_id, exc)
        finally:
            follow.ready.set()

    def detach(self, session_id: str) -> None:
        follow = self._follows.get(session_id)
        if follow is None:
            return
        follow.refs -= 1
        if follow.refs <= 0:
            del self._follows[session_id]

    async def _prime(self, session_id: str, follow: _Follow) -> None:
        """Take what the stream holds after what the log covers, newest pages first (a
        client connecting to a long session reads its unflushed tail, not the whole stream)."""
        key, top, entries = events_key(session_id), "+", []
        while True:
            page = await self._redis.xrevrange(key, max=top, min="-", count=PRIME_PAGE)
            entries += page
            if len(page) < PRIME_PAGE:
                break
            oldest_id, oldest = page[-1]
            if b"seq" in oldest and int(oldest[b"seq"]) <= follow.covered:
                break
            top = "(" + (oldest_id.decode() if isinstance(oldest_id, bytes) else oldest_id)
        follow.pos = "0-0"
        entries.reverse()
        await self._take(session_id, follow, entries)

    async def _take(self, session_id: str, follow: _Follow, entries: list[Any]) -> None:
        feed = self._hub.feed(session_id)
        for entry_id, fields in entries:
            follow.pos = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            if not self._genuine(session_id, fields):
                continue  # (a gap it leaves sends the followers back to the log)
            if b"resync" in fields:
                feed.resync(drop_ring=True)
                continue
            seq = int(fields[b"seq"])
            raw_prev = fields[b"prev"]
            prev = int(raw_prev) if raw_prev else None
            wire = bytes(fields[b"wire"])
            covered = max(follow.covered, feed.last_seq)
            if seq <= covered:
                if seq > follow.covered and not feed.holds(seq):
                    feed.resync()  # came after later frames: the log holds it
                continue
            # Something may be missing before this entry: only the log can say what.
            gap = prev > covered if prev is not None else None
            if gap is None:
                gap = await self._log_has_between(session_id, covered, seq)
            if gap:
                feed.resync(drop_ring=True)
            kind = wire.split(b"\n", 2)[1][len(b"event: ") :].decode()
            feed.publish(Frame(seq, kind, wire))
            follow.covered = seq

    def _genuine(self, session_id: str, fields: dict[bytes, Any]) -> bool:
        """Whether an entry of the session's stream was written by a process of the cluster
        (sealed with its key, for this session)."""
        if b"resync" in fields:
            signed = _entry_bytes(session_id, RESYNC)
        else:
            parts = [fields.get(name) for name in (b"seq", b"prev", b"wire")]
            taken = [part for part in parts if isinstance(part, bytes)]
            if len(taken) < len(parts):
                return self._seal.verify(b"", None, what="live event")
            signed = _entry_bytes(session_id, *taken)
        return self._seal.verify(signed, fields.get(b"mac"), what="live event")

    async def _log_has_between(self, session_id: str, low: int, high: int) -> bool:
        if await self._store.last_event_seq(session_id) <= low:
            return False  # the usual case, one cheap query
        rows = await self._store.events_after(session_id, low)
        return any(low < row.seq < high for row in rows)

    async def _read_loop(self) -> None:
        while True:
            if not self._up:
                await self._poll_once()
                await asyncio.sleep(self._poll)
                await self._reconnect()
                continue
            streams: dict[str, str] = {control_key(self._owner): self._control_pos}
            ready = [(sid, f) for sid, f in self._follows.items() if f.ready.is_set()]
            for sid, follow in ready:
                streams[events_key(sid)] = follow.pos
            try:
                result = await self._redis.xread(streams, count=1000, block=BLOCK_MS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("redis unreachable (%s): following the journal", exc)
                self._degrade()
                continue
            by_key: dict[str, _Follow] = dict(ready)
            sessions = []
            for raw_key, entries in result or []:
                key = raw_key.decode()
                if key == control_key(self._owner):
                    await self._controls(entries)
                    continue
                sid = key[len("drover:events:") :]
                known = by_key.get(sid)
                if known is not None and self._follows.get(sid) is known:
                    sessions.append(self._take_or_resync(sid, known, entries))
            # Sessions side by side: one whose turn starts waits on the log, not the others.
            await asyncio.gather(*sessions)

    async def _take_or_resync(self, session_id: str, follow: _Follow, entries: list[Any]) -> None:
        try:
            await self._take(session_id, follow, entries)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("relay: session %s resynchronised (%s)", session_id, exc)
            self._hub.feed(session_id).resync()

    def _degrade(self) -> None:
        self._up = False
        for sid in self._follows:
            self._hub.feed(sid).resync()

    async def _reconnect(self) -> None:
        try:
            await self._redis.ping()
        except asyncio.CancelledError:
            raise
        except Exception:
            return
        log.warning("redis %s reachable again: following it", self._url)
        self._up = True
        self._control_pos = "0-0"
        for sid, follow in list(self._follows.items()):
            try:
                await self._prime(sid, follow)
            except Exception:
                self._degrade()
                return

    # -- without Redis: the log ----------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            await self._poll_once()

    async def _poll_once(self) -> None:
        for sid, follow in list(self._follows.items()):
            if not follow.ready.is_set():
                continue
            try:
                last = await self._store.last_event_seq(sid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("relay: cannot read the log of %s (%s)", sid, exc)
                continue
            feed = self._hub.feed(sid)
            if last > max(follow.covered, feed.last_seq):
                feed.resync()
            follow.covered = max(follow.covered, last)

    # -- control messages ----------------------------------------------------------------------

    async def control(self, owner: str, message: dict[str, Any]) -> bool:
        """Send ``message`` to the process ``owner`` (the owner of a running turn)."""
        sealed = self._seal.seal(owner, message)
        if self._up:
            try:
                await self._redis.xadd(control_key(owner), sealed, maxlen=1000)
                await self._redis.expire(control_key(owner), STREAM_TTL)
                return True
            except Exception as exc:
                log.warning("redis: control message not sent (%s)", exc)
        if self._notify is not None:
            await self._notify({"owner": owner, "sealed": sealed})
            return True
        return False

    async def received(self, message: dict[str, Any]) -> None:
        """A control message that came by another way (PostgreSQL ``NOTIFY``)."""
        if message.get("owner") != self._owner:
            return  # (every process hears every NOTIFY)
        opened = self._seal.open(self._owner, message.get("sealed"))
        if opened is not None and self.on_control is not None:
            await self.on_control(opened)

    async def _controls(self, entries: list[Any]) -> None:
        for entry_id, fields in entries:
            self._control_pos = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            message = self._seal.open(self._owner, fields)
            if message is not None and self.on_control is not None:
                try:
                    await self.on_control(message)
                except Exception:
                    log.exception("relay: control message %r failed", message)


def _entry_bytes(session_id: str, *parts: str | bytes) -> bytes:
    """What an entry of a session's event stream is sealed over: the session and its fields."""
    return b"\n".join(p if isinstance(p, bytes) else p.encode() for p in (session_id, *parts))
