"""The turn's key reader hands what it does not use to the next prompt, on prompt_toolkit's
real pipe input and a real prompt session (the terminal version is in test_repl_tui.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prompt_toolkit import PromptSession
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import DummyOutput

from drover.cli.repl.app import _key_bindings
from drover.cli.repl.keys import TurnKeys

#: Bounds a wait that would otherwise hang; never a synchronisation.
TIMEOUT = 10


@pytest.fixture
def keyboard() -> Iterator[PipeInput]:
    with create_pipe_input() as pipe:
        yield pipe


class Turn:
    """Uses Esc and Ctrl-C as a turn does, records every key, and wakes a waiter on ``until``."""

    def __init__(self, until: str) -> None:
        self.seen: list[str] = []
        self.until = until
        self.reached = asyncio.Event()

    def key(self, name: str) -> bool:
        self.seen.append(name)
        if name == self.until:
            self.reached.set()
        return name in ("escape", "c-c")


async def next_line(keyboard: PipeInput) -> str:
    """What the REPL's prompt returns when it starts on this input now."""
    session: PromptSession[str] = PromptSession(
        input=keyboard, output=DummyOutput(), multiline=True, key_bindings=_key_bindings()
    )
    return await asyncio.wait_for(session.prompt_async("› "), TIMEOUT)


async def test_esc_then_a_line_typed_at_once_interrupts_and_the_line_is_submitted(
    keyboard: PipeInput,
) -> None:
    turn = Turn(until="c-m")
    with TurnKeys(turn.key, keyboard).attached():
        keyboard.send_text("\x1bgo on\r")  # one write, as a terminal sends fast typing
        await asyncio.wait_for(turn.reached.wait(), TIMEOUT)
    assert turn.seen == ["escape", "g", "o", " ", "o", "n", "c-m"]
    assert await next_line(keyboard) == "go on"


async def test_keys_left_by_the_last_prompt_come_first_and_an_esc_among_them_is_the_turns(
    keyboard: PipeInput,
) -> None:
    store_typeahead(keyboard, [KeyPress("a"), KeyPress(Keys.Escape, "\x1b"), KeyPress("b")])
    turn = Turn(until="c-m")
    with TurnKeys(turn.key, keyboard).attached():
        keyboard.send_text("c\r")
        await asyncio.wait_for(turn.reached.wait(), TIMEOUT)
    assert turn.seen == ["a", "escape", "b", "c", "c-m"]
    assert await next_line(keyboard) == "abc"


async def test_an_esc_still_held_when_the_turn_ends_is_the_turns(keyboard: PipeInput) -> None:
    turn = Turn(until="b")
    with TurnKeys(turn.key, keyboard).attached():
        keyboard.send_text("ab\x1b")  # the Esc waits for what may follow it
        await asyncio.wait_for(turn.reached.wait(), TIMEOUT)
    assert turn.seen == ["a", "b", "escape"]
    assert [press.key for press in get_typeahead(keyboard)] == ["a", "b"]


async def test_a_cursor_report_is_no_key(keyboard: PipeInput) -> None:
    turn = Turn(until="x")
    with TurnKeys(turn.key, keyboard).attached():
        keyboard.send_text("\x1b[12;1Rx")  # the terminal's late answer to a prompt's query
        await asyncio.wait_for(turn.reached.wait(), TIMEOUT)
    assert turn.seen == ["x"]
    assert [press.key for press in get_typeahead(keyboard)] == ["x"]
