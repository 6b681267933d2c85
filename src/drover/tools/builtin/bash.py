"""The ``bash {command}`` tool: one shell command in the working directory, leaving nothing behind.

The command runs as ``/bin/bash -c COMMAND`` in a new session (its own process group), with
stdin closed and stdout and stderr merged. Output is streamed to ``ctx.on_output`` as it
arrives, so an interrupted call keeps what it printed, and kept in bounded memory
(:class:`~drover.tools.workspace.OutputBuffer`).

However the call ends, the whole process group is ended: SIGTERM, a short grace period, then
SIGKILL, and the shell is reaped. That covers the normal end (background jobs the command
left running), the timeout (an error result with the output so far and a note) and task
cancellation (the ``CancelledError`` is re-raised once the group is gone).

With an active :class:`~drover.tools.sandbox.SandboxStatus` the shell runs inside bubblewrap
(see :mod:`drover.tools.sandbox`); the process group is then bubblewrap's, and ending it also
ends the sandbox's PID namespace, so processes that left the group die too; only then does the
sandbox's launch context close (placeholders and the call's cgroup go with it). A failure the
sandbox caused gets a note saying so. A sandbox that was wanted but is unavailable refuses
every command rather than running it unsandboxed.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from drover.errors import ToolError
from drover.tools.base import ToolContext, ToolOutput
from drover.tools.decorator import FunctionTool
from drover.tools.sandbox import SandboxStatus, sandbox_hint
from drover.tools.workspace import MAX_OUTPUT_CHARS, OutputBuffer

#: Seconds a command may run before its process group is killed.
DEFAULT_TIMEOUT = 120.0
#: Seconds between SIGTERM and SIGKILL when ending a process group.
KILL_GRACE = 2.0


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # only a reused id could belong to someone else; leave it alone
        return False
    return True


class _ShellProtocol(asyncio.SubprocessProtocol):
    """Receives the merged output as it arrives and tells when the shell and the pipe are done.

    ``Process.wait()`` of :mod:`asyncio.subprocess` (3.11) also waits for the pipes to close,
    which a background job can hold open; the protocol keeps the two apart.
    """

    def __init__(self, buffer: OutputBuffer, on_output: Callable[[str], None]) -> None:
        self.exited = asyncio.Event()
        self.output_closed = asyncio.Event()
        #: The first exception ``on_output`` raised; raised again once the process group is gone.
        self.error: Exception | None = None
        self._buffer = buffer
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if isinstance(data, bytes):
            self._emit(self._decoder.decode(data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._emit(self._decoder.decode(b"", final=True))
            self.output_closed.set()

    def process_exited(self) -> None:
        self.exited.set()

    def _emit(self, text: str) -> None:
        if not text:
            return
        self._buffer.append(text)
        if self.error is not None:
            return
        try:
            self._on_output(text)
        except Exception as exc:  # raised from the tool, not into the event loop's handler
            self.error = exc


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"[killed by {name}]"
    return f"[exit code {code}]"


class BashTool:
    """The ``bash`` tool, with a per-instance timeout (seconds) and SIGTERM→SIGKILL grace."""

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        kill_grace: float = KILL_GRACE,
        output_limit: int = MAX_OUTPUT_CHARS,
        sandbox: SandboxStatus | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("the bash timeout must be positive")
        self.timeout = timeout
        #: None (or a status of mode ``off``) runs commands unsandboxed.
        self.sandbox = sandbox
        self.kill_grace = kill_grace
        self.output_limit = output_limit
        self._tool = FunctionTool(self._bash, name="bash", read_only=False)

    @property
    def name(self) -> str:
        return self._tool.name

    @property
    def description(self) -> str:
        note = self.sandbox.model_note() if self.sandbox is not None else ""
        return f"{self._tool.description} {note}" if note else self._tool.description

    @property
    def input_schema(self) -> Mapping[str, Any]:
        return self._tool.input_schema

    @property
    def read_only(self) -> bool:
        return False

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The validated arguments (a :class:`~drover.errors.ToolError` when they are not)."""
        return self._tool.validate(args)

    @property
    def contained(self) -> bool:
        """Every command runs sandboxed, writing at most in the workdir, without network."""
        return self.sandbox is not None and self.sandbox.contained

    def contains(self, args: Mapping[str, Any]) -> bool:
        """Whether this call is contained: the sandbox contains every command, and this one
        names no protected path (``.git``, ``.envrc``…) nor changes a repository. Such a
        write would fail in the sandbox anyway; ``sandboxed`` mode asks about it so the user
        sees the attempt."""
        command = args.get("command")
        if self.sandbox is None or not isinstance(command, str):
            return False
        return self.sandbox.contains(command)

    @property
    def sandbox_label(self) -> str:
        """How commands run, as recorded on each call: ``off``, ``workdir``, ``read-only``…"""
        return "off" if self.sandbox is None else self.sandbox.label()

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self._tool.run(args, ctx)

    def __repr__(self) -> str:
        return f"<tool bash (timeout {self.timeout:g} s, sandbox {self.sandbox_label})>"

    async def _bash(self, ctx: ToolContext, command: str) -> ToolOutput:
        """Run a shell command with /bin/bash in the working directory and return its combined
        stdout and stderr. Stdin is closed, so interactive commands fail instead of waiting.
        A command that runs too long is killed; processes it leaves in the background are ended
        when it finishes.

        Args:
            command: The shell command to run.
        """
        sandboxed = self._sandboxed()
        if not sandboxed:
            return await self._spawn(["/bin/bash", "-c", command], None, (), ctx)
        if not ctx.workdir.is_dir():
            raise ToolError(f"cannot start /bin/bash: no working directory {ctx.workdir}")
        # The guard pipe: its write end lives (close-on-exec) only in this process, so the
        # sandbox's watchdog sees end-of-file exactly when drover is gone.
        guard_r, guard_w = os.pipe()
        try:
            shell = ["/bin/bash", "-c", command]
            async with sandboxed.launch(shell, ctx.workdir, guard_fd=guard_r) as argv:
                return await self._spawn(argv, sandboxed.env(), (guard_r,), ctx)
        finally:
            os.close(guard_r)
            os.close(guard_w)

    async def _spawn(
        self,
        argv: list[str],
        env: dict[str, str] | None,
        pass_fds: tuple[int, ...],
        ctx: ToolContext,
    ) -> ToolOutput:
        buffer = OutputBuffer(self.output_limit)
        loop = asyncio.get_running_loop()
        starting = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: _ShellProtocol(buffer, ctx.on_output),
                *argv,
                cwd=ctx.workdir,
                env=env,
                pass_fds=pass_fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        try:
            transport, shell = await asyncio.shield(starting)
        except OSError as exc:
            raise ToolError(f"cannot start /bin/bash: {exc.strerror or exc}") from None
        except asyncio.CancelledError:
            # Cancelled while asyncio was still wiring the pipes: the shell may already have
            # started children. Let the start finish, then end the whole group (asyncio's own
            # clean-up would kill only the shell and leave its children running).
            with contextlib.suppress(OSError):
                transport, shell = await starting
                try:
                    await self._end_group(transport.get_pid(), shell)
                finally:
                    transport.close()
            raise
        timed_out = False
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    await shell.exited.wait()
            except TimeoutError:
                timed_out = True
            finally:
                # Runs on every path, cancellation included: no process of the group survives.
                await self._end_group(transport.get_pid(), shell)
        finally:
            transport.close()
        if shell.error is not None:
            raise shell.error
        return self._result(buffer, transport.get_returncode(), timed_out, ctx.workdir)

    def _sandboxed(self) -> SandboxStatus | None:
        """The active sandbox to run in; None runs unsandboxed (``--sandbox off``)."""
        sandbox = self.sandbox
        if sandbox is None or sandbox.mode == "off":
            return None
        if not sandbox.active:
            raise ToolError(
                f"bash is disabled: the sandbox is unavailable ({sandbox.reason}). The user "
                "can restart drover with --sandbox off to run commands unsandboxed."
            )
        return sandbox

    async def _end_group(self, pgid: int, shell: _ShellProtocol) -> None:
        """SIGTERM the group, wait (bounded) for the shell and the pipe, SIGKILL what is left."""
        try:
            if _signal_group(pgid, signal.SIGTERM):
                # The pipe closing means every process holding it has gone.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.kill_grace):
                        await shell.exited.wait()
                        await shell.output_closed.wait()
        finally:
            _signal_group(pgid, signal.SIGKILL)
        await shell.exited.wait()  # reaped by asyncio's child watcher: no zombie
        # What was written before the end is still in the pipe. A process that left the group
        # (setsid) could hold the pipe open for ever, hence the bound.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.kill_grace):
                await shell.output_closed.wait()

    def _result(
        self, buffer: OutputBuffer, code: int | None, timed_out: bool, workdir: Path
    ) -> ToolOutput:
        text, truncated = buffer.text()
        notes: list[str] = []
        if timed_out:
            notes.append(
                f"[command timed out after {self.timeout:g} s; its processes were killed. "
                "Run long jobs in smaller steps or with a shorter workload.]"
            )
        elif code:
            if self.sandbox is not None and text.startswith("bwrap: ") and code == 1:
                raise ToolError(f"the sandbox could not start the command: {text.strip()}")
            notes.append(_describe_exit(code))
        if code and self.sandbox is not None:
            hint = sandbox_hint(self.sandbox, text, workdir)
            if hint:
                notes.append(hint)
        if not text and not notes:
            return ToolOutput(content="(no output)")
        if notes and text and not text.endswith("\n"):
            text += "\n"
        content = text + "\n".join(notes)
        return ToolOutput(content=content, is_error=bool(notes), truncated=truncated)
