"""What the front doors of other protocols share: a *response* — the turn a message started,
with the turns that resumed it after its process died — found in the journal, and its events
read from its start and followed live until it ends.

The doors (:mod:`.ai_sdk_routes`, :mod:`.responses_routes`) translate drover's own numbered
events, the ones the SSE route serves, through a :class:`~drover.server.follow.Follower`:
live from the hub, replayed from the log, gap-free across a restart. A door's resume replays
the response from its first event (each protocol's own position is derived from drover's
numbers), so it needs no state of its own and works in any process.

A turn whose process died is ended by recovery (``interrupted``, with
:data:`~drover.journal.rules.ORPHAN_ERROR` as its error) and, unless the server runs with
``--takeover end``, resumed by a continuation turn (no message of the user's: none, or the
note telling the model it was cut off). To a door's client that
is one answer that went on: the response holds both turns, and the recovered turn's terminal
event ends nothing. A response ends at any other terminal event, or at an orphan ending that
nothing resumes — a new message starts a turn instead, or no turn runs on the session when the
reader looks (after catching up, and whenever nothing came for a heartbeat).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request

from drover.journal.protocol import Store
from drover.journal.records import SessionRecord, TurnRecord
from drover.journal.rules import ORPHAN_ERROR
from drover.runtime.hub import TransientFrame
from drover.server.errors import ApiError
from drover.server.follow import Follower, Reset, frame_event
from drover.server.service import Service
from drover.turn.state import RESUME_NOTE

TERMINAL = frozenset({"done", "incomplete", "error"})
#: What a door takes as a session's or a turn's id in a path or a body.
DOOR_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: The SSE comment a door's stream sends when nothing happened for a heartbeat.
KEEP_ALIVE = b": keep-alive\n\n"
#: The last frame of both doors' streams.
DONE = b"data: [DONE]\n\n"
#: Rows read back from the end of the log at first when looking for a turn's first event.
_FIRST_SPAN = 256


def service_of(request: Request) -> Service:
    """The server's service, as a door's route reaches it."""
    service: Service = request.app.state.service
    return service


def invalid(message: str) -> ApiError:
    """A door's refusal of a request it cannot take (422)."""
    return ApiError(422, "invalid_request", message)


def user_text(turn: TurnRecord) -> str | None:
    """The text of the user's message that started ``turn``; None for a turn that resumed
    unfinished work — with no message, or with the note drover sends the model in its place."""
    message = turn.user_message
    if message is None or message.text == RESUME_NOTE:
        return None
    return message.text


def _resumes(event: dict[str, Any]) -> bool:
    """Whether a ``turn_started`` event is a resumption's (see :func:`user_text`)."""
    message = event.get("user_message")
    if message is None:
        return True
    blocks = message.get("content") if isinstance(message, dict) else None
    return isinstance(blocks, list) and [b.get("text") for b in blocks if isinstance(b, dict)] == [
        RESUME_NOTE
    ]


def continues(previous: TurnRecord, turn: TurnRecord) -> bool:
    """Whether ``turn`` goes on with ``previous``'s response: it resumes, with no message of
    the user's, the work of a turn recovery ended after its process died."""
    return (
        user_text(turn) is None
        and previous.status == "interrupted"
        and previous.error == ORPHAN_ERROR
    )


def responses(turns: Sequence[TurnRecord]) -> list[list[TurnRecord]]:
    """A session's turns (in order) grouped into responses, each led by its first turn."""
    out: list[list[TurnRecord]] = []
    for turn in turns:
        if out and continues(out[-1][-1], turn):
            out[-1].append(turn)
        else:
            out.append([turn])
    return out


def orphan_end(event: dict[str, Any]) -> bool:
    """Whether a terminal event is recovery's, for a turn whose process died."""
    return event.get("reason") == "interrupted" and event.get("error") == ORPHAN_ERROR


async def group_of(store: Store, session_id: str, turn_id: str) -> list[TurnRecord] | None:
    """The turns of the response that holds ``turn_id`` (None: no such turn)."""
    for group in responses(await store.turns(session_id)):
        if any(turn.id == turn_id for turn in group):
            return group
    return None


async def log_position(service: Service, session_id: str) -> int:
    """A number every event logged from now on is above: where a new turn's stream starts."""
    last = service.hub.last_seq(session_id)
    return max(last, await service.store.last_event_seq(session_id))


async def start_seq(store: Store, session_id: str, turn_id: str) -> int | None:
    """The number of the ``turn_started`` event of ``turn_id``: looked for from the end of
    the log back (a door asks about recent turns), in windows that grow fourfold."""
    last = await store.last_event_seq(session_id)
    span = _FIRST_SPAN
    while True:
        after = max(last - span, 0)
        for row in await store.events_after(session_id, after):
            if row.type == "turn_started" and row.turn_id == turn_id:
                return row.seq
        if after == 0:
            return None
        span *= 4


@dataclass(frozen=True, slots=True)
class Took:
    """An event of the response (with its ``seq``, ``prev`` and ``turn_id``)."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ended:
    """The response ended; ``event`` is the terminal event that ended it (already taken when
    it was an orphan ending that nothing resumed)."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing came for a heartbeat (a door writes its keep-alive)."""


@dataclass(frozen=True, slots=True)
class Cut:
    """The reader fell behind to a point the log cannot continue from exactly: the door ends
    its stream without a last event, and the client's resume replays the response."""


Step = Took | Ended | Idle | Cut


class Scope:
    """Which of a session's events belong to the response led by ``head``, and its end."""

    def __init__(self, head: str) -> None:
        self.head = head
        self.turns: set[str] = set()
        self.state: Literal["before", "open", "orphaned"] = "before"
        self._orphan: dict[str, Any] | None = None

    @property
    def orphaned(self) -> bool:
        return self.state == "orphaned"

    def admit(self, event: dict[str, Any]) -> Took | Ended | None:
        """``event`` as a step of the response, or None when it is not one of its events."""
        kind, turn_id = event.get("type"), event.get("turn_id")
        if self.state == "before":
            if kind == "turn_started" and turn_id == self.head:
                self.state = "open"
                self.turns.add(self.head)
                return Took(event)
            return None
        if self.state == "orphaned":
            if kind != "turn_started":
                return None
            if _resumes(event):
                assert isinstance(turn_id, str)
                self.turns.add(turn_id)
                self.state = "open"
                return Took(event)
            return self.ended()
        if turn_id not in self.turns:
            return None
        if kind in TERMINAL:
            if orphan_end(event):
                self.state, self._orphan = "orphaned", event
                return Took(event)
            return Ended(event)
        return Took(event)

    def ended(self) -> Ended:
        """The end of an orphaned response nothing resumed."""
        assert self._orphan is not None
        return Ended(self._orphan)


async def _nothing_runs(service: Service, session_id: str) -> bool:
    return await service.any_running_turn_id(session_id) is None


async def follow_response(
    service: Service, record: SessionRecord, head: str, start: int, *, patience: float
) -> AsyncGenerator[Step, None]:
    """The steps of the response led by ``head`` (whose first event is numbered ``start``)
    from its start until it ends: the log and the ring, then live. Ends after an
    :class:`Ended` or a :class:`Cut`, or with no step when the server closes the stream."""
    scope = Scope(head)
    follower = Follower(service, record)
    try:
        await follower.open()
        batch: list[Any] | None = await follower.catch_up(start - 1, exact=False)
        caught_up = False
        while batch is not None:
            for item in batch:
                if isinstance(item, Reset):
                    yield Cut()
                    return
                if isinstance(item, TransientFrame):
                    continue
                step = scope.admit(frame_event(item))
                if step is not None:
                    yield step
                    if isinstance(step, Ended):
                        return
            if not batch or not caught_up:
                # After the backlog (a resume after a restart holds the whole story) and
                # whenever nothing came: an orphan ending nothing resumes is the end.
                if scope.orphaned and await _nothing_runs(service, record.id):
                    yield scope.ended()
                    return
                if caught_up:
                    yield Idle()
                caught_up = True
            batch = await follower.next(patience)
    finally:
        follower.close()


async def replay_response(
    service: Service, record: SessionRecord, head: str, start: int
) -> tuple[list[dict[str, Any]], Ended | None]:
    """The events of the response led by ``head`` that the journal (and this process's
    ring) holds now, and its end if it ended (a poll)."""
    scope = Scope(head)
    follower = Follower(service, record)
    taken: list[dict[str, Any]] = []
    try:
        for item in await follower.catch_up(start - 1, exact=False):
            if isinstance(item, Reset | TransientFrame):
                continue
            step = scope.admit(frame_event(item))
            if isinstance(step, Took):
                taken.append(step.event)
            elif isinstance(step, Ended):
                return taken, step
    finally:
        follower.close()
    if scope.orphaned and await _nothing_runs(service, record.id):
        return taken, scope.ended()
    return taken, None
