"""Watching a drover process, killing it at a trigger, and reading what it left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.journal.records import EventRecord, StoredMessage, ToolCallRecord, TurnRecord
from drover.runtime.runner import SplitHistory, load_history
from drover.store import open_store

from .launch import DEADLINE, POLL_INTERVAL, STDERR_TAIL, Launcher
from .sched import Waits, waits

# -- the watched process ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """One stream-json event as read from the pipe, with the time it was read and how long
    the process's threads had waited for a CPU by then (see :mod:`.sched`)."""

    t: float
    data: Mapping[str, Any]
    waits: Waits = field(default_factory=Waits)

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))


@dataclass(frozen=True, slots=True)
class Moment:
    """A monotonic time and the process's run-queue waits then."""

    t: float
    waits: Waits


class DroverProcess:
    """A running ``drover ARGV`` whose stdout is read line by line."""

    def __init__(
        self,
        launcher: Launcher,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stderr_path: Path,
        stdin: int | None = None,
    ) -> None:
        self.stderr_path = stderr_path
        self._lines: list[Line] = []
        self._eof = False
        self._cond = threading.Condition()
        read_end, write_end = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            with stderr_path.open("wb") as stderr:
                self._child = launcher.spawn(
                    argv, env, devnull if stdin is None else stdin, write_end, stderr.fileno()
                )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
            os.close(devnull)
        self._stdout = os.fdopen(read_end, "rb")
        #: Run-queue waits when the process had just started.
        self.started = Moment(time.monotonic(), waits(self.pid))
        self._reader = threading.Thread(target=self._read, name=f"drover-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._child.pid

    def _read(self) -> None:
        try:
            for raw in self._stdout:
                t = time.monotonic()
                waited = waits(self.pid)
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = {"type": "<not json>", "raw": raw.decode(errors="replace")}
                if not isinstance(data, dict):
                    data = {"type": "<not an object>", "raw": data}
                with self._cond:
                    self._lines.append(Line(t, data, waited))
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    # -- observing -----------------------------------------------------------------------------

    def lines(self) -> list[Line]:
        with self._cond:
            return list(self._lines)

    def wait_line(
        self, predicate: Callable[[Line], bool], *, start: int = 0, what: str = "a line"
    ) -> int:
        """Index of the first line from ``start`` on that satisfies ``predicate``."""
        deadline = time.monotonic() + DEADLINE
        with self._cond:
            checked = start
            while True:
                for i in range(checked, len(self._lines)):
                    if predicate(self._lines[i]):
                        return i
                checked = max(checked, len(self._lines))
                if self._eof:
                    raise AssertionError(f"drover ended before {what}\n{self.describe()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {DEADLINE:g} s\n{self.describe()}")
                self._cond.wait(left)

    def wait_quiet(self, quiet: float) -> None:
        """Return once no line has arrived for ``quiet`` seconds of the process's own time
        (the process still running): the wall time since the last line, less the time its
        threads waited for a CPU meanwhile (see :mod:`.sched`)."""
        deadline = time.monotonic() + DEADLINE
        with self._cond:
            while True:
                if self._eof:
                    raise AssertionError(f"drover ended while waiting for quiet\n{self.describe()}")
                since = self._lines[-1] if self._lines else None
                mark = self.started if since is None else Moment(since.t, since.waits)
                now = Moment(time.monotonic(), waits(self.pid))
                left = mark.t + quiet + now.waits.since(mark.waits) - now.t
                if left <= 0:
                    return
                if now.t >= deadline:
                    raise AssertionError(f"output never paused for {quiet:g} s\n{self.describe()}")
                # Waiting for a CPU meanwhile moves the end: look again at least this often.
                self._cond.wait(min(left, deadline - now.t, 0.05))

    def alive(self) -> bool:
        return self._child.poll() is None

    # -- ending --------------------------------------------------------------------------------

    def kill(self) -> Moment:
        """SIGKILL the process; returns the monotonic time and run-queue waits just before
        the signal (any time the signal then takes only gives the process longer)."""
        t = time.monotonic()
        moment = Moment(t, waits(self._child.pid))
        os.kill(self._child.pid, signal.SIGKILL)
        return moment

    def wait(self, timeout: float = DEADLINE) -> int:
        """The exit code, once the process is gone and its output read to the end."""
        code = self._child.wait(timeout)
        self._reader.join(timeout)
        return code

    def close(self) -> None:
        """Make sure the process is gone (it is killed if still running) and close the pipe."""
        if self._child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._child.wait(DEADLINE)
        self._reader.join(DEADLINE)
        self._stdout.close()

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self) -> str:
        with self._cond:
            tail = [json.dumps(dict(line.data))[:200] for line in self._lines[-8:]]
        return (
            f"exit status: {self._child.poll()}\nlast lines:\n  "
            + "\n  ".join(tail or ["(none)"])
            + f"\nstderr:\n{self.stderr()[-STDERR_TAIL:]}"
        )


# -- kill triggers ----------------------------------------------------------------------------


@dataclass
class Watch:
    """What a trigger may observe or act on while the process runs."""

    proc: DroverProcess
    workdir: Path
    db: Path
    requests: Callable[[], int]
    #: Master side of the pseudo-terminal given as stdin (permission prompts), if any.
    tty: int | None = None
    #: One past the line the last line trigger matched; the next one searches from there.
    cursor: int = 0
    #: Named line indexes a kill point's checks refer to.
    marks: dict[str, int] = field(default_factory=dict)


Trigger = Callable[[Watch], None]


def on_line(
    kind: str, nth: int = 1, *, mark: str | None = None, anywhere: bool = False, **fields: Any
) -> Trigger:
    """The ``nth`` line of type ``kind`` with ``fields``, after the previous line trigger's
    line (``anywhere``: counting from the first line, for events whose order is not fixed)."""

    def matches(line: Line) -> bool:
        return line.type == kind and all(line.data.get(k) == v for k, v in fields.items())

    def trigger(w: Watch) -> None:
        index = -1 if anywhere else w.cursor - 1
        for _ in range(nth):
            index = w.proc.wait_line(
                matches, start=index + 1, what=f"line #{nth} of {kind} {dict(fields)}"
            )
        w.cursor = max(w.cursor, index + 1)
        if mark is not None:
            w.marks[mark] = index

    return trigger


def from_here() -> Trigger:
    """The next line trigger counts only lines read from now on (e.g. after a database row)."""

    def trigger(w: Watch) -> None:
        w.cursor = max(w.cursor, len(w.proc.lines()))

    return trigger


def poll_until(check: Callable[[], bool], what: str, proc: DroverProcess) -> None:
    """Re-check ``check`` every :data:`POLL_INTERVAL` until it holds (bounded by DEADLINE)."""
    deadline = time.monotonic() + DEADLINE
    while not check():
        if not proc.alive():
            raise AssertionError(f"drover ended before {what}\n{proc.describe()}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {DEADLINE:g} s\n{proc.describe()}")
        time.sleep(POLL_INTERVAL)


def on_file(name: str) -> Trigger:
    """The file ``name`` exists in the working directory."""

    def trigger(w: Watch) -> None:
        poll_until((w.workdir / name).exists, f"file {name}", w.proc)

    return trigger


def db_has_row(db: Path, sql: str) -> bool:
    """Whether ``sql`` returns a row, asked through a read-only connection."""
    if not db.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
            return c.execute(sql).fetchone() is not None
    except sqlite3.OperationalError:  # no schema yet, or the writer holds a lock this instant
        return False


def on_db_row(sql: str) -> Trigger:
    def trigger(w: Watch) -> None:
        poll_until(lambda: db_has_row(w.db, sql), f"a row for {sql!r}", w.proc)

    return trigger


def on_requests(count: int) -> Trigger:
    """The fake server has received ``count`` requests."""

    def trigger(w: Watch) -> None:
        poll_until(lambda: w.requests() >= count, f"{count} model requests", w.proc)

    return trigger


def on_quiet(seconds: float) -> Trigger:
    """No line for ``seconds``: this kill point is defined by elapsed time, on purpose."""

    def trigger(w: Watch) -> None:
        w.proc.wait_quiet(seconds)

    return trigger


def type_on_tty(text: str) -> Trigger:
    """Type ``text`` on the process's terminal (answers a permission prompt)."""

    def trigger(w: Watch) -> None:
        assert w.tty is not None, "this kill point needs tty_stdin"
        os.write(w.tty, text.encode())

    return trigger


def chain(*triggers: Trigger) -> Trigger:
    def trigger(w: Watch) -> None:
        for step in triggers:
            step(w)

    return trigger


# -- finishing runs and reading what they left ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finished:
    exit_code: int
    stdout: str
    stderr: str

    def result(self) -> Mapping[str, Any]:
        """The last JSON object printed (``--output-format json``: the result)."""
        for raw in reversed(self.stdout.splitlines()):
            with contextlib.suppress(ValueError):
                value = json.loads(raw)
                if isinstance(value, dict):
                    return value
        return {}


def run_to_end(
    launcher: Launcher, argv: Sequence[str], env: Mapping[str, str], scratch: Path
) -> Finished:
    """Run ``drover ARGV`` to its end (stdin: /dev/null)."""
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with (
        open(os.devnull, "rb") as devnull,
        out_path.open("wb") as out,
        err_path.open("wb") as err,
    ):
        child = launcher.spawn(argv, env, devnull.fileno(), out.fileno(), err.fileno())
    try:
        code = child.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(DEADLINE)
        raise
    return Finished(
        exit_code=code,
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
        stderr=err_path.read_text(encoding="utf-8", errors="replace"),
    )


def copy_db(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (WAL included), through the backup API."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def request_strings(body: object) -> list[str]:
    """Every string value in a request body (a protocol-agnostic search for content)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(body)
    return found


@dataclass(frozen=True, slots=True)
class Recovery:
    """The database of a killed run, before and after ``recover_orphans``."""

    turns_before: list[TurnRecord]
    calls_before: list[ToolCallRecord]
    messages_before: list[StoredMessage]
    recovered: list[str]
    recovered_again: list[str]
    turns: list[TurnRecord]
    calls: list[ToolCallRecord]
    #: The stored messages of the session's last turn (the killed one), partial text included.
    messages: list[StoredMessage]
    history: SplitHistory
    events: list[EventRecord]


async def recover(db: Path, session_id: str) -> Recovery:
    """Open ``db`` with a new store, recover orphaned turns and read everything back."""
    store = open_store(str(db))
    await store.open()
    try:
        turns_before = await store.turns(session_id)
        assert turns_before, f"no turn was stored for session {session_id}"
        last = turns_before[-1].id
        calls_before = await store.tool_calls(session_id=session_id)
        messages_before = await store.turn_messages(last)
        recovered = await store.recover_orphans()
        recovered_again = await store.recover_orphans()
        return Recovery(
            turns_before=turns_before,
            calls_before=calls_before,
            messages_before=messages_before,
            recovered=recovered,
            recovered_again=recovered_again,
            turns=await store.turns(session_id),
            calls=await store.tool_calls(session_id=session_id),
            messages=await store.turn_messages(last),
            history=await load_history(store, session_id),
            events=await store.events_after(session_id),
        )
    finally:
        await store.close()


async def turn_statuses(db: Path, session_id: str) -> list[str]:
    store = open_store(str(db))
    await store.open()
    try:
        return [turn.status for turn in await store.turns(session_id)]
    finally:
        await store.close()
