"""Test doubles for the journal tests: a fake clock with a fake sleep, a recording store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from drover.errors import StoreError
from drover.journal.writes import (
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    EndTurn,
    JournalWrite,
    UpsertToolCall,
    with_message,
    with_output,
)
from drover.store.sqlite.store import SqliteStore


class FakeClock:
    """``clock()`` returns ``now``; ``sleep`` returns once :meth:`advance` passes its deadline."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    @property
    def sleepers(self) -> int:
        return len(self._sleepers)

    async def sleep(self, delay: float) -> None:
        if delay <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.now + delay, future)
        self._sleepers.append(entry)
        try:
            await future
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, future in list(self._sleepers):
            if deadline <= self.now + 1e-9 and not future.done():
                future.set_result(None)


class RecordingStore(SqliteStore):
    """A SQLite store that records the journal's writes and fails them on request."""

    def __init__(self, path: Any, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.failures: dict[str, int] = {}
        self._changed = asyncio.Event()

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait (without timing) until ``predicate`` holds after some recorded write."""
        while not predicate():
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout=10)

    def _before(self, name: str, args: tuple[Any, ...]) -> None:
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            self.calls.append((f"{name}!", args))
            self._changed.set()
            raise StoreError(f"injected failure of {name}")

    def _after(self, name: str, args: tuple[Any, ...]) -> None:
        self.calls.append((name, args))
        self._changed.set()

    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """The writes, recorded as the calls they stand for (failing before any is made)."""
        recorded = [call for write in writes for call in _as_calls(write)]
        for name, args in recorded:
            self._before(name, args)
        results = await super().write_batch(writes)
        for name, args in recorded:
            self._after(name, args)
        return results


def _as_calls(write: JournalWrite) -> list[tuple[str, tuple[Any, ...]]]:
    """The recorded names and arguments of the calls a write stands for (a
    message with the log row that refers to it: both, the row with the message in place)."""
    call = _as_call(write)
    out = [] if call is None else [call]
    if isinstance(write, AppendMessage) and write.logged is not None:
        row = write.logged
        out.append(
            ("append_event", (row.session_id, row.turn_id, with_message(row.event, write.message)))
        )
    elif isinstance(write, UpsertToolCall) and write.logged is not None:
        row = write.logged
        out.append(
            ("append_event", (row.session_id, row.turn_id, with_output(row.event, write.output)))
        )
    return out


def _as_call(write: JournalWrite) -> tuple[str, tuple[Any, ...]] | None:
    """The recorded name and arguments of the call a write stands for."""
    match write:
        case AppendPartialText():
            return "append_partial_text", (write.turn_id, write.step, write.block_index, write.text)
        case AppendMessage():
            return "append_message", (write.turn_id, write.message, write.partial, write.step)
        case AppendEvent():
            return "append_event", (write.session_id, write.turn_id, dict(write.event))
        case UpsertToolCall():
            w = write
            return "upsert_tool_call", (
                w.turn_id,
                w.call_id,
                w.state,
                w.input,
                w.output,
                w.read_only,
                w.step,
            )
        case EndTurn():
            return "end_turn", (write.turn_id, write.status, write.reason, write.error)
    return None


@contextlib.asynccontextmanager
async def traced(store: SqliteStore, *, by_connection: bool = False) -> AsyncIterator[list[str]]:
    """The statements ``store`` runs meanwhile, on its worker's connection and on the one its
    writes run on from the calling thread; with ``by_connection``, each as ``"worker: VERB"``
    or ``"here: VERB"`` (its first word)."""
    statements: list[str] = []

    def trace(name: str | None) -> Callable[[Any], None]:
        def record(sql: str) -> None:
            statements.append(f"{name}: {sql.split()[0]}" if by_connection else sql)

        return lambda conn: conn.set_trace_callback(None if name is None else record)

    await store.connection._call(trace("worker"))
    if store.connection._here is not None:
        trace("here")(store.connection._here)
    try:
        yield statements
    finally:
        await store.connection._call(trace(None))
        if store.connection._here is not None:
            trace(None)(store.connection._here)
