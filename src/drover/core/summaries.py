"""One-line summaries of tool inputs and outputs for status rows and spinners.

They are for people watching, not for the model: short, single-line, never the full payload,
and with every character that would act on a terminal or reorder text shown as an escape
(:func:`~drover.core.visible.visible`): wherever a summary is shown — the REPL, ``-p``'s lines, the
web page's permission question — it shows what the call holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from drover.core.visible import visible

#: Keys whose value best says what a call does, in order of preference.
SUMMARY_KEYS = ("command", "path", "query", "pattern", "url")
#: The longest input summary, ellipsis included.
INPUT_SUMMARY_LIMIT = 100
ELLIPSIS = "…"


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - len(ELLIPSIS), 0)].rstrip() + ELLIPSIS


def _one_line(text: str) -> str:
    return " ".join(text.split())


def summarise_input(name: str, input: Mapping[str, Any]) -> str:
    """``"bash: ls -la"`` from the first present key of :data:`SUMMARY_KEYS`, else
    ``name {json}``; one line, at most :data:`INPUT_SUMMARY_LIMIT` characters."""
    for key in SUMMARY_KEYS:
        value = input.get(key)
        if isinstance(value, str) and value.strip():
            shown = visible(_one_line(value), code=True)
            return _truncate(f"{name}: {shown}", INPUT_SUMMARY_LIMIT)
    try:
        shown = json.dumps(input, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):  # a circular structure; not from JSON, but be safe
        shown = repr(input)
    return _truncate(visible(_one_line(f"{name} {shown}"), code=True), INPUT_SUMMARY_LIMIT)


def summarise_output(text: str, limit: int = 80) -> str:
    """The first non-blank line of ``text``, whitespace collapsed, cut to ``limit`` characters
    (ellipsis included). When more lines follow, the summary ends with an ellipsis too."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    first = visible(_one_line(lines[0]))
    if len(lines) > 1:
        return first[: max(limit - len(ELLIPSIS), 0)].rstrip() + ELLIPSIS
    return _truncate(first, limit)
