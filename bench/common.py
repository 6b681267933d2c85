"""Shared pieces of the benchmarks in ``bench/``: environment, guards, counters, drover runs.

* :func:`environment` — the lines every script prints first (Python, CPUs, SQLite, commit).
* :func:`forbid_network` — refuses any connection that is not to the loopback interface.
* :class:`CommitCounter` — counts SQLite commits per database file by tracing every statement
  of every connection opened through ``sqlite3.connect`` (patched in the benchmark process).
* :func:`proc_io` — this process's ``/proc/self/io`` counters.
* :func:`run_drover` — one turn through drover's real loop, with or without the journal.

The fake LLM the benchmarks talk to lives in :mod:`fakeserver`.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import platform
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# -- environment ---------------------------------------------------------------------------------


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _fs_type(path: Path) -> str:
    """The file system type holding ``path`` (from /proc/mounts; longest mount-point match)."""
    best, kind = "", "unknown"
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    target = str(path.resolve())
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1]
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind


def environment(temp_dir: Path | None = None) -> list[str]:
    """Lines describing where the figures were measured."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    try:
        from importlib.metadata import version

        drover_version = version("drover")
    except Exception:
        drover_version = "unknown"
    lines = [
        f"python   {platform.python_implementation()} {platform.python_version()} "
        f"({sys.executable})",
        f"machine  {platform.system()} {platform.release()} {platform.machine()}; "
        f"CPUs: {os.cpu_count()} (usable {usable}); load avg {load}",
        f"sqlite   {sqlite3.sqlite_version} (python sqlite3 module)",
        f"drover   {drover_version}, checkout {_git_commit()} (uncommitted changes may apply)",
    ]
    if temp_dir is not None:
        lines.append(f"temp dir {temp_dir} on {_fs_type(temp_dir)}")
    return lines


def print_environment(title: str, temp_dir: Path | None = None) -> None:
    print(f"== {title}")
    for line in environment(temp_dir):
        print(f"   {line}")
    print()


# -- guards --------------------------------------------------------------------------------------


def _loopback(address: object) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths and the like
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def forbid_network() -> None:
    """Make every socket connection to a non-loopback address fail (no traffic leaves here)."""
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise ConnectionRefusedError(f"bench: network access to {address!r} is forbidden")
        original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _loopback(address):
            raise ConnectionRefusedError(f"bench: network access to {address!r} is forbidden")
        return original_connect_ex(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]


def quiet_environment() -> None:
    """Environment variables that keep the peer frameworks from phoning home."""
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    os.environ["LANGCHAIN_TRACING_V2"] = "false"
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["OPENAI_API_KEY"] = os.environ.get("BENCH_FAKE_KEY", "sk-fake-bench")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        os.environ.pop(var, None)


# -- SQLite commit counting ----------------------------------------------------------------------

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


@dataclass(slots=True)
class Counts:
    commits: int = 0
    rollbacks: int = 0
    statements: int = 0
    pragmas: set[str] = field(default_factory=set)


class CommitCounter:
    """Counts committed transactions per database file.

    ``sqlite3.connect`` is replaced by a wrapper that installs a trace callback
    (``Connection.set_trace_callback``) on each new connection while the counter is active. A
    commit is an executed ``COMMIT``/``END`` statement, or a write statement (INSERT, UPDATE,
    DELETE, REPLACE, CREATE, DROP, ALTER) run while the connection was in autocommit mode (then
    SQLite commits it by itself). Python's implicit ``BEGIN``/``COMMIT`` are traced like any
    other statement. The trace costs a little time, so timed runs leave the counter inactive.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counts] = {}
        self.active = False
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        original = sqlite3.connect

        def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = original(database, *args, **kwargs)
            if self.active:
                self._watch(conn, _db_key(database))
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        sqlite3.dbapi2.connect = connect  # type: ignore[assignment]

    def _watch(self, conn: sqlite3.Connection, key: str) -> None:
        with self._lock:
            counts = self._counts.setdefault(key, Counts())
        # The transaction state is followed from the statements themselves: a callback that
        # held the connection would keep it alive (sqlite3 connections take no weak reference).
        state = {"in_tx": conn.in_transaction, "savepoints": 0}

        def trace(statement: str) -> None:
            head = statement.lstrip()[:10].upper()
            with self._lock:
                counts.statements += 1
                if head.startswith("BEGIN"):
                    state["in_tx"] = True
                elif head.startswith(("COMMIT", "END")):
                    counts.commits += 1
                    state["in_tx"], state["savepoints"] = False, 0
                elif head.startswith("ROLLBACK") and "TO" not in statement.upper().split()[1:3]:
                    counts.rollbacks += 1
                    state["in_tx"], state["savepoints"] = False, 0
                elif head.startswith("SAVEPOINT"):
                    state["savepoints"] += 1
                    if not state["in_tx"]:
                        state["in_tx"] = True
                elif head.startswith("RELEASE"):
                    state["savepoints"] = max(0, state["savepoints"] - 1)
                    if state["savepoints"] == 0 and state["in_tx"]:
                        counts.commits += 1
                        state["in_tx"] = False
                elif head.startswith(_WRITES) and not state["in_tx"]:
                    counts.commits += 1
                elif head.startswith("PRAGMA") and "=" in statement:
                    counts.pragmas.add(" ".join(statement.split()).rstrip(";"))

        conn.set_trace_callback(trace)

    def counts(self, path: str | os.PathLike[str]) -> Counts:
        with self._lock:
            found = self._counts.get(_db_key(path), Counts())
            return Counts(found.commits, found.rollbacks, found.statements, set(found.pragmas))

    def pragmas(self, path: str | os.PathLike[str]) -> list[str]:
        """The PRAGMA assignments run on the database's connections, sorted."""
        return sorted(self.counts(path).pragmas)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


def _db_key(database: Any) -> str:
    text = os.fsdecode(database) if isinstance(database, str | bytes | os.PathLike) else ""
    if text.startswith("file:"):
        text = text[5:].split("?", 1)[0]
    if not text or text == ":memory:":
        return ":memory:"
    return os.path.realpath(text)


def db_files_size(path: Path) -> tuple[int, int]:
    """(size of the database file, size of its ``-wal`` file) in bytes, 0 when absent."""

    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except FileNotFoundError:
            return 0

    return size(path), size(Path(f"{path}-wal"))


def checkpointed_size(path: Path) -> int:
    """Size of the database after folding its WAL in (``wal_checkpoint(TRUNCATE)``)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    db, wal = db_files_size(path)
    return db + wal


# -- /proc/self/io -------------------------------------------------------------------------------


def proc_io() -> dict[str, int] | None:
    """This process's I/O counters (all threads), or None where /proc/self/io is missing.

    ``wchar`` counts bytes handed to write-like system calls (files, pipes and sockets alike);
    ``write_bytes`` counts bytes the process caused to be sent to the storage layer (page-cache
    pages dirtied in files on a block device; tmpfs and sockets do not count).
    """
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        with contextlib.suppress(ValueError):
            out[name.strip()] = int(value)
    return out


def io_delta(before: Mapping[str, int] | None, after: Mapping[str, int] | None) -> dict[str, int]:
    if before is None or after is None:
        return {}
    return {k: after[k] - before.get(k, 0) for k in after}


# -- formatting ----------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *[line(r) for r in cells[1:]]])


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


_VOCABULARY = (
    "the journal keeps every delta of the answer while it streams so a crash loses at most a "
    "quarter second of text and the next turn resumes from what was written function returns "
    "value error retry tool call result database commit page"
)


def words(n_chars: int, seed: int = 7) -> str:
    """Deterministic English-like text of exactly ``n_chars`` characters (words and spaces)."""
    vocabulary = _VOCABULARY.split()
    out: list[str] = []
    size = 0
    state = seed
    while size < n_chars:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        word = vocabulary[state % len(vocabulary)]
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:n_chars]


# -- drover runs ---------------------------------------------------------------------------------


@dataclass(slots=True)
class DroverRun:
    seconds: float
    #: CPU time of this process (all its threads) during the turn.
    cpu: float
    status: str
    text: str


def drover_provider(protocol: str, base_url: str) -> Any:
    """A real drover provider (``anthropic``, ``openai`` Chat Completions or OpenAI
    ``responses``) for ``base_url``, the address its SDK is given (the fake's root for
    Anthropic, its ``/v1`` for OpenAI)."""
    knobs: dict[str, Any] = {"api_key": "bench-key", "base_url": base_url, "max_retries": 0}
    if protocol == "anthropic":
        from drover.providers.anthropic import AnthropicProvider

        return AnthropicProvider("fake-model", **knobs)
    if protocol == "responses":
        from drover.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider("fake-model", **knobs)
    from drover.providers.openai_chat import OpenAIChatProvider

    return OpenAIChatProvider("fake-model", **knobs)


async def run_drover(
    *,
    provider: Any,
    tools: Any,
    workdir: Path,
    prompt: str,
    max_turns: int,
    db: Path | None,
) -> DroverRun:
    """One turn through the real loop: with the journal (Runner + SqliteStore at ``db``) or,
    with ``db=None``, a plain AgentSession whose only sink records the events in memory.

    The timed part is the turn itself (``Runner.run`` / ``AgentSession.run``, journal close
    included); opening the store and creating the session are set-up and are not timed.
    """
    from drover.runtime.runner import Runner
    from drover.store import SqliteStore
    from drover.turn.loop import LoopSettings
    from drover.turn.permissions import PermissionPolicy
    from drover.turn.state import AgentSession

    try:
        from drover.core.conversation import ConversationManager
        from drover.core.sinks import EventRecorder
    except ImportError:  # a --before source from before these modules were renamed
        from drover.channel import EventRecorder  # type: ignore[no-redef]
        from drover.convo import ConversationManager  # type: ignore[no-redef]

    settings = LoopSettings(max_turns=max_turns, compaction=False, stream_retries=0)
    policy = PermissionPolicy("allow")
    if db is None:
        session = AgentSession(
            provider=provider, tools=tools, workdir=workdir, policy=policy, settings=settings
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        outcome = await session.run(prompt, EventRecorder())
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    else:
        store = SqliteStore(db)
        await store.open()
        try:
            runner = Runner(store)
            record = await runner.open_session(workdir=workdir, model="fake-model")
            session = await runner.agent_session(
                record,
                provider=provider,
                tools=tools,
                workdir=workdir,
                policy=policy,
                settings=settings,
                convo=ConversationManager(),
            )
            started, cpu_started = time.perf_counter(), time.process_time()
            outcome = await runner.run(session, prompt)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        finally:
            await store.close()
    text = getattr(outcome.event, "text", "")
    return DroverRun(seconds=seconds, cpu=cpu, status=outcome.event.type, text=text)


def add_version_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--before SRC`` / ``--after SRC``: measure another commit's ``src/`` beside this one."""
    parser.add_argument(
        "--before",
        type=Path,
        help="a src/ directory of another commit (e.g. from `git archive`): " + what,
    )
    parser.add_argument(
        "--after", type=Path, help="with --before: a src/ directory instead of this checkout's"
    )


def src_env(src: Path | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a child that imports drover from ``src`` (None:
    this checkout's)."""
    out = dict(os.environ if env is None else env)
    if src is not None:
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), out.get("PYTHONPATH")]))
    return out


def versions(options: argparse.Namespace) -> list[tuple[str, Path | None]]:
    """The (label, src) pairs to measure: this checkout alone, or before and after."""
    if options.before is None:
        return [("this", None)]
    after = None if options.after is None else options.after.resolve()
    return [("before", options.before.resolve()), ("after", after)]


# -- instructions under valgrind (bench/loop_instructions.py, bench/peers_instructions.py) ------

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def need_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")


def count_instructions(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run ``argv`` under ``valgrind --tool=callgrind``: the instructions its process executed
    (all threads; not its children) and what it printed."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    done = subprocess.run(
        command, capture_output=True, text=True, env=dict(env), check=False, timeout=3600
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise SystemExit(f"a counted run failed: {' '.join(argv)}\n{tail}")
    return int(found.group(1)), done.stdout


def stretch_flush_interval(factor: float) -> None:
    """Make every journal's flush interval ``factor`` times its default (the child runs that
    much slower under valgrind; the gate counts wall time)."""
    try:
        from drover.journal.journal import Journal
    except ImportError:  # a --before source from before the journal had a package of its own
        from drover.store.journal import Journal  # type: ignore[no-redef]

    original = Journal.__init__

    def init(self: Journal, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("flush_interval", 0.25)
        kwargs["flush_interval"] = float(kwargs["flush_interval"]) * factor  # type: ignore[arg-type]
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    Journal.__init__ = init  # type: ignore[method-assign]
