"""The session handles an open :class:`~drover.agent.agent.Agent` keeps, and the checks that a
session is idle before it is deleted or rewound.

An agent keeps one handle per session it opened, in its
:class:`~drover.agent.resources.Resources`, least recently used first: a kept handle is reused (a
permission handler given anew replaces its own), a new one is built over the runner, and past
:data:`MAX_SESSIONS` the least recently used idle handles are forgotten — one whose session
has a turn running stays. A session is deleted or rewound only while no turn of it runs in
this process; a turn a dead process left running is recovered first. A rewind holds the
session from its plan to its marks: no turn starts meanwhile, in any process.
"""

from __future__ import annotations

from typing import Any

from drover.agent.resources import Resources
from drover.agent.rewind import RewindResult, apply_rewind, plan_rewind
from drover.agent.session import Session, SessionOwner
from drover.core.conversation import ConversationManager
from drover.core.output import OutputSchema
from drover.errors import SessionBusyError
from drover.journal.records import SessionRecord
from drover.runtime.turns import PermissionHandler
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy

#: Session handles an agent keeps between turns (the least recently used idle ones go).
MAX_SESSIONS = 256


def kept_handle(
    opened: Resources, session_id: str, on_permission: PermissionHandler | None
) -> Session[Any] | None:
    """The kept handle of ``session_id``, now the most recently used (None: none kept);
    ``on_permission`` answers its questions from now on when given."""
    kept = opened.sessions.get(session_id)
    if kept is not None:
        opened.sessions.move_to_end(session_id)
        if on_permission is not None:
            kept.on_permission = on_permission
    return kept


async def open_handle(
    owner: SessionOwner,
    opened: Resources,
    record: SessionRecord,
    *,
    created: bool,
    policy: PermissionPolicy,
    max_turns: int | None,
    on_permission: PermissionHandler | None,
    output: OutputSchema[Any] | None,
) -> Session[Any]:
    """A new handle of the stored session ``record``, kept in ``opened`` (``max_turns``
    None: the config's)."""
    config = opened.config
    engine = await opened.runner.agent_session(
        record,
        provider=opened.provider,
        tools=opened.tools,
        workdir=opened.workdir,
        policy=policy,
        settings=LoopSettings(
            max_turns=max_turns or config.max_turns, max_retries=config.retries_max
        ),
        convo=ConversationManager(
            context_limit=config.context_limit,
            chars_per_token=config.chars_per_token,
            system_prompt=opened.prompt.text(),
        ),
    )
    if opened.coordinator is not None:
        engine.prelude = opened.coordinator.resume
    engine.hooks = opened.hooks
    handle: Session[Any] = Session(
        owner, record, engine, created=created, on_permission=on_permission, output=output
    )
    opened.sessions[record.id] = handle
    forget_idle(opened)
    return handle


def forget_idle(opened: Resources) -> None:
    """Keep at most :data:`MAX_SESSIONS` handles; a session with a turn running stays."""
    excess = len(opened.sessions) - MAX_SESSIONS
    for session_id in list(opened.sessions):
        if excess <= 0:
            return
        if opened.runner.running(session_id) is None:
            del opened.sessions[session_id]
            opened.models.pop(session_id, None)
            excess -= 1


async def ensure_idle(opened: Resources, session_id: str) -> None:
    """Raise :class:`~drover.errors.SessionBusyError` when a turn of the session runs in
    this process; recover one a dead process left running."""
    running = opened.runner.running(session_id)
    if running is not None:
        raise SessionBusyError(session_id, running.turn_id or "")
    await opened.store.recover_orphans(session_id=session_id)


async def rewind_idle_session(
    opened: Resources, session_id: str, turn_id: str, *, files: bool, force: bool
) -> RewindResult:
    """Rewind ``turn_id`` of an idle session (see :meth:`~drover.agent.agent.Agent.rewind`), held
    from its plan to its marks (:mod:`drover.runtime.holds`): the turns it checks and the files
    it puts back are those of the turns it marks, whatever another request or process does
    meanwhile. The kept handle goes on from the rewound history."""
    await ensure_idle(opened, session_id)
    runner = opened.runner
    async with runner.holds.hold(session_id) as token:
        plan = await plan_rewind(opened.store, session_id, turn_id, opened.workdir)
        result = await apply_rewind(
            opened.store,
            plan,
            files=files,
            force=force,
            hold=token,
            logged=lambda event: runner.publish_logged(session_id, [event]),
        )
    kept = opened.sessions.get(session_id)
    if kept is not None:
        await runner.reload(kept.engine)
    return result


async def delete_idle_session(opened: Resources, session_id: str) -> bool:
    """Delete a stored session and its kept handle (False: there is none), refused while a
    turn of it runs here or in another live process (see
    :meth:`~drover.agent.agent.Agent.delete_session`)."""
    running = opened.runner.running(session_id)
    if running is not None:
        try:
            turn_id = running.turn_id or await running.wait_started()
        except Exception:  # it could not start: nothing runs
            turn_id = None
        if turn_id is not None:
            raise SessionBusyError(session_id, turn_id)
    await opened.store.recover_orphans(session_id=session_id)
    # The store checks again, with the session locked: a turn that began meanwhile wins.
    deleted = await opened.store.delete_session(session_id)
    opened.sessions.pop(session_id, None)
    opened.models.pop(session_id, None)
    return deleted
