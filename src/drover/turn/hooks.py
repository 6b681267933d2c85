"""Hooks: commands the user configured to run around tool calls and at a turn's end.

Configured in ``config.toml`` as ``[[hooks]]`` (:mod:`drover.config.tables`): ``event`` is
``pre_tool``, ``post_tool`` or ``turn_end``; ``tool`` (optional) is a permission rule saying
which calls a tool hook is about (``bash``, ``bash(git *)``, ``write_file(src/**)``), matched
as a deny rule is — any ``git`` command anywhere in a command, a path as written or where it
leads (:mod:`drover.core.rules`) — so a hook cannot be dodged by spelling; the
``command`` runs with ``/bin/bash -c`` in the working directory, **in the same sandbox as the
``bash`` tool** (a sandbox that is wanted but unavailable runs no hook), with the event as one
JSON object on stdin and a ``timeout`` (60 s) after which its process group is killed::

    pre_tool   {"event", "session_id", "turn_id", "cwd", "call_id", "tool_name", "tool_input"}
    post_tool  the same, and "tool_response": {"output", "is_error"}
    turn_end   {"event", "session_id", "turn_id", "cwd", "status", "reason", "text"}

What the exit status does, as in Claude Code:

==============  =======================================================================
``pre_tool``    0 lets the call go on; 2 blocks it: it ends ``denied`` and the model gets
                the hook's stderr. Another status is a failure that does not block (the
                call goes on; the failure is recorded). A hook that times out, cannot
                start, or has no sandbox to run in blocks the call: a check that could not
                be made is not a pass.
``post_tool``   2 adds the hook's stderr to the result the model sees (the call has run);
                anything else is recorded only.
``turn_end``    runs once the turn's end is recorded (not when the turn was interrupted);
                a failure is logged.
==============  =======================================================================

The files a hook's command names in the working directory (:func:`hook_scripts`) are
protected paths: the sandbox mounts them read-only and the file tools refuse to write them,
so the model cannot rewrite a check to ``exit 0``.

Tool hooks run after the call's input is validated and the permission rules did not refuse
it, before the user is asked (a blocked call asks no one), in configuration order; the first
that blocks stops the rest. Each run of a tool hook is a :class:`~drover.core.events.HookRun` event
of the turn — journaled in the event log with the call's id, its outcome, exit status and
stderr — and a blocked call's record holds the reason as its output, so both the call and the
log show what a hook did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drover.config.tables import HookSpec
from drover.core.events import HookOutcome, HookPoint, TerminalEvent
from drover.core.rules import main_argument
from drover.core.shell import command_words
from drover.tools.base import Tool
from drover.tools.protect import normalized
from drover.tools.sandbox import SandboxStatus
from drover.turn.permissions import call_targets

#: Characters of a hook's stderr kept (in the event, and for the model).
MESSAGE_CHARS = 4000
#: Seconds between SIGTERM and SIGKILL when a hook's process group is ended.
KILL_GRACE = 2.0

log = logging.getLogger(__name__)
#: A word with one of these is no file name a hook runs (an expansion, a text for sh -c).
_NOT_A_PATH = re.compile(r"[$\s\x00]")


@dataclass(frozen=True, slots=True)
class HookResult:
    """What one run of a hook came to."""

    spec: HookSpec
    outcome: HookOutcome
    exit_code: int | None
    #: Its stderr (cut), or why it could not run.
    message: str

    def blocks(self, point: HookPoint) -> bool:
        """Whether this result stops a ``pre_tool`` call / adds a note to a ``post_tool``
        result (module docstring)."""
        if point == "post_tool" or self.outcome == "blocked":
            return self.outcome == "blocked"
        return self.outcome == "timed_out" or (self.outcome == "failed" and self.exit_code is None)

    def note(self, point: HookPoint) -> str:
        """What the model is told of a blocking result."""
        where = f" ({self.spec.source})" if self.spec.source else ""
        said = self.message.strip() or "(it said nothing on stderr)"
        if point == "post_tool":
            return f"[post_tool hook{where}: {said}]"
        if self.outcome == "blocked" and self.exit_code == 2:
            return f"Blocked by a pre_tool hook{where}: {said}"
        return f"Blocked: a pre_tool hook{where} could not check this call: {said}"


class Hooks:
    """The hooks of an agent, and where they run (the ``bash`` tool's sandbox)."""

    def __init__(
        self,
        specs: Sequence[HookSpec],
        *,
        workdir: Path,
        sandbox: SandboxStatus | None,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self.specs = tuple(specs)
        self.workdir = workdir
        self.sandbox = sandbox
        self.kill_grace = kill_grace

    def __bool__(self) -> bool:
        return bool(self.specs)

    def for_call(self, point: HookPoint, tool: Tool, input: Mapping[str, Any]) -> list[HookSpec]:
        """The hooks of ``point`` that are about this call, in configuration order."""
        argument = main_argument(tool)
        workdir = str(self.workdir)
        targets = call_targets(argument, input, workdir)
        return [
            spec
            for spec in self.specs
            if spec.event == point
            and (
                spec.tool is None
                or spec.tool.matches(
                    tool.name,
                    input,
                    argument=argument,
                    workdir=workdir,
                    anywhere=True,
                    targets=targets,
                )
            )
        ]

    async def turn_end(
        self, session_id: str, turn_id: str, event: TerminalEvent, text: str
    ) -> None:
        """Run the ``turn_end`` hooks (their failures are logged)."""
        payload = {
            "event": "turn_end",
            "session_id": session_id,
            "turn_id": turn_id,
            "cwd": str(self.workdir),
            "status": event.type,
            "reason": getattr(event, "reason", None),
            "text": text,
        }
        for spec in self.specs:
            if spec.event != "turn_end":
                continue
            result = await self.run(spec, payload)
            if result.outcome != "passed":
                log.warning(
                    "turn_end hook (%s) %s: %s",
                    spec.source,
                    result.outcome.replace("_", " "),
                    result.message.strip() or f"exit status {result.exit_code}",
                )

    async def run(self, spec: HookSpec, payload: Mapping[str, Any]) -> HookResult:
        """Run one hook with ``payload`` on its stdin; never raises but for cancellation
        (its process group is ended first)."""
        data = json.dumps(payload, ensure_ascii=False).encode()
        sandbox = self.sandbox
        shell = ["/bin/bash", "-c", spec.command]
        try:
            if sandbox is None or sandbox.mode == "off":
                return await self._spawn(spec, shell, None, (), data)
            if not sandbox.active:
                why = f"the sandbox hooks run in is unavailable ({sandbox.reason})"
                return HookResult(spec, "failed", None, why)
            guard_r, guard_w = os.pipe()
            try:
                async with sandbox.launch(shell, self.workdir, guard_fd=guard_r) as argv:
                    return await self._spawn(spec, argv, sandbox.env(), (guard_r,), data)
            finally:
                os.close(guard_r)
                os.close(guard_w)
        except OSError as exc:
            return HookResult(spec, "failed", None, f"cannot start: {exc.strerror or exc}")
        except Exception as exc:  # the sandbox refusing (a ToolError), or a bug: not fatal
            return HookResult(spec, "failed", None, f"cannot run: {exc}")

    async def _spawn(
        self,
        spec: HookSpec,
        argv: list[str],
        env: dict[str, str] | None,
        pass_fds: tuple[int, ...],
        data: bytes,
    ) -> HookResult:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self.workdir,
            env=env,
            pass_fds=pass_fds,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stdin is not None and process.stderr is not None
        stderr = asyncio.ensure_future(_read_capped(process.stderr, MESSAGE_CHARS * 4))
        timed_out = False
        try:
            try:
                async with asyncio.timeout(spec.timeout):
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        process.stdin.write(data)
                        await process.stdin.drain()
                    process.stdin.close()
                    await process.wait()
            except TimeoutError:
                timed_out = True
        finally:
            # Every path, cancellation included: nothing the hook started outlives it.
            await self._end_group(process)
            # What it wrote is still in the pipe (bounded: a process that left the group
            # could hold the pipe open).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.kill_grace):
                    await asyncio.wait([stderr])
            if not stderr.done():
                stderr.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr
        said = stderr.result().decode(errors="replace") if not stderr.cancelled() else ""
        said = said[:MESSAGE_CHARS]
        if timed_out:
            return HookResult(spec, "timed_out", None, said or f"no answer in {spec.timeout:g} s")
        code = process.returncode
        if code == 0:
            return HookResult(spec, "passed", 0, said)
        if code == 2:
            return HookResult(spec, "blocked", 2, said)
        return HookResult(spec, "failed", code, said)

    async def _end_group(self, process: asyncio.subprocess.Process) -> None:
        pgid = process.pid
        if process.returncode is None and _signal_group(pgid, signal.SIGTERM):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.kill_grace):
                    await process.wait()
        _signal_group(pgid, signal.SIGKILL)  # what the hook left in the background too
        await process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Everything ``stream`` gives until its end, keeping the first ``limit`` bytes."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


def hook_scripts(specs: Iterable[HookSpec], workdir: Path) -> tuple[Path, ...]:
    """The paths below ``workdir`` that the hooks' commands name — a script, the file given
    to an interpreter — each a word of the command with a ``/`` in it or naming something
    that exists there. The sandbox and the file tools keep them read-only (they are added to
    the protected paths): a hook the model could rewrite would be no check at all."""
    root = workdir.resolve()
    found: dict[Path, None] = {}
    for spec in specs:
        for words in command_words(spec.command):
            for word in words:
                if not word or word.startswith("-") or _NOT_A_PATH.search(word):
                    continue
                path = normalized(root / os.path.expanduser(word))
                if path == root or not path.is_relative_to(root):
                    continue
                if "/" in word or os.path.lexists(path):
                    found.setdefault(path, None)
    return tuple(found)


def tool_payload(
    point: HookPoint,
    *,
    session_id: str,
    turn_id: str,
    workdir: Path,
    call_id: str,
    tool_name: str,
    tool_input: Mapping[str, Any],
    response: tuple[str, bool] | None = None,
) -> dict[str, Any]:
    """The JSON a tool hook reads on stdin."""
    payload: dict[str, Any] = {
        "event": point,
        "session_id": session_id,
        "turn_id": turn_id,
        "cwd": str(workdir),
        "call_id": call_id,
        "tool_name": tool_name,
        "tool_input": dict(tool_input),
    }
    if response is not None:
        payload["tool_response"] = {"output": response[0], "is_error": response[1]}
    return payload
