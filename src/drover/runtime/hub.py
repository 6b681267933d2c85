"""The live side of the event stream: one feed per session, fanned out to its SSE clients.

The runner's journal numbers each event and hands it here at once (text deltas as they leave
the provider adapter, not at the 250 ms flush). A feed turns the event into its SSE frame once,
keeps the latest frames in a bounded ring — which is what serves the deltas the journal has not
flushed yet to a reconnecting client — and appends it to each subscriber's queue.

A subscriber's queue is bounded too, but numbered events cannot simply be dropped (the client
would skip an id): a subscriber that falls behind is marked ``lagged``, stops receiving, and its
stream resynchronises from the log and the ring after the last id it sent. A slow client thus
costs its own latency, never the turn's or the other clients'.

Transient events (tool progress) have no number: :meth:`Hub.publish_transient` hands them to
the session's current subscribers only — never to the ring, so no replay shows them — and a
subscriber whose queue is full simply misses them.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections import deque
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

#: Frames a feed keeps in memory (far more than one flush interval of deltas).
RING_SIZE = 2048
#: Frames waiting for one subscriber before it is resynchronised from the log.
QUEUE_SIZE = 4096
_SEP = (",", ":")
#: One encoder for every frame (``json.dumps`` with options builds a new one per call).
_dumps = json.JSONEncoder(ensure_ascii=False, separators=_SEP).encode
#: A string as JSON, exactly as ``_dumps`` writes it (the C routine it calls).
_quote = encode_basestring
_TEXT_KEYS = frozenset(("type", "text", "index", "step"))


@dataclass(slots=True)
class Frame:
    """One numbered event as the bytes written to every client (encoded once). Not frozen:
    a frozen dataclass's constructor costs ~5x more, and replay builds thousands at once."""

    seq: int
    type: str
    wire: bytes

    def encode(self) -> bytes:
        return self.wire


def _wire(seq: int, kind: str, data: str) -> bytes:
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode()


def make_frame(seq: int, turn_id: str | None, payload: dict[str, Any], prev: int) -> Frame:
    """The frame of the event ``payload`` numbered ``seq``, ``prev`` the number before it."""
    if payload.get("type") == "text_delta" and payload.keys() == _TEXT_KEYS:
        text = payload["text"]
        if isinstance(text, str):
            template = text_template(payload["index"], payload["step"], turn_id)
            return text_frame(seq, text, template, prev)
    return _other_frame(seq, turn_id, payload, prev)


def _other_frame(seq: int, turn_id: str | None, payload: dict[str, Any], prev: int) -> Frame:
    body = {**payload, "seq": seq, "prev": prev, "turn_id": turn_id}
    kind = str(payload.get("type", "message"))
    return Frame(seq, kind, _wire(seq, kind, _dumps(body)))


def text_template(index: Any, step: Any, turn_id: str | None) -> str:
    """The whole frame of a ``text_delta`` of one block, as a ``%`` template of its number,
    its JSON-quoted text, its number again and the number before it (see
    :func:`text_frame`): the fixed part of the JSON is encoded once per block, not once per
    delta."""
    rest = f',"index":{_dumps(index)},"step":{_dumps(step)},"seq":'.replace("%", "%%")
    turn = _dumps(turn_id).replace("%", "%%")
    return (
        'id: %d\nevent: text_delta\ndata: {"type":"text_delta","text":%s'
        + rest
        + '%d,"prev":%d,"turn_id":'
        + turn
        + "}\n\n"
    )


def text_frame(seq: int, text: str, template: str, prev: int) -> Frame:
    """A ``text_delta`` frame from its text and its block's :func:`text_template` (the same
    bytes as :func:`make_frame` writes for the event)."""
    return Frame(seq, "text_delta", (template % (seq, _quote(text), seq, prev)).encode())


@dataclass(slots=True)
class TransientFrame:
    """An event without a number (no ``id:`` line): shown once to whoever is connected."""

    type: str
    wire: bytes

    def encode(self) -> bytes:
        return self.wire


def transient_frame(turn_id: str | None, payload: dict[str, Any]) -> TransientFrame:
    kind = str(payload.get("type", "message"))
    body = _dumps({**payload, "turn_id": turn_id})
    return TransientFrame(kind, f"event: {kind}\ndata: {body}\n\n".encode())


class Subscription:
    def __init__(self, maxsize: int = QUEUE_SIZE) -> None:
        self._items: deque[Frame | TransientFrame] = deque()
        self._maxsize = maxsize
        self._ready = asyncio.Event()
        self.lagged = False
        self.closed = False

    def close(self) -> None:
        """End the stream (the server is stopping)."""
        self.closed = True
        self._ready.set()

    def put(self, frame: Frame) -> None:
        if self.lagged:
            return
        if len(self._items) >= self._maxsize:
            self.lagged = True
            self._items.clear()
        else:
            self._items.append(frame)
        self._ready.set()

    def put_transient(self, frame: TransientFrame) -> None:
        """Queue a transient frame, unless the queue is full or being resynchronised (then it
        is missed: it is never replayed anyway)."""
        if self.lagged or len(self._items) >= self._maxsize:
            return
        self._items.append(frame)
        self._ready.set()

    def lag(self) -> None:
        """Resynchronise from the log after the last id sent (what another process wrote is
        there, or the live feed lost frames)."""
        self.lagged = True
        self._items.clear()
        self._ready.set()

    def resynced(self) -> None:
        """The stream caught up from the log: receive again."""
        self.lagged = False

    async def wait(self, patience: float) -> list[Frame | TransientFrame]:
        """The frames queued so far, waiting up to ``patience`` s for one (empty: none came)."""
        if not self._items and not self.lagged and not self.closed:
            self._ready.clear()
            try:
                async with asyncio.timeout(patience):  # no task per wait, unlike wait_for
                    await self._ready.wait()
            except TimeoutError:
                return []
        items = list(self._items)
        self._items.clear()
        return items


class SessionFeed:
    def __init__(self, ring_size: int = RING_SIZE) -> None:
        self._ring: deque[Frame] = deque(maxlen=ring_size)
        self._subscribers: set[Subscription] = set()
        self._changed = asyncio.Event()
        self._template_key: tuple[str | None, Any, Any] | None = None
        self._template = ""

    # -- publishing ----------------------------------------------------------------------------

    def frame(self, seq: int, turn_id: str | None, payload: dict[str, Any], prev: int) -> Frame:
        """:func:`make_frame`, with the template of the block being streamed kept between
        its deltas."""
        if payload.get("type") == "text_delta" and payload.keys() == _TEXT_KEYS:
            text = payload["text"]
            if isinstance(text, str):
                key = (turn_id, payload["index"], payload["step"])
                if key != self._template_key:
                    self._template = text_template(key[1], key[2], turn_id)
                    self._template_key = key
                return text_frame(seq, text, self._template, prev)
        return _other_frame(seq, turn_id, payload, prev)

    def publish(self, frame: Frame) -> None:
        if self._ring and frame.seq <= self._ring[-1].seq:
            return  # numbers only grow; a repeat is a replayed write
        self._ring.append(frame)
        for subscriber in self._subscribers:
            subscriber.put(frame)

    def publish_transient(self, frame: TransientFrame) -> None:
        for subscriber in self._subscribers:
            subscriber.put_transient(frame)

    def resync(self, *, drop_ring: bool = False) -> None:
        """Send every subscriber back to the log (and the ring, unless ``drop_ring``: frames
        that may have a hole before them must not vouch for an id)."""
        if drop_ring:
            self._ring.clear()
        for subscriber in self._subscribers:
            subscriber.lag()

    def after(self, seq: int) -> list[Frame]:
        """Frames in the ring numbered above ``seq``."""
        ring = self._ring
        start = bisect.bisect_right([f.seq for f in ring], seq) if ring else 0
        return list(ring)[start:]

    def holds(self, seq: int) -> bool:
        """Whether ``seq`` was published here and is still in the ring."""
        seqs = [f.seq for f in self._ring]
        i = bisect.bisect_left(seqs, seq)
        return i < len(seqs) and seqs[i] == seq

    @property
    def last_seq(self) -> int:
        return self._ring[-1].seq if self._ring else 0

    # -- subscribers ---------------------------------------------------------------------------

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self) -> Subscription:
        subscription = Subscription()
        self._subscribers.add(subscription)
        self._signal()
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)
        self._signal()

    def close(self) -> None:
        for subscriber in self._subscribers:
            subscriber.close()

    async def wait_changed(self) -> None:
        """Until a subscriber comes or goes."""
        await self._changed.wait()

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class Hub:
    """The feeds of the sessions this process serves; :meth:`publish` is the runner's hook.

    A feed is kept while a turn of its session runs here (its ring holds the deltas the log
    has not flushed yet) or a reader follows it, and let go when neither holds any more:
    :meth:`forget_idle`, which the runner calls when a session has no turn running here
    (``on_idle``) and a reader when it leaves. Whatever only looks (:meth:`resync`,
    :meth:`last_seq`) makes none."""

    def __init__(self, ring_size: int = RING_SIZE) -> None:
        self._ring_size = ring_size
        self._feeds: dict[str, SessionFeed] = {}

    def feed(self, session_id: str) -> SessionFeed:
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = SessionFeed(self._ring_size)
        return feed

    def subscribers(self) -> int:
        """Event streams open now, across every session."""
        return sum(feed.subscribers for feed in self._feeds.values())

    def publish(
        self, session_id: str, seq: int, turn_id: str | None, payload: dict[str, Any], prev: int
    ) -> None:
        feed = self.feed(session_id)
        feed.publish(feed.frame(seq, turn_id, payload, prev))

    def resync(self, session_id: str, *, drop_ring: bool = False) -> None:
        """Send the session's readers here back to the log (none: nothing to do)."""
        feed = self._feeds.get(session_id)
        if feed is not None:
            feed.resync(drop_ring=drop_ring)

    def last_seq(self, session_id: str) -> int:
        """The number of the latest frame the session's feed holds (0: none, or no feed)."""
        feed = self._feeds.get(session_id)
        return 0 if feed is None else feed.last_seq

    def publish_transient(
        self, session_id: str, turn_id: str | None, payload: dict[str, Any]
    ) -> None:
        """Show a transient event to the session's clients connected now (none: nothing)."""
        feed = self._feeds.get(session_id)
        if feed is not None and feed.subscribers:
            feed.publish_transient(transient_frame(turn_id, payload))

    def close(self) -> None:
        """End every subscriber's stream."""
        for feed in self._feeds.values():
            feed.close()

    def drop(self, session_id: str) -> None:
        """The session is gone: end its subscribers' streams and forget its feed."""
        feed = self._feeds.pop(session_id, None)
        if feed is not None:
            feed.close()

    def forget_idle(self, session_id: str) -> None:
        """Drop the feed of a session with no turn running here when nobody listens to it
        (the log has everything it held)."""
        feed = self._feeds.get(session_id)
        if feed is not None and feed.subscribers == 0:
            del self._feeds[session_id]

    def __len__(self) -> int:
        return len(self._feeds)
