"""Text from a model, a tool or a server, made safe to show on a terminal: every character that
could act instead of being seen is shown as an escape.

A terminal obeys what it is sent. ``ESC [ 2 K`` erases a line, ``CR`` goes back to its start,
backspaces overprint, an OSC sequence sets the window title or a hyperlink; a right-to-left
override (U+202E) shows ``ls -la #hs | lruc`` for a command that ends in ``curl | sh``. A model
that can write any of them into a command could show ``Allow ls -la?`` for a call that runs
something else. So every string drover shows that someone other than the user chose — a tool
call's input, a path, a diff, tool and MCP output, an error a server sent — goes through
:func:`visible` on its way to the screen (the REPL, the headless printer's lines on stderr,
``drover show``, ``drover mcp list``; the web page has the same rule in ``static/visible.js``):

* C0 controls but tab and newline, DEL and C1 controls (U+0080–U+009F, which some terminals
  take as escape sequences) become ``\\x1b``-style escapes, CR ``\\r``;
* directional formatting (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069) and the line
  and paragraph separators (U+2028–U+2029) become ``\\u202e``-style escapes;
* with ``code=True`` (commands, paths, file contents, tool input) every other invisible format
  character too — zero-width spaces and joiners, U+2060–U+2064, the byte-order mark, soft
  hyphens, tag characters: Unicode's "Cf" — which could make two different commands look the
  same. Prose keeps them (emoji are built with zero-width joiners).

Nothing is dropped, so what is shown is never less than what runs; an escape the text itself
spells (a literal ``\\x1b``) looks the same as the character it stands for, and both are
visible. Text shown is never cut silently: the callers wrap long lines, or say what they cut.
"""

from __future__ import annotations

import re
import unicodedata

#: Controls every terminal display must escape (tab and newline stay: they only lay out).
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
#: Directional formatting, and the separators some renderers break lines at.
_DIRECTIONAL = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_PROSE = re.compile(f"[{_CONTROLS}{_DIRECTIONAL}]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, *, code: bool = False) -> str:
    """``text`` with every character that acts instead of showing made an escape (see the
    module docstring); ``code`` for commands, paths, file contents and tool input."""
    shown = _PROSE.sub(lambda match: _escape(match.group()), text)
    if code and not shown.isascii():
        shown = "".join(
            _escape(char) if unicodedata.category(char) == "Cf" else char for char in shown
        )
    return shown
