"""Slash commands of the interactive REPL.

/help                    this list
/model [PROVIDER:MODEL]  show or switch the model (pending work is kept and converted)
/tokens                  context estimate, calibration ratio, divisor; tokens used and cost
/context                 what the system prompt holds: drover's prompt (or --system-prompt),
                         each AGENTS.md/CLAUDE.md read, --append-system-prompt; their sizes
/compact                 summarise older history now to free context (the last messages stay)
/sessions                stored sessions, latest first
/resume [ID]             finish the unfinished turn, or open another stored session (any
                         unique start of its id)
/rename TITLE            give the open session a title
/rm ID                   delete another stored session, after a yes (also /delete ID)
/export [FILE]           write the open session to FILE: Markdown, or JSON Lines for .jsonl
                         (default drover-ID.md here; never over an existing file)
/clear                   start a new session (this one stays stored)
/session                 the open session's id
/pending                 the unfinished work the next message resumes
/discard                 drop the unfinished work (the journal keeps it, marked discarded)
/fork [T]                copy this session up to turn T (number or id; default all) into a
                         new session, and go on in it (the source stays)
/rewind [T] [--keep-files] [--force]
                         undo turn T and the turns after it, and put back the files they
                         wrote (the diff is shown first); no T lists the turns
/permissions [revoke R]  what decides tool calls: the mode, the allow and deny rules (config
                         file, --allow/--deny) and this session's "always" answers, each with
                         where it comes from; withdraw an answer (revoke RULE) or all
/exit                    leave (also Ctrl-D, or Ctrl-C twice)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.text import Text

from drover.agent.agent import Agent
from drover.agent.session import Session
from drover.cli.repl.control import Line, Show, fork_command, rewind_command
from drover.cli.repl.manage import export_command, remove_command, rename_command
from drover.cli.repl.status import TokenAccount
from drover.cli.session_ids import resolve_session
from drover.core.conversation import safe_cut
from drover.core.events import Compacted, Event
from drover.core.visible import visible
from drover.errors import DroverError
from drover.turn.compaction import compact_history

HELP = (__doc__ or "").split("\n\n", 1)[1].strip()


class Repl(Protocol):
    """What a command acts on: the REPL (:class:`drover.cli.repl.app.Repl`), which runs the
    commands (so this module does not import it back)."""

    agent: Agent
    session: Session
    console: Console
    account: TokenAccount

    def reset_account(self) -> None: ...

    async def show_session(self, *, transcript: bool) -> None: ...

    async def turn(
        self, prompt: str | None, *, echo: bool = False, images: Sequence[Path] = ()
    ) -> bool: ...

    async def confirm(self, question: str) -> bool: ...


class _CompactionNote:
    def __init__(self, say: Callable[[str], object]) -> None:
        self.say = say

    async def send(self, event: Event) -> None:
        if isinstance(event, Compacted):
            self.say(
                f"compacted the history: {event.messages_before} → {event.messages_after} messages"
            )


async def compact_command(session: Session, say: Callable[[str], object]) -> None:
    """``/compact`` (both REPL modes): summarise the older history now, or say why not."""
    engine = session.engine
    keep = engine.settings.keep_tail
    messages = engine.convo.messages()
    if await compact_history(engine.provider, engine.convo, keep, _CompactionNote(say)):
        return
    if safe_cut(messages, keep) == 0:
        count = f"{len(messages)} message{'' if len(messages) == 1 else 's'}"
        say(
            f"nothing compacted: the history has {count}, and the last {keep} messages "
            "(with their tool calls) are always kept whole"
        )
    else:
        say("nothing compacted: the summary failed (the log says why); the history is unchanged")


async def sessions_lines(agent: Agent, current: str) -> list[str]:
    """``/sessions`` (both REPL modes): the stored sessions, latest first, ``*`` the open one."""
    store = agent.store
    records = await store.list_sessions(limit=20)
    if not records:
        return ["no sessions yet"]
    lines = []
    for record in records:
        turns = await store.turns(record.id)
        last = turns[-1].status if turns else "empty"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.updated_at))
        mark = "*" if record.id == current else " "
        lines.append(
            f"{mark} {record.id}  {when}  {len(turns):>3} turns  {last:<11} {record.title or ''}"
        )
    return lines


async def run_command(repl: Repl, line: str) -> bool:
    """Run one slash command; True means leave."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    say = repl.console.print
    if name in ("/exit", "/quit"):
        return True
    if name == "/help":
        say(Text(HELP))
    elif name == "/model":
        await _model(repl, arg)
    elif name == "/tokens":
        _tokens(repl)
    elif name == "/context":
        _say_lines(repl, context_command(repl.agent, repl.session))
    elif name == "/compact":
        await compact_command(repl.session, say)
    elif name == "/sessions":
        _say_lines(repl, await sessions_lines(repl.agent, repl.session.id))
    elif name == "/session":
        say(repl.session.id)
    elif name == "/resume":
        return await _resume(repl, arg)
    elif name == "/rename":
        _say_lines(repl, await rename_command(repl.agent, repl.session, arg))
    elif name in ("/rm", "/delete"):
        _say_lines(repl, await remove_command(repl.agent, repl.session, arg, repl.confirm))
    elif name == "/export":
        _say_lines(repl, await export_command(repl.agent, repl.session, arg))
    elif name == "/clear":
        repl.session = await repl.agent.session()
        repl.reset_account()
        say(f"new session {repl.session.id} (the previous one stays stored: /sessions)")
    elif name == "/pending":
        _pending(repl)
    elif name == "/discard":
        count = await repl.session.discard()
        say(
            f"discarded {count} pending message{'' if count == 1 else 's'} "
            "(the journal keeps them, marked discarded)"
        )
    elif name == "/permissions":
        _say_lines(repl, await permissions_command(repl.session, arg))
    elif name == "/fork":
        lines, repl.session = await fork_command(repl.agent, repl.session, arg)
        repl.reset_account()
        _say_lines(repl, lines)
    elif name == "/rewind":
        await rewind_command(repl.agent, repl.session, arg, repl.confirm, _styled(repl))
    else:
        say(f"unknown command {name}; /help lists them")
    return False


def context_command(agent: Agent, session: Session) -> list[str]:
    """``/context`` (both REPL modes): the parts of the system prompt, and the context used."""
    convo = session.engine.convo
    lines = agent.prompt.describe(convo.chars_per_token)
    used = convo.calibrated_tokens(session.pending)
    lines.append(
        f"context: ~{used:,} of {convo.context_limit:,} tokens in use (system prompt, history "
        "and unfinished work); /tokens has the details"
    )
    return lines


def _styled(repl: Repl) -> Show:
    def show(lines: list[Line]) -> None:
        for text, style in lines:  # (paths and diffs of the workdir: shown, never obeyed)
            repl.console.print(Text(visible(text, code=True), style=style))

    return show


def _say_lines(repl: Repl, lines: list[str]) -> None:
    for line in lines:
        repl.console.print(Text(visible(line)))


async def permissions_command(session: Session, arg: str) -> list[str]:
    """``/permissions`` (both REPL modes): what decides this session's tool calls — the mode,
    the deny and allow rules (config file, flags) and the session's "always" answers, each
    with where it comes from — or withdraw "always" answers."""
    verb, _, rule = arg.partition(" ")
    rule = rule.strip()
    if verb == "revoke":
        if not rule:
            return ["usage: /permissions revoke RULE (or: /permissions revoke all)"]
        revoked = await session.revoke(None if rule == "all" else rule)
        if not revoked:
            return [f"no grant {rule!r} in this session"]
        return [f"withdrawn: {', '.join(revoked)} (it asks again from now on)"]
    if arg:
        return ["usage: /permissions, or /permissions revoke RULE|all"]
    policy = session.engine.policy
    lines = [f"permission mode: {policy.mode}"]
    grants = await session.grants()
    rows = [("deny", r.text, r.source) for r in policy.deny_rules]
    rows += [("allow", r.text, r.source) for r in policy.allow_rules]
    for grant in grants:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(grant.created_at))
        rows.append(("always", grant.rule, f'an "always" answer in this session, {when}'))
    if not rows:
        lines.append('no rules, and no "always" answers in this session')
    width = max((len(text) for _, text, _ in rows), default=0)
    lines += [f"  {kind:<6} {text:<{width}}  ({source})" for kind, text, source in rows]
    if rows:
        lines.append("deny wins over allow; a deny rule refuses even in allow mode")
    if grants:
        lines.append('withdraw an "always" answer with /permissions revoke RULE (or revoke all)')
    return lines


async def _model(repl: Repl, spec: str) -> None:
    say = repl.console.print
    if not spec:
        say(f"model: {repl.session.model}")
        return
    pending = len(repl.session.pending)
    try:
        await repl.session.switch_model(spec)
    except DroverError as exc:
        say(Text(f"error: {exc} (still using {repl.session.model})", style="red"))
        return
    note = (
        f"; the unfinished work ({pending} message{'' if pending == 1 else 's'}) is kept and "
        "goes to the new model with the next message"
        if pending
        else ""
    )
    say(f"now using {spec}{note}")


def _tokens(repl: Repl) -> None:
    convo = repl.session.engine.convo
    pending = repl.session.pending
    calibration = convo.calibration
    ratio = f"{calibration:.2f}" if calibration is not None else "not yet measured"
    estimate = convo.estimated_tokens(pending)
    calibrated = convo.calibrated_tokens(pending)
    left = max(convo.context_limit - calibrated, 0)
    used = repl.account.used
    repl.console.print(
        f"context: estimated {estimate:,} tokens (calibrated {calibrated:,}) of "
        f"{convo.context_limit:,}; {left:,} left\n"
        f"estimate: characters / {convo.chars_per_token:g} (the divisor); "
        f"API/estimate calibration ratio {ratio}\n"
        f"used in this session: {used.input_tokens:,} input, {used.output_tokens:,} output, "
        f"{used.cache_read_tokens:,} cache read, {used.cache_write_tokens:,} cache write; "
        f"estimated cost {repl.account.cost_text(repl.session.model)} ({repl.session.model})"
    )


async def _resume(repl: Repl, typed: str) -> bool:
    session_id = await resolve_session(repl.agent.store, typed) if typed else ""
    if session_id and session_id != repl.session.id:
        repl.session = await repl.agent.session(session_id, must_exist=True)
        repl.reset_account()
        await repl.show_session(transcript=True)
        return False
    if not repl.session.pending:
        repl.console.print("nothing to resume: the last turn completed")
        return False
    return await repl.turn(None)


def _pending(repl: Repl) -> None:
    pending = repl.session.pending
    if not pending:
        repl.console.print("no unfinished work")
        return
    for message in pending:
        calls = ", ".join(c.name for c in message.tool_uses)
        results = len(message.tool_results)
        text = " ".join(message.text.split())[:70]
        repl.console.print(
            Text(
                visible(
                    f"  {message.role}: {text}{' calls: ' + calls if calls else ''}"
                    f"{f' ({results} results)' if results else ''}",
                    code=True,
                )
            )
        )
