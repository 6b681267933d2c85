"""A stored session's transcript, printed when the REPL opens on it (``--continue``,
``--resume ID``, ``/resume ID``): each turn's message, the answers as markdown, the tool calls
with their final states, and how each turn that did not complete ended."""

from __future__ import annotations

from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text

from drover.cli.tui import ToolRow, tool_row_text
from drover.core.messages import Usage
from drover.core.summaries import summarise_input, summarise_output
from drover.core.visible import visible
from drover.journal.protocol import SessionStore
from drover.journal.records import ToolCallRecord


async def print_transcript(store: SessionStore, session_id: str, console: Console) -> Usage:
    """Print the session so far; returns the tokens its turns used."""
    used = Usage()
    for turn in await store.turns(session_id):
        if turn.usage is not None:
            used = used + turn.usage
        if turn.user_message is not None:
            console.print(Text(visible(f"› {turn.user_message.text}"), style="bold"))
        elif turn.seq > 1:
            console.print(Text("› (continue the unfinished work)", style="bold"))
        calls = {call.call_id: call for call in await store.tool_calls(turn.id)}
        for stored in await store.turn_messages(turn.id):
            message = stored.message
            if message.role == "assistant" and message.text.strip():
                console.print(Markdown(visible(message.text)))
                if stored.partial:
                    console.print(Text("(cut off here)", style="dim"))
            for use in message.tool_uses:
                call = calls.pop(use.id, None)
                if call is not None:
                    console.print(tool_row_text(_row(call)))
        for call in calls.values():  # calls cut off before their message was complete
            console.print(tool_row_text(_row(call)))
        if turn.rewound:
            console.print(Text("(this turn was rewound)", style="dim"))
        elif turn.discarded:
            console.print(Text("(this turn's work was discarded)", style="dim"))
        elif turn.status not in ("completed", "running"):
            ended = f"turn {turn.status}"
            if turn.error:
                ended += f" ({turn.reason}: {turn.error})"
            console.print(Text(visible(ended), style="yellow"))
    return used


def _row(call: ToolCallRecord) -> ToolRow:
    return ToolRow(
        call_id=call.call_id,
        index=call.call_index,
        name=visible(call.name, code=True),
        state=call.state,
        summary=summarise_input(call.name, call.input or {}),
        output_summary=summarise_output(call.output or ""),
        outcome_unknown=call.outcome_unknown,
    )
