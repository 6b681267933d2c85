"""Running one response's tool calls: permission round-trip, parallel execution, results.

Calls run concurrently in a task group; results are kept in call order whatever order the
calls finish in. Nothing a tool does is fatal to the turn: an unknown tool, unparseable input,
a refusal, a :class:`~drover.errors.ToolError` or an unexpected exception all become an
``is_error`` result the model can act on.

Cancellation (the user interrupting) reaches every running call; each records what happened
to it — not started, or cut off while running with the output it produced so far — so the
batch can always produce one result per call, and a side-effecting call cut off mid-run is
marked "outcome unknown".
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.core.events import (
    Decision,
    HookPoint,
    HookRun,
    PermissionRequest,
    ToolDone,
    ToolProgress,
    ToolStart,
    ToolState,
    ToolStateChanged,
    interrupted_outcome,
)
from drover.core.messages import ToolResultBlock, ToolUseBlock, storable
from drover.core.rules import always_rule
from drover.core.sinks import EventSink
from drover.core.summaries import summarise_input, summarise_output
from drover.errors import ToolError
from drover.tools.base import FileImages, Tool, ToolContext, ToolOutput
from drover.tools.registry import ToolRegistry
from drover.tools.workspace import OutputBuffer
from drover.turn.hooks import Hooks, tool_payload
from drover.turn.permissions import CallPolicy, PermissionPolicy, Verdict

#: What the model is told of a call the user refused when asked.
DENIED_TEXT = "Not run: the user denied permission for this call."


@dataclass(slots=True)
class CallSlot:
    """One tool call of the batch and what became of it."""

    index: int
    call: ToolUseBlock
    tool: Tool | None
    state: ToolState = "input-available"
    #: The last state every consumer was told of (its send returned).
    reported: ToolState | None = None
    #: Whether the tool's code was entered: only then can a cut-off call have had effects.
    started: bool = False
    output: OutputBuffer = field(default_factory=OutputBuffer)
    result: ToolResultBlock | None = None

    @property
    def read_only(self) -> bool:
        return self.tool is not None and self.tool.read_only


def sandbox_label(tool: Tool) -> str | None:
    """How ``tool`` confines what it runs (its ``sandbox_label``), for the journal; None for
    tools without a sandbox."""
    label = getattr(tool, "sandbox_label", None)
    return label if isinstance(label, str) else None


def interrupted_result(slot: CallSlot) -> ToolResultBlock:
    """The result recorded for a call the interruption caught."""
    note, _ = interrupted_outcome(slot.started, slot.read_only)
    if not slot.started:
        return ToolResultBlock(tool_use_id=slot.call.id, content=note, is_error=True)
    output, _ = slot.output.text()
    output = storable(output)
    if output:
        note = f"{note}\nOutput before it was cut off:\n{output}\n[output cut off: interrupted]"
    return ToolResultBlock(tool_use_id=slot.call.id, content=note, is_error=True)


class ToolBatch:
    """The tool calls of one assistant response."""

    def __init__(
        self,
        calls: Sequence[ToolUseBlock],
        *,
        tools: ToolRegistry,
        policy: PermissionPolicy,
        sink: EventSink,
        workdir: Path,
        deps: object = None,
        may_start: Callable[[], bool] = lambda: True,
        scope: object | None = None,
        hooks: Hooks | None = None,
        ids: tuple[str, str] = ("", ""),
        files: FileImages | None = None,
    ) -> None:
        """``may_start`` is asked right before each tool starts: False (the turn is being
        stopped) and the call ends as never run. ``deps``, ``scope`` and ``files`` reach each tool
        in its :class:`~drover.tools.base.ToolContext`. ``hooks`` run around each call
        (:mod:`drover.turn.hooks`); ``ids`` are the session's and the turn's, which they are
        told."""
        self.slots = [
            CallSlot(index=i, call=call, tool=tools.get(call.name)) for i, call in enumerate(calls)
        ]
        self._tools = tools
        self._policy = policy
        self._sink = sink
        self._workdir = workdir
        self._may_start = may_start
        self._scope = scope
        self._deps = deps
        self._hooks = hooks
        self._ids = ids
        self._files = files

    def results(self) -> list[ToolResultBlock]:
        """One result per call, in call order (interrupted ones included)."""
        return [slot.result or interrupted_result(slot) for slot in self.slots]

    async def close_unreported(self) -> None:
        """After an interruption: tell consumers the final state of every call whose last
        state change they may not have seen (a call cancelled before it began, or while a
        consumer handled its state)."""
        for slot in self.slots:
            if slot.result is None:
                slot.result = interrupted_result(slot)
                slot.state = "interrupted"
            if slot.reported != slot.state:
                await self._report_final(slot)

    async def _report_final(self, slot: CallSlot) -> None:
        result = slot.result
        assert result is not None
        unknown = (
            slot.state == "interrupted" and interrupted_outcome(slot.started, slot.read_only)[1]
        )
        await self._set_state(
            slot, slot.state, output=result.content, error=result.is_error, outcome_unknown=unknown
        )

    async def run(self) -> list[ToolResultBlock]:
        async with asyncio.TaskGroup() as group:
            for slot in self.slots:
                group.create_task(self._run_one(slot))
        return self.results()

    # -- one call ------------------------------------------------------------------------------

    async def _set_state(
        self,
        slot: CallSlot,
        state: ToolState,
        *,
        output: str | None = None,
        error: bool = False,
        outcome_unknown: bool = False,
    ) -> None:
        slot.state = state
        event = ToolStateChanged(
            call_id=slot.call.id,
            call_index=slot.index,
            name=slot.call.name,
            state=state,
            input=slot.call.input if state in ("input-available", "running") else None,
            output=output,
            is_error=error,
            outcome_unknown=outcome_unknown,
        )
        await self._sink.send(event)
        slot.reported = state

    async def _finish(self, slot: CallSlot, state: ToolState, content: str, error: bool) -> None:
        slot.result = ToolResultBlock(tool_use_id=slot.call.id, content=content, is_error=error)
        await self._set_state(slot, state, output=content, error=error)
        await self._sink.send(
            ToolDone(
                call_index=slot.index,
                id=slot.call.id,
                name=slot.call.name,
                is_error=error,
                output_summary=summarise_output(content),
            )
        )

    async def _run_one(self, slot: CallSlot) -> None:
        try:
            await self._run_guarded(slot)
        except asyncio.CancelledError:
            if slot.result is None:
                # Cut off before it finished: what it did, as far as anyone can know.
                slot.result = interrupted_result(slot)
                slot.state = "interrupted"
            # A call that finished keeps its real result, whichever consumer was handling
            # its last event when the interruption came.
            if slot.reported != slot.state:
                await self._report_final(slot)
            raise

    async def _run_guarded(self, slot: CallSlot) -> None:
        call, tool = slot.call, slot.tool
        if call.input_error is not None:
            await self._finish(
                slot, "output-error", f"Invalid tool input: {call.input_error}", True
            )
            return
        if tool is None:
            known = ", ".join(self._tools.names()) or "none"
            await self._finish(
                slot, "output-error", f"Unknown tool '{call.name}'. Available tools: {known}.", True
            )
            return
        invalid = _invalid_input(tool, call.input)
        if invalid is not None:
            # Back to the model before anyone is asked: a call that cannot run needs no consent.
            await self._finish(slot, "output-error", invalid, True)
            return
        verdict = self._policy.verdict(tool, call.input)
        if verdict.action == "refuse":
            await self._finish(slot, "denied", verdict.refusal, True)
            return
        blocked = await self._run_hooks("pre_tool", slot, tool)
        if blocked:
            await self._finish(slot, "denied", blocked, True)
            return
        if verdict.action == "ask":
            request = await self._ask(slot, tool)
            decision = request.decision.result()
            if decision == "deny":
                await self._finish(slot, "denied", request.reason or DENIED_TEXT, True)
                return
            if decision == "always":
                await self._policy.grant(always_rule(tool.name, call.input))
        await self._execute(slot, tool, verdict)

    async def _ask(self, slot: CallSlot, tool: Tool) -> PermissionRequest:
        """Ask and wait for the answer; the request, decided."""
        await self._set_state(slot, "awaiting-permission")
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        request = PermissionRequest(
            request_id=uuid.uuid4().hex,
            call_id=slot.call.id,
            tool_name=tool.name,
            input=slot.call.input,
            summary=summarise_input(tool.name, slot.call.input),
            decision=future,
        )
        await self._sink.send(request)
        try:
            await future
            return request
        finally:
            future.cancel()

    async def _progress(
        self, slot: CallSlot, progress: float, total: float | None, message: str | None
    ) -> None:
        if slot.result is not None:
            return  # (a late report of a call that already ended)
        await self._sink.send(
            ToolProgress(
                call_id=slot.call.id,
                call_index=slot.index,
                name=slot.call.name,
                progress=progress,
                total=total,
                message=None if message is None else storable(message),
            )
        )

    async def _execute(self, slot: CallSlot, tool: Tool, verdict: Verdict) -> None:
        await self._set_state(slot, "running")
        await self._sink.send(
            ToolStart(
                call_index=slot.index,
                id=slot.call.id,
                name=tool.name,
                input_summary=summarise_input(tool.name, slot.call.input),
                sandbox=sandbox_label(tool),
            )
        )
        ctx = ToolContext(
            workdir=self._workdir,
            on_output=slot.output.append,
            on_progress=functools.partial(self._progress, slot),
            call_id=slot.call.id,
            call_index=slot.index,
            scope=self._scope,
            deps=self._deps,
            files=self._files,
            rules=CallPolicy(self._policy, tool, slot.call.input, verdict),
        )
        if not self._may_start():
            raise asyncio.CancelledError()
        slot.started = True
        try:
            output: ToolOutput = await tool.run(slot.call.input, ctx)
        except ToolError as exc:
            output = ToolOutput(content=str(exc) or type(exc).__name__, is_error=True)
        except Exception as exc:  # a tool bug must not end the turn
            output = ToolOutput(content=f"Tool failed: {type(exc).__name__}: {exc}", is_error=True)
        state: ToolState = "output-error" if output.is_error else "output-available"
        # What a tool says may not be text UTF-8 can hold (a file name that is not UTF-8):
        # the journal must be able to write it.
        content = storable(output.content)
        if self._hooks:
            # Known from here on: an interruption while the hooks run keeps the real output.
            slot.result = ToolResultBlock(
                tool_use_id=slot.call.id, content=content, is_error=output.is_error
            )
            slot.state = state
            note = await self._run_hooks("post_tool", slot, tool, (content, output.is_error))
            if note:
                content = f"{content}\n{note}"
        await self._finish(slot, state, content, output.is_error)

    async def _run_hooks(
        self,
        point: HookPoint,
        slot: CallSlot,
        tool: Tool,
        response: tuple[str, bool] | None = None,
    ) -> str:
        """Run the hooks of ``point`` about this call, each reported as a ``HookRun``; what
        the model is told of those that block (a ``pre_tool`` hook stops at the first)."""
        hooks = self._hooks
        if not hooks:
            return ""
        call = slot.call
        payload = tool_payload(
            point,
            session_id=self._ids[0],
            turn_id=self._ids[1],
            workdir=self._workdir,
            call_id=call.id,
            tool_name=tool.name,
            tool_input=call.input,
            response=response,
        )
        notes: list[str] = []
        for spec in hooks.for_call(point, tool, call.input):
            result = await hooks.run(spec, payload)
            await self._sink.send(
                HookRun(
                    point=point,
                    call_id=call.id,
                    call_index=slot.index,
                    name=tool.name,
                    hook=spec.source,
                    outcome=result.outcome,
                    exit_code=result.exit_code,
                    message=result.message,
                )
            )
            if result.blocks(point):
                notes.append(result.note(point))
                if point == "pre_tool":
                    break
        return "\n".join(notes)


def _invalid_input(tool: Tool, input: Mapping[str, Any]) -> str | None:
    """Why ``input`` cannot be given to ``tool`` (its ``validate`` method refuses it), or None:
    valid, or a tool that does not validate before it runs."""
    validate = getattr(tool, "validate", None)
    if not callable(validate):
        return None
    try:
        validate(input)
    except ToolError as exc:
        return str(exc) or type(exc).__name__
    except Exception as exc:  # a validator's bug is the tool's, reported like its failures
        return f"Tool failed: {type(exc).__name__}: {exc}"
    return None
