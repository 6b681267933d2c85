"""The keyboard while a turn runs: Esc interrupts, Ctrl-C twice quits, y/a/n answer a question;
every other key is kept, in order, for the next prompt.

Between turns prompt_toolkit owns standard input; during a turn, and until the turn's end is
reported, this reader does, in raw mode, so there is always exactly one owner. The keys the
turn does not use (text, Enter, editing keys, a paste) are handed to the next prompt as
prompt_toolkit's typeahead for the same input, which the prompt replays before reading the
terminal: a line typed with its Enter during a turn is submitted as soon as the turn ends, as
if typed at the prompt. Keys the previous prompt read after its Enter come first, through the
same turn's rules (an Esc among them interrupts). Bracketed paste is on while the reader owns
the keyboard, as at the prompt: a paste is one key, kept whole for the prompt, so its newlines
do not submit its lines one by one and its letters do not answer a permission question.

A lone Esc byte is ambiguous (it also starts escape sequences such as the arrow keys): the
parser holds it until no more bytes follow for :data:`ESC_TIMEOUT`, then flushes it, as
prompt_toolkit's own applications do. What the parser still holds when the reader detaches is
flushed too, so an Esc typed as the turn ends is the turn's, never the start of a prompt key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from prompt_toolkit.input import Input
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import Output

#: Seconds without a following byte after which an Esc byte is the Esc key.
ESC_TIMEOUT = 0.05

#: Takes a key's name (``"escape"``, ``"c-c"``, ``"c-m"`` for Enter…, or the character typed)
#: and says whether the turn used it; a key it did not use goes to the next prompt.
KeyHandler = Callable[[str], bool]
#: Takes a line typed and entered during the turn; True when it took it (queued it), so its
#: keys do not go to the next prompt.
LineHandler = Callable[[str], bool]

#: What Enter sends.
_ENTER = (Keys.ControlM, Keys.ControlJ)
_ERASE = (Keys.ControlH, Keys.Backspace)


class TurnKeys:
    """Reads ``source`` while attached, gives each key to ``on_key`` and keeps the keys it
    did not use as ``source``'s typeahead (see the module docstring). ``screen`` is the
    terminal's output, where bracketed paste is switched on and off."""

    def __init__(
        self,
        on_key: KeyHandler,
        source: Input,
        screen: Output | None = None,
        on_line: LineHandler | None = None,
    ) -> None:
        """``on_line``: offered each line typed and entered during the turn (plain text,
        erased characters and pastes only; a line with other editing keys, or a trailing
        backslash, goes to the next prompt as typed)."""
        self._on_key = on_key
        self._on_line = on_line
        self._input = source
        self._screen = screen
        self._flush: asyncio.TimerHandle | None = None
        self._kept: list[KeyPress] = []
        # Where the line being typed starts in ``_kept``.
        self._line_start = 0

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        source = self._input
        with source.raw_mode(), source.attach(self._ready), self._pasting():
            try:
                self._deliver(get_typeahead(source))
                yield
            finally:
                if self._flush is not None:
                    self._flush.cancel()
                self._deliver(source.flush_keys())
                kept, self._kept = self._kept, []
                store_typeahead(source, kept)

    @contextlib.contextmanager
    def _pasting(self) -> Iterator[None]:
        screen = self._screen
        if screen is None:
            yield
            return
        screen.enable_bracketed_paste()
        screen.flush()
        try:
            yield
        finally:
            screen.disable_bracketed_paste()
            screen.flush()

    def _ready(self) -> None:
        self._deliver(self._input.read_keys())
        if self._flush is not None:
            self._flush.cancel()
        self._flush = asyncio.get_running_loop().call_later(ESC_TIMEOUT, self._flush_now)

    def _flush_now(self) -> None:
        self._deliver(self._input.flush_keys())

    def _deliver(self, presses: list[KeyPress]) -> None:
        for press in presses:
            key = press.key
            if key == Keys.CPRResponse:
                continue  # the terminal answering a cursor query of the last prompt: no key
            name = key.value if isinstance(key, Keys) else key
            if self._on_key(name):
                continue
            if key in _ENTER and self._take_line():
                continue
            self._kept.append(press)
            if key in _ENTER:
                self._line_start = len(self._kept)

    def _take_line(self) -> bool:
        """Offer the line just entered to ``on_line``; True when it took it."""
        if self._on_line is None:
            return False
        chars: list[str] = []
        for press in self._kept[self._line_start :]:
            if press.key in _ERASE:
                if chars:
                    chars.pop()
            elif press.key == Keys.BracketedPaste:
                chars.append(press.data)
            elif isinstance(press.key, str) and len(press.key) == 1:
                chars.append(press.key)
            else:
                return False  # edited with keys a line cannot say: the prompt gets them
        line = "".join(chars)
        if not line.strip() or line.endswith("\\") or not self._on_line(line):
            return False
        del self._kept[self._line_start :]
        return True
