"""Coordinator mode: the ``task`` tool runs workers — sub-agents — in parallel, durably.

A worker is an :class:`~drover.turn.loop.AgentLoop` of its own (every dependency given to it, none
shared by reference): its own :class:`~drover.core.conversation.ConversationManager`, seeded from a
snapshot of the parent's conversation taken when the ``task`` call starts (or empty,
``fresh``), so it never races on the parent's history, which goes on changing; the parent's
tools minus ``task`` (one level deep); the parent's provider, permission policy, working
directory and ``deps`` (never its structured output: a worker answers in text); a turn limit of
its own. Workers of one call run concurrently; one that fails does not stop the others. The
call's result is every worker's final answer (or its error, marked as such) — never a
transcript.

Events. A worker's events reach the parent's sink wrapped in
:class:`~drover.core.events.WorkerEvent`, tool events relabelled ``worker * 100 + callIndex``
(a consumer keeps one row per call index: the workers' calls must not collide). Permission
requests go out unwrapped, one at a time across the workers of a turn, through the parent's
round-trip; cancelling the turn abandons a pending one.

Durability. The parent's journal records each worker through a journal of its own under the
parent's turn (see :mod:`drover.journal.worker_log`). As each worker finishes its answer joins
the call's streamed output, so an interruption keeps every finished answer in the call's
result. The next turn's prelude (:meth:`Coordinator.resume`) finds ``task`` calls of the
pending work that were cut off, rebuilds each worker from the log (:func:`worker_states`),
runs the unfinished ones on from their own pending state, and records the call's complete
result as a late result (``LATE_RESULTS`` message meta), which
:func:`~drover.journal.history.build_history` puts in place of the interrupted one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from drover.core.conversation import ConversationManager
from drover.core.events import (
    Done,
    Event,
    PermissionRequest,
    TerminalEvent,
    ToolDone,
    ToolResults,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    WorkerEvent,
)
from drover.core.messages import Message, ToolResultBlock, message_from_dict, user_message
from drover.core.sinks import EventSink
from drover.errors import ToolError
from drover.journal.history import LATE_RESULTS, repair_history
from drover.journal.protocol import EventLog, SessionStore
from drover.journal.records import ToolCallRecord
from drover.journal.rules import partial_messages
from drover.journal.worker_log import scoped_call_id, worker_call_prefix
from drover.tools.base import ToolContext, ToolOutput
from drover.tools.registry import ToolRegistry
from drover.turn.loop import AgentLoop, TurnControl, TurnOptions, TurnScope, TurnWork
from drover.turn.state import resume_message

log = logging.getLogger(__name__)

TASK_TOOL = "task"
#: Relabelled call index of a worker's tool call: ``worker * WORKER_STRIDE + callIndex``.
WORKER_STRIDE = 100
#: How a complete result of a ``task`` call begins (an interrupted one does not).
RESULT_HEADER = "Results of the task workers"

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "A short (3-5 word) name of the task."},
        "prompt": {"type": "string", "description": "The full instructions for the worker."},
        "fresh": {
            "type": "boolean",
            "description": "Start from an empty conversation instead of a copy of this one.",
        },
        "tasks": {
            "type": "array",
            "description": "Several independent tasks to run in parallel, instead of one.",
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "prompt": {"type": "string"},
                    "fresh": {"type": "boolean"},
                },
                "required": ["description", "prompt"],
            },
        },
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    #: Model calls one worker may make in one turn; reaching it ends the worker incomplete.
    max_turns: int = 10
    #: Workers one ``task`` call may start.
    max_workers: int = 8


@dataclass(frozen=True, slots=True)
class TaskSpec:
    description: str
    prompt: str
    fresh: bool = False


def parse_tasks(args: Mapping[str, Any], limit: int) -> list[TaskSpec]:
    """The tasks of a ``task`` call's input; :class:`ToolError` with a one-line reason."""
    raw: list[Any]
    if "tasks" in args and args["tasks"] is not None:
        if not isinstance(args["tasks"], list) or not args["tasks"]:
            raise ToolError("'tasks' must be a non-empty list of {description, prompt}")
        raw = list(args["tasks"])
    else:
        raw = [args]
    if len(raw) > limit:
        raise ToolError(f"too many tasks: {len(raw)} (at most {limit} per call)")
    specs = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise ToolError(f"task {i} must be an object with 'description' and 'prompt'")
        prompt, description = item.get("prompt"), item.get("description", "")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError(f"task {i} needs a non-empty 'prompt' string")
        if not isinstance(description, str):
            raise ToolError(f"task {i}: 'description' must be a string")
        specs.append(TaskSpec(description or f"task {i}", prompt, bool(item.get("fresh", False))))
    return specs


# -- events ------------------------------------------------------------------------------------


def relabel(event: Event, worker: int) -> Event:
    """``event`` with its call index made unique across workers."""
    if isinstance(event, ToolStateChanged | ToolStart | ToolDone):
        return replace(event, call_index=worker * WORKER_STRIDE + event.call_index)
    return event


class WorkerSink:
    """A worker's sink: its events go to the parent's sink, wrapped and relabelled.

    ``permits`` lets one worker's permission request out at a time: the send holds it until
    the request is answered (or the worker is cancelled). A request goes out unwrapped, so
    every consumer answers it as it answers the parent's, with the call's stored (scoped) id.
    """

    def __init__(self, parent: EventSink, call_id: str, worker: int, permits: asyncio.Lock) -> None:
        self._parent = parent
        self._call_id = call_id
        self._worker = worker
        self._permits = permits

    async def send(self, event: Event) -> None:
        if isinstance(event, PermissionRequest):
            # Under the id its call is stored with: unique across workers.
            scoped = replace(
                event, call_id=scoped_call_id(self._call_id, self._worker, event.call_id)
            )
            async with self._permits:
                try:
                    await self._parent.send(scoped)
                    await asyncio.wait([event.decision])
                except asyncio.CancelledError:
                    event.decision.cancel()  # abandoned: a late answer does nothing
                    raise
            return
        wrapped = WorkerEvent(
            call_id=self._call_id, worker=self._worker, event=relabel(event, self._worker)
        )
        await self._parent.send(wrapped)


# -- the durable state of workers ---------------------------------------------------------------


@dataclass(slots=True)
class WorkerState:
    """A worker as its log records it: its messages so far and how it last ended."""

    worker: int
    messages: list[Message] = field(default_factory=list)
    #: The worker's last terminal event (its dict form), None while it has not ended.
    ended: Mapping[str, Any] | None = None
    step: int = 0
    texts: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.ended is not None and self.ended.get("type") == "done"

    def fold_text(self) -> None:
        """Text of steps that never got their message (a crash): partial messages."""
        self.messages.extend(partial_messages(sorted(self.texts, key=lambda t: t[0])))
        self.texts = []


def worker_states(events: Iterable[Mapping[str, Any]], call_id: str) -> dict[int, WorkerState]:
    """Each worker of ``call_id`` rebuilt from the session's event payloads, in log order."""
    states: dict[int, WorkerState] = {}
    for outer in events:
        if outer.get("type") != "worker" or outer.get("parent_call_id") != call_id:
            continue
        event, index = outer.get("event"), outer.get("worker")
        if not isinstance(event, Mapping) or not isinstance(index, int):
            continue
        state = states.setdefault(index, WorkerState(index))
        kind = event.get("type")
        if kind == "turn_started":
            state.fold_text()
            state.ended = None
            if event.get("user_message"):
                state.messages.append(message_from_dict(event["user_message"]))
        elif kind == "step_started":
            state.step = int(event.get("step", 0))
        elif kind == "text_delta" and "step" in event:
            state.texts.append((int(event["step"]), int(event.get("index", 0)), event["text"]))
        elif kind == "retry" and event.get("discard_partial"):
            state.texts = [t for t in state.texts if t[0] != state.step]
        elif kind in ("assistant_message", "tool_results"):
            state.texts = [t for t in state.texts if t[0] != state.step]
            state.messages.append(message_from_dict(event["message"]))
        elif kind in ("done", "incomplete", "error"):
            state.fold_text()
            state.ended = event
    for state in states.values():
        state.fold_text()
    return states


# -- running workers ----------------------------------------------------------------------------


@dataclass(slots=True)
class WorkerOutcome:
    spec: TaskSpec
    event: TerminalEvent | None = None
    #: Set for a worker finished in an earlier turn (its answer from the log).
    answer: str | None = None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.answer is not None or isinstance(self.event, Done)

    def render(self, worker: int) -> str:
        head = f"## worker {worker}: {self.spec.description}"
        if self.answer is not None:
            return f"{head}\n{self.answer}"
        if isinstance(self.event, Done):
            return f"{head}\n{self.event.text}"
        if self.event is not None:
            why = f"{self.event.reason}: {self.event.error}"
        else:
            why = self.failure or "it did not finish"
        return f"{head}\n[worker failed ({why})]"


def combine(outcomes: Sequence[WorkerOutcome]) -> ToolOutput:
    body = "\n\n".join(o.render(i) for i, o in enumerate(outcomes))
    failed = sum(not o.ok for o in outcomes)
    note = f" ({failed} failed)" if failed else ""
    return ToolOutput(
        content=f"{RESULT_HEADER} ({len(outcomes)}){note}:\n\n{body}",
        is_error=failed == len(outcomes),
    )


class WorkerLogReader(SessionStore, EventLog, Protocol):
    """What reading the workers' log takes from a store: a session's tool calls (the workers'
    are stored under scoped ids) and its event log (where each worker started and ended)."""


class Coordinator:
    """The ``task`` tool and the prelude that resumes its interrupted workers.

    ``store`` (when given) is where the prelude reads the workers' log; without it workers
    still run and are journaled by whoever records the parent, but are not resumed.
    """

    def __init__(
        self, store: WorkerLogReader | None = None, settings: WorkerSettings | None = None
    ):
        self.store = store
        self.settings = settings or WorkerSettings()
        # One permission request at a time across all workers of a turn (all its task calls).
        self._permits: weakref.WeakKeyDictionary[AgentLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _permits_of(self, loop: AgentLoop) -> asyncio.Lock:
        return self._permits.setdefault(loop, asyncio.Lock())

    # -- the tool ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return TASK_TOOL

    @property
    def description(self) -> str:
        return (
            "Delegate work to workers: sub-agents with the same tools (but this one) that "
            "work on their own and return only their final answer. Give one task "
            "{description, prompt}, or several independent ones in 'tasks' to run them in "
            "parallel. A worker sees this conversation so far unless 'fresh' is true; write "
            "its prompt so it knows exactly what to do and what to report."
        )

    @property
    def input_schema(self) -> Mapping[str, Any]:
        return _TASK_SCHEMA

    @property
    def read_only(self) -> bool:
        return False

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        scope = ctx.scope
        if not isinstance(scope, TurnScope):
            raise ToolError("the task tool runs only inside an agent turn")
        specs = parse_tasks(args, self.settings.max_workers)
        outcomes = [WorkerOutcome(spec) for spec in specs]
        permits = self._permits_of(scope.loop)
        seeds = [() if spec.fresh else scope.history for spec in specs]
        works: list[tuple[TurnWork, Message | None] | None] = []
        for spec in specs:
            prompt = user_message(spec.prompt)
            works.append((TurnWork.begin([prompt]), prompt))
        await self._run_all(scope, ctx, outcomes, seeds, works, permits)
        return combine(outcomes)

    async def _run_all(
        self,
        scope: TurnScope,
        ctx: ToolContext,
        outcomes: list[WorkerOutcome],
        seeds: Sequence[Sequence[Message]],
        works: Sequence[tuple[TurnWork, Message | None] | None],
        permits: asyncio.Lock,
    ) -> None:
        """Run the workers of ``works`` (None: nothing to run) concurrently; each entry is
        the worker's work and the user message its turn announces (None on a plain resume)."""

        async def one(i: int, work: TurnWork, announce: Message | None) -> None:
            outcome = outcomes[i]
            try:
                outcome.event = await self._run_worker(
                    scope, ctx.call_id, i, seeds[i], work, announce, permits
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a worker's bug must not stop its siblings
                log.exception("worker %d of call %s failed", i, ctx.call_id)
                outcome.failure = f"{type(exc).__name__}: {exc}"
            finally:
                scope.work.usage = scope.work.usage + work.usage
            ctx.on_output(outcome.render(i) + "\n\n")

        async with asyncio.TaskGroup() as group:
            for i, entry in enumerate(works):
                if entry is not None:
                    group.create_task(one(i, *entry))

    async def _run_worker(
        self,
        scope: TurnScope,
        call_id: str,
        worker: int,
        seed: Sequence[Message],
        work: TurnWork,
        announce: Message | None,
        permits: asyncio.Lock,
    ) -> TerminalEvent:
        parent = scope.loop
        convo = ConversationManager(
            system_prompt=parent.convo.system_prompt,
            context_limit=parent.convo.context_limit,
            chars_per_token=parent.convo.chars_per_token,
            compaction_ratio=parent.convo.compaction_ratio,
            messages=seed,
        )
        tools = ToolRegistry(t for t in parent.tools if t.name != TASK_TOOL)
        loop = AgentLoop(
            provider=parent.provider,
            convo=convo,
            tools=tools,
            policy=parent.policy,
            sink=WorkerSink(parent.sink, call_id, worker, permits),
            workdir=parent.workdir,
            settings=replace(parent.settings, max_turns=self.settings.max_turns),
            control=TurnControl(),
            options=TurnOptions(deps=parent.options.deps, files=parent.options.files),
            hooks=parent.hooks,
        )
        started = TurnStarted(
            turn_id=parent.turn_id, session_id=parent.session_id, user_message=announce
        )
        return await loop.run_turn(work, started)

    # -- resuming ------------------------------------------------------------------------------

    async def resume(self, loop: AgentLoop, work: TurnWork) -> None:
        """Prelude of a turn: finish the ``task`` calls of the pending work that were cut off."""
        if self.store is None or not loop.session_id:
            return
        pending = work.messages[: work.start]
        cut: list[tuple[int, int, ToolResultBlock]] = []
        for ai, message in enumerate(pending):
            if message.role != "assistant" or ai + 1 >= len(pending):
                continue
            results = {r.tool_use_id: r for r in pending[ai + 1].tool_results}
            for use in message.tool_uses:
                result = results.get(use.id)
                if (
                    use.name == TASK_TOOL
                    and result is not None
                    and not result.content.startswith(RESULT_HEADER)
                ):
                    cut.append((ai, ai + 1, result))
        if not cut:
            return
        records = await self.store.events_after(loop.session_id)
        payloads = [r.payload for r in records]
        calls = await self.store.tool_calls(session_id=loop.session_id)
        for ai, ri, result in cut:
            states = worker_states(payloads, result.tool_use_id)
            if not states:
                continue  # the call never got to start a worker: the model can call it again
            use = next(u for u in work.messages[ai].tool_uses if u.id == result.tool_use_id)
            output = await self._resume_call(loop, work, ai, use.input, states, calls, use.id)
            block = ToolResultBlock(
                tool_use_id=use.id, content=output.content, is_error=output.is_error
            )
            old = work.messages[ri]
            work.messages[ri] = replace(
                old,
                content=tuple(
                    block if isinstance(b, ToolResultBlock) and b.tool_use_id == use.id else b
                    for b in old.content
                ),
            )
            late = Message(role="user", content=(block,), meta={LATE_RESULTS: True})
            await loop.sink.send(ToolResults(message=late))

    async def _resume_call(
        self,
        loop: AgentLoop,
        work: TurnWork,
        ai: int,
        args: Mapping[str, Any],
        states: dict[int, WorkerState],
        calls: Sequence[ToolCallRecord],
        call_id: str,
    ) -> ToolOutput:
        try:
            specs = parse_tasks(args, self.settings.max_workers)
        except ToolError:
            specs = [TaskSpec(f"task {i}", "") for i in range(max(states) + 1)]
        history = (*loop.convo.messages(), *work.messages[:ai])
        outcomes = [WorkerOutcome(spec) for spec in specs]
        works: list[tuple[TurnWork, Message | None] | None] = []
        for i, spec in enumerate(specs):
            state = states.get(i)
            if state is not None and state.finished and state.ended is not None:
                outcomes[i].answer = str(state.ended.get("text", ""))
                works.append(None)
                continue
            prefix = worker_call_prefix(call_id, i)
            own = [
                replace(c, call_id=c.call_id.removeprefix(prefix))
                for c in calls
                if c.call_id.startswith(prefix)
            ]
            messages = repair_history(state.messages, own) if state else []
            if not messages:  # it never got going: start it
                prompt = user_message(spec.prompt)
                works.append((TurnWork.begin([prompt]), prompt))
                continue
            note = resume_message(messages)
            works.append((TurnWork.begin([*messages, note] if note else messages), note))
        scope = TurnScope(loop=loop, work=work, history=history)
        ctx = ToolContext(workdir=loop.workdir, call_id=call_id, scope=scope)
        seeds = [() if spec.fresh else history for spec in specs]
        await self._run_all(scope, ctx, outcomes, seeds, works, self._permits_of(loop))
        return combine(outcomes)


def add_task_tool(tools: ToolRegistry, coordinator: Coordinator) -> None:
    """Offer the ``task`` tool in ``tools`` (unless a tool of that name is there already)."""
    with contextlib.suppress(ValueError):
        tools.register(coordinator)


__all__ = [
    "RESULT_HEADER",
    "TASK_TOOL",
    "Coordinator",
    "TaskSpec",
    "WorkerSettings",
    "WorkerSink",
    "WorkerState",
    "add_task_tool",
    "combine",
    "parse_tasks",
    "relabel",
    "worker_states",
]
