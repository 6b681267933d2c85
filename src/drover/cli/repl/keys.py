"""The keyboard while a turn runs: Esc interrupts, Ctrl-C twice quits, y/a/n answer a question.

Between turns prompt_toolkit owns standard input; during a turn this reader does, in raw mode,
so there is always exactly one owner and no key typed during a turn leaks into the next
prompt's line. A lone Esc byte is ambiguous (it also starts escape sequences such as the arrow
keys): the parser holds it until no more bytes follow for :data:`ESC_TIMEOUT`, then flushes it,
as prompt_toolkit's own applications do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys

#: Seconds without a following byte after which an Esc byte is the Esc key.
ESC_TIMEOUT = 0.05

KeyHandler = Callable[[str], None]


class TurnKeys:
    """Delivers keys typed during a turn to ``on_key`` as names: ``"escape"``, ``"c-c"``, or
    the character typed."""

    def __init__(self, on_key: KeyHandler, source: Input | None = None) -> None:
        self._on_key = on_key
        self._input = source
        self._flush: asyncio.TimerHandle | None = None

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        source = self._input or create_input()
        self._input = source
        with source.raw_mode(), source.attach(self._ready):
            try:
                yield
            finally:
                if self._flush is not None:
                    self._flush.cancel()

    def _ready(self) -> None:
        assert self._input is not None
        self._deliver(self._input.read_keys())
        if self._flush is not None:
            self._flush.cancel()
        self._flush = asyncio.get_running_loop().call_later(ESC_TIMEOUT, self._flush_now)

    def _flush_now(self) -> None:
        assert self._input is not None
        self._deliver(self._input.flush_keys())

    def _deliver(self, presses: list[KeyPress]) -> None:
        for press in presses:
            key = press.key
            if key == Keys.Escape:
                self._on_key("escape")
            elif key == Keys.ControlC:
                self._on_key("c-c")
            elif isinstance(key, str) and len(key) == 1:
                self._on_key(key)
