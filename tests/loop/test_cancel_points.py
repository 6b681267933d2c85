"""Every point where a turn can be cut: each event a consumer handles, each call on the store.

One parametrised case per point of the scripted turn of :mod:`.turn_rig` (parallel calls, a
permission wait, a mid-stream retry, a provider retry), run through the real Runner on a real
SQLite file. After each, through the journal and ``load_history``: every call has exactly one
``tool_use`` and one result, a call whose tool finished keeps its real output, no message is
stored twice, ``tool_calls`` agrees with the history, every turn ended with one terminal event,
the process's memory agrees with the journal, the next request is valid on all three
protocols — and a new turn resumes from the journal and completes.

The points are counted from a clean run at collection time, so a change of the scenario
changes the cases instead of silently testing fewer points.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from drover.core.events import Event
from drover.errors import StoreError
from drover.journal.journal import Journal
from drover.runtime import runner
from drover.runtime.runner import Runner
from drover.store.sql.dialect import SQLITE
from drover.store.sql.store import SqlStore
from drover.store.sqlite.connection import SqliteConnection
from drover.testing.scripted import Reply, ScriptedProvider, request_problems
from drover.turn.loop import TurnControl

from .turn_rig import Recorder, Rig, check_record, durable_history, terminal


@pytest.fixture(autouse=True)
def journal_retries_back_to_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The turns' journals retry a failed write as often as ever, without the pause between
    attempts (0.05 s doubling: 0.75 s for a write that fails for good): these tests look at
    what a failure leaves, not at how retries are spaced."""
    monkeypatch.setattr(runner, "Journal", functools.partial(Journal, retry_delay=0.0))


T = TypeVar("T")


class ProbeConnection(SqliteConnection):
    """A SQLite connection that tells ``probe`` of each call before making it."""

    def __init__(self, path: Any, probe: Callable[[], None]) -> None:
        super().__init__(path)
        self.probe = probe

    async def _call(self, fn: Callable[[Any], T]) -> T:
        self.probe()
        return await super()._call(fn)

    async def _write(self, fn: Callable[[Any], T]) -> T:
        # A write made on the calling thread has no await a cancellation could land at: it
        # lands at the turn's next one, after the commit, as after a shielded call.
        self.probe()
        return await super()._write(fn)


class ProbeStore(SqlStore):
    """A SQLite store that, once armed, counts its calls and cancels the turn or fails a call
    at a chosen one."""

    def __init__(self, path: Any) -> None:
        super().__init__(SQLITE, ProbeConnection(path, self._probe))
        self.armed = False
        self.calls = 0
        self.at = -1
        self.action: Literal["cancel", "fail-once", "fail-forever", "count"] = "count"
        self.task: asyncio.Task[Any] | None = None
        self.fired = False

    def arm(self, task: asyncio.Task[Any]) -> None:
        """Count (and act) from the start of the turn's task on."""
        self.task, self.armed = task, True

    def _probe(self) -> None:
        if self.armed:
            n = self.calls
            self.calls += 1
            if n == self.at and self.action == "cancel" and self.task is not None:
                self.fired = True
                self.task.cancel()
            elif (n == self.at and self.action == "fail-once") or (
                n >= self.at >= 0 and self.action == "fail-forever"
            ):
                self.fired = True
                raise StoreError(f"injected failure of store call #{n}")


class CancelAt:
    """Cancels the turn while handling its ``index``-th event: ``here`` raises the
    cancellation inside this consumer, ``next`` lets it land at the turn's next await."""

    def __init__(self, index: int, mode: str) -> None:
        self.index, self.mode = index, mode
        self.count = 0
        self.task: asyncio.Task[Any] | None = None
        self.fired: str | None = None

    async def send(self, event: Event) -> None:
        n, self.count = self.count, self.count + 1
        if n == self.index and self.task is not None:
            self.fired = event.type
            self.task.cancel()
            if self.mode == "here":
                await asyncio.sleep(0)


class RaiseAt:
    """A consumer that fails on its ``index``-th event (a closed pipe, a UI bug)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.count = 0

    async def send(self, event: Event) -> None:
        n, self.count = self.count, self.count + 1
        if n == self.index:
            raise BrokenPipeError("the consumer went away")


async def _measure() -> tuple[int, int, list[Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        store = ProbeStore(Path(tmp) / "j.db")
        rig = await Rig.open(Path(tmp) / "j.db", store)
        recorder = Recorder()
        _, outcome = await rig.run([recorder], on_task=store.arm)
        store.armed = False
        assert outcome is not None and outcome.event.type == "done", outcome
        messages = await durable_history(rig.store, rig.session_id)
        await rig.close()
        return len(recorder.events), store.calls, messages


EVENTS, STORE_CALLS, CLEAN_HISTORY = asyncio.run(_measure())


async def _resume_completes(rig: Rig, *, lossy: bool = False) -> None:
    """A new turn built from the journal alone completes with a valid request."""
    provider = ScriptedProvider([Reply(text="Picking up where it stopped.")])
    session = await rig.session(provider)
    outcome = await Runner(rig.store).run(session, "go on", [Recorder()])
    assert outcome.event.type == "done"
    (request,) = provider.requests
    ids = [u.id for m in request.messages for u in m.tool_uses]
    assert len(ids) == len(set(ids))
    for protocol, problems in request_problems(request.messages, request.system).items():
        assert not problems, (protocol, problems)
    await check_record(rig, lossy=lossy)


def test_the_scenario_has_the_points_it_claims() -> None:
    # Group commit makes a tool step ~4 store calls: 18 in this turn (each a cut point).
    assert EVENTS > 40 and STORE_CALLS > 15, (EVENTS, STORE_CALLS)
    uses = [u.name for m in CLEAN_HISTORY for u in m.tool_uses]
    assert uses == ["look", "note", "note"]


@pytest.mark.parametrize("mode", ["here", "next"])
@pytest.mark.parametrize("index", range(EVENTS))
async def test_cancel_at_every_event(tmp_path: Path, index: int, mode: str) -> None:
    rig = await Rig.open(tmp_path / "j.db")
    cancel = CancelAt(index, mode)
    recorder = Recorder()

    def bind(task: asyncio.Task[Any]) -> None:
        cancel.task = task

    session, outcome = await rig.run([recorder, cancel], on_task=bind)
    assert cancel.fired is not None
    end = terminal(recorder.events)
    assert end is not None, "no terminal event"
    status = (await rig.store.turns(rig.session_id))[-1].status
    if end.type == "done":  # the interruption came after the turn had ended
        assert status == "completed"
    else:
        assert end.reason == "interrupted" and status == "interrupted", end  # type: ignore[union-attr]
        assert outcome is None
    await check_record(rig, session)
    await _resume_completes(rig)
    await rig.close()


@pytest.mark.parametrize("index", range(STORE_CALLS))
async def test_cancel_at_every_store_await(tmp_path: Path, index: int) -> None:
    store = ProbeStore(tmp_path / "j.db")
    rig = await Rig.open(tmp_path / "j.db", store)
    store.at, store.action = index, "cancel"
    session, _ = await rig.run([Recorder()], on_task=store.arm)
    store.armed = False
    assert store.fired
    await check_record(rig, session)
    await _resume_completes(rig)
    await rig.close()


@pytest.mark.parametrize("index", range(EVENTS))
async def test_a_failing_consumer_is_detached_and_the_turn_goes_on(
    tmp_path: Path, index: int
) -> None:
    rig = await Rig.open(tmp_path / "j.db")
    recorder = Recorder()
    session, outcome = await rig.run([RaiseAt(index), recorder])
    assert outcome is not None and outcome.event.type == "done"
    assert recorder.events[-1].type == "done"
    assert await check_record(rig, session) == CLEAN_HISTORY
    await rig.close()


@pytest.mark.parametrize("index", range(STORE_CALLS))
async def test_a_store_call_failing_once_changes_nothing(tmp_path: Path, index: int) -> None:
    store = ProbeStore(tmp_path / "j.db")
    rig = await Rig.open(tmp_path / "j.db", store)
    store.at, store.action = index, "fail-once"
    try:
        session, outcome = await rig.run([Recorder()], on_task=store.arm)
    except StoreError:
        # Only the turn's own set-up may fail outright (before anything ran).
        assert not rig.effects.started
        store.armed = False
        assert await rig.store.turns(rig.session_id) == []
        await rig.close()
        return
    store.armed = False
    assert outcome is not None and outcome.event.type == "done", outcome
    assert await check_record(rig, session) == CLEAN_HISTORY
    await rig.close()


@pytest.mark.parametrize("index", range(STORE_CALLS))
async def test_a_store_failing_for_good_stops_the_turn_and_keeps_a_valid_prefix(
    tmp_path: Path, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ProbeStore(tmp_path / "j.db")
    rig = await Rig.open(tmp_path / "j.db", store)
    # How many tools had started when the journal's failure stopped the turn.
    started_at_stop: list[int] = []
    stop = TurnControl.stop

    def spy(control: TurnControl, *args: Any, **kwargs: Any) -> None:
        started_at_stop.append(len(rig.effects.started))
        stop(control, *args, **kwargs)

    monkeypatch.setattr(TurnControl, "stop", spy)
    store.at, store.action = index, "fail-forever"
    recorder = Recorder()
    failure: StoreError | None = None
    try:
        _, outcome = await rig.run([recorder], on_task=store.arm)
    except StoreError as exc:
        failure = exc
    if failure is not None:
        # Failed before the turn began, or the end of a finished turn could not be recorded:
        # either way the caller is told, never a silent success.
        store.armed = False
        turns = await rig.store.turns(rig.session_id)
        assert not turns or "journal" in str(failure), failure
        if turns:
            await rig.store.recover_orphans(is_alive=lambda owner: False)
            await check_record(rig, lossy=True)
        await rig.close()
        return
    store.armed = False
    assert outcome is not None
    if outcome.event.type == "done":
        # The failure hit after the end of the turn was recorded (the last writes).
        assert (await rig.store.turns(rig.session_id))[-1].status == "completed"
    else:
        assert outcome.event.reason == "error", outcome.event  # type: ignore[union-attr]
        assert "journal" in outcome.event.error  # type: ignore[union-attr]
        # Nothing started after the journal stopped recording.
        assert started_at_stop and len(rig.effects.started) == started_at_stop[0]
    # The process that wrote it is gone; a later one recovers what it left.
    await rig.store.recover_orphans(is_alive=lambda owner: False)
    await check_record(rig, lossy=True)
    await _resume_completes(rig, lossy=True)
    await rig.close()
