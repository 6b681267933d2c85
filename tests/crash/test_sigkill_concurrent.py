"""Two live ``drover -p`` processes on ONE SQLite file: no recovery takes a live turn.

Crash recovery runs whenever a process opens the store: it interrupts every ``running`` turn
whose owner is dead or whose lease ran out. Here the turns are live, so every recovery must
leave them alone. Each turn holds in a ``bash`` call that reads a named pipe (its gate), so
the test decides when it may finish:

1. ``left`` starts its turn and waits at its gate;
2. ``right`` starts (its start-up recovery sees ``left`` running) and waits at its gate; a new
   store in this process recovers nothing either;
3. ``left`` is released and completes while ``right`` still runs;
4. a second ``left`` turn starts (its recovery sees ``right`` running) and completes;
5. ``right`` is released and completes.

Every run must exit 0 and every turn end ``completed`` with its tool output stored.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

from drover.store import open_store
from drover.testing import FakeLLMServer, Scenario

from .launch import DEADLINE, POLL_INTERVAL, ForkServer, drover_argv, drover_env, launcher_for
from .watch import DroverProcess, Watch, on_line, turn_statuses

GATED = "read -r word < gate.fifo; echo released $word"


def open_gate(workdir: Path, word: str, proc: DroverProcess) -> None:
    """Write ``word`` into the gate once its reader (the bash call) has opened it."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            fd = os.open(workdir / "gate.fifo", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: nobody has the pipe open for reading yet
                raise
            assert proc.alive(), proc.describe()
            assert time.monotonic() < deadline, "the gated bash call never opened its gate"
            time.sleep(POLL_INTERVAL)
            continue
        try:
            os.write(fd, f"{word}\n".encode())
        finally:
            os.close(fd)
        return


def test_two_processes_share_one_database_and_keep_their_live_turns(
    tmp_path: Path, fork_server: ForkServer
) -> None:
    db = tmp_path / "shared.db"
    launcher = launcher_for("fork", fork_server)
    servers: list[FakeLLMServer] = []
    procs: list[DroverProcess] = []

    def start(name: str, session: str, responses: list[dict[str, object]]) -> DroverProcess:
        workdir = tmp_path / name
        workdir.mkdir()
        if any("tool_calls" in r for r in responses):
            os.mkfifo(workdir / "gate.fifo")
        server = FakeLLMServer(Scenario.from_data(responses))
        server.start()
        servers.append(server)
        argv = drover_argv(
            f"Task for {name}.",
            base_url=server.anthropic_base_url,
            db=db,
            session=session,
            workdir=workdir,
        )
        proc = DroverProcess(
            launcher, argv, env=drover_env(tmp_path), stderr_path=tmp_path / f"{name}.err"
        )
        procs.append(proc)
        return proc

    def gated(tag: str) -> list[dict[str, object]]:
        call = {"id": f"toolu_gate_{tag}", "name": "bash", "input": {"command": GATED}}
        return [{"text": f"{tag} waits. ", "tool_calls": [call]}, {"text": f"{tag} done."}]

    def running_tool(proc: DroverProcess) -> None:
        watch = Watch(proc=proc, workdir=tmp_path, db=db, requests=lambda: 0)
        on_line("tool_start")(watch)

    def statuses(session: str) -> list[str]:
        return asyncio.run(turn_statuses(db, session))

    try:
        left = start("left", "left", gated("left"))
        running_tool(left)
        right = start("right", "right", gated("right"))
        running_tool(right)
        assert statuses("left") == statuses("right") == ["running"]

        async def recover_now() -> list[str]:
            store = open_store(str(db))
            await store.open()
            try:
                return await store.recover_orphans()
            finally:
                await store.close()

        assert asyncio.run(recover_now()) == [], "a new store recovered a live turn"

        open_gate(tmp_path / "left", "L", left)
        assert left.wait() == 0, left.describe()
        assert right.alive(), right.describe()
        assert statuses("right") == ["running"], "the right turn was taken while it ran"

        again = start("left-again", "left", [{"text": "left again."}])
        assert again.wait() == 0, again.describe()
        assert right.alive(), right.describe()
        assert statuses("right") == ["running"], "a starting process recovered a live turn"

        open_gate(tmp_path / "right", "R", right)
        assert right.wait() == 0, right.describe()
    finally:
        for proc in procs:
            proc.close()
        for server in servers:
            server.stop()

    assert statuses("left") == ["completed", "completed"]
    assert statuses("right") == ["completed"]
    for server in servers:
        assert server.violations == [] and server.unexpected == [], server.violations
    for proc in procs:
        assert "Traceback" not in proc.stderr(), proc.describe()

    async def outputs() -> dict[str, str | None]:
        store = open_store(str(db))
        await store.open()
        try:
            calls = [
                *await store.tool_calls(session_id="left"),
                *await store.tool_calls(session_id="right"),
            ]
            return {c.call_id: c.output for c in calls}
        finally:
            await store.close()

    assert asyncio.run(outputs()) == {
        "toolu_gate_left": "released L\n",
        "toolu_gate_right": "released R\n",
    }
