"""The REPL's ``/fork`` and ``/rewind``, the same in both of its modes.

``/fork [T]`` copies the open session's history up to and including turn T (its number, or
(the start of) its id; default: all of it) into a new session and switches to it; the source
stays as it was. ``/rewind`` lists the turns to pick from; ``/rewind T`` shows what rewinding
turn T would do — each file's diff, the files it cannot restore, the commands it cannot undo —
asks, then undoes T and the turns after it and puts the files back. ``--keep-files`` rewinds
the conversation only; ``--force`` overwrites files changed outside drover since (otherwise a
rewind that would is refused).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from drover.agent.agent import Agent
from drover.agent.rewind import RewindConflict
from drover.agent.session import Session
from drover.cli.session_ids import resolve_turn

#: Asks the user a yes/no question; True for yes.
Confirm = Callable[[str], Awaitable[bool]]
#: Prints one line of the answer: ``(text, style)``, style a rich style or "" (plain).
Line = tuple[str, str]
#: Prints lines.
Show = Callable[[list[Line]], None]

REWIND_USAGE = "usage: /rewind [T] [--keep-files] [--force] (T: a turn's number or id)"


async def fork_command(agent: Agent, session: Session, arg: str) -> tuple[list[str], Session]:
    """``/fork [T]``: the lines to print and the session to go on in (the fork)."""
    if " " in arg:
        return ["usage: /fork [T] (T: the last turn to copy, its number or id; default all)"], (
            session
        )
    turn_id = (await resolve_turn(agent.store, session.id, arg)).id if arg else None
    forked = await session.fork(turn_id)
    count = len(await agent.store.turns(forked.id))
    return [
        f"forked session {forked.id} from {session.id} ({count} turn{'' if count == 1 else 's'}); "
        f"now in the fork (the source stays: /resume {session.id[:12]})"
    ], forked


async def rewind_command(
    agent: Agent, session: Session, arg: str, confirm: Confirm, show: Show
) -> None:
    """``/rewind [T] [--keep-files] [--force]``; what it says goes to ``show`` (the plan
    before the question)."""
    words = arg.split()
    flags = {w for w in words if w.startswith("--")}
    rest = [w for w in words if not w.startswith("--")]
    if flags - {"--keep-files", "--force"} or len(rest) > 1:
        show([(REWIND_USAGE, "")])
        return
    if not rest:
        show(await _turn_list(agent, session))
        return
    turn = await resolve_turn(agent.store, session.id, rest[0])
    files = "--keep-files" not in flags
    force = "--force" in flags
    plan = await agent.plan_rewind(session.id, turn.id)
    out: list[Line] = []
    if files:
        for change in plan.files:
            for line in change.diff().splitlines():
                out.append((line, _diff_style(line)))
        for change in plan.files:
            if change.action == "unrestorable":
                why = "its content before was over the cap"
            elif change.action == "unreachable":
                why = "it now lies behind a symbolic link (left alone)"
            else:
                continue
            out.append((f"cannot restore {change.shown}: {why}", "yellow"))
        for shown in plan.conflicts:
            note = "will be overwritten (--force)" if force else "changed outside drover since"
            out.append((f"{shown}: {note}", "red" if not force else "yellow"))
    for what in plan.not_rewindable:
        out.append((f"not rewindable: {what}", "yellow"))
    if files and plan.conflicts and not force:
        out.append((str(RewindConflict(plan.conflicts)), "red"))
        show(out)
        return
    later = len(plan.turns) - 1
    undone = f"turn {turn.seq}" + (f" and the {later} after it" if later else "")
    changed = [f for f in plan.files if f.action in ("restore", "delete")] if files else []
    restoring = (
        f" and restore {len(changed)} file{'' if len(changed) == 1 else 's'}" if changed else ""
    )
    show(out)
    if not await confirm(f"rewind {undone}{restoring}? [y/N] "):
        show([("not rewound", "")])
        return
    result = await session.rewind(turn.id, files=files, force=force)
    out = [
        (
            f"rewound {len(result.rewound)} turn{'' if len(result.rewound) == 1 else 's'} "
            "(kept in the journal, marked rewound)"
            + (f"; restored {', '.join(result.restored)}" if result.restored else ""),
            "",
        )
    ]
    if plan.prompt:
        out.append((f"turn {turn.seq} asked: {plan.prompt}", "dim"))
    show(out)


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    if line.startswith("@@"):
        return "cyan"
    return ""


async def _turn_list(agent: Agent, session: Session) -> list[Line]:
    turns = [t for t in await agent.store.turns(session.id) if not t.rewound]
    if not turns:
        return [("no turns to rewind", "")]
    out: list[Line] = [("turns (rewind one with /rewind T: it and the turns after it):", "")]
    for turn in turns:
        prompt = "" if turn.user_message is None else " ".join(turn.user_message.text.split())
        out.append((f"  {turn.seq:>3}  {turn.status:<11} {prompt[:60]}", ""))
    return out
