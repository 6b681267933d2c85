"""Tool-call ids that every wire protocol accepts, mapped deterministically.

A history may hold tool calls made through another protocol (the user switched provider), and
each API has its own rule for ids:

* Anthropic Messages: ``^[a-zA-Z0-9_-]+$``, 64 characters at most;
* OpenAI Chat Completions: 40 characters at most;
* OpenAI Responses: ``call_id`` is any string of 64 characters at most (item ``id``\\ s are
  another matter: they are only sent when they came from that API, see
  :mod:`drover.providers.convert_openai_responses`).

:func:`fit_id` leaves a valid id alone and otherwise sanitises it and appends a short hash of
the original, so the same input always gives the same output, in any process. A
:class:`ToolIdMapper` applies it over one request's history in order: a ``tool_use`` and the
``tool_result`` that answers it get the same id, and ids stay unique even when the history
repeats one (the later call gets a ``_2`` suffix, and its result follows it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdRule:
    """What one API accepts as a tool-call id."""

    name: str
    max_length: int
    #: Characters not allowed in an id (replaced by ``_``), or None when any character is.
    invalid_chars: re.Pattern[str] | None = None

    def accepts(self, tool_id: str) -> bool:
        if not tool_id or len(tool_id) > self.max_length:
            return False
        return self.invalid_chars is None or self.invalid_chars.search(tool_id) is None


ANTHROPIC_IDS = IdRule("anthropic", 64, re.compile(r"[^A-Za-z0-9_-]"))
CHAT_IDS = IdRule("openai", 40)
RESPONSES_IDS = IdRule("openai-responses", 64)

_HASH_CHARS = 10


def short_hash(text: str, length: int = _HASH_CHARS) -> str:
    """A stable hex digest prefix (the same in every process, unlike ``hash``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def with_suffix(base: str, suffix: str, rule: IdRule) -> str:
    """``base + suffix``, cutting ``base`` so the whole fits the rule's length."""
    room = rule.max_length - len(suffix)
    return base[: max(room, 0)] + suffix


def fit_id(tool_id: str, rule: IdRule) -> str:
    """``tool_id`` itself when ``rule`` accepts it, else a sanitised id with a hash suffix."""
    if rule.accepts(tool_id):
        return tool_id
    cleaned = tool_id if rule.invalid_chars is None else rule.invalid_chars.sub("_", tool_id)
    return with_suffix(cleaned or "call", "_" + short_hash(tool_id), rule)


def synthetic_call_id(seed: str, index: int) -> str:
    """A deterministic id for a tool call its server sent without one."""
    return "call_" + short_hash(f"{seed}\x00{index}", 24)


def unique_id(candidate: str, taken: set[str], rule: IdRule | None = None) -> str:
    """``candidate``, or ``candidate_2``, ``_3``… whichever is not in ``taken`` (then added)."""
    chosen, n = candidate, 1
    while chosen in taken:
        n += 1
        suffix = f"_{n}"
        chosen = with_suffix(candidate, suffix, rule) if rule else candidate + suffix
    taken.add(chosen)
    return chosen


class ToolIdMapper:
    """Maps the ids of one request's history, in order, onto one API's rule.

    Call :meth:`call` for each ``tool_use`` and :meth:`result` for each ``tool_result``, in
    history order. A result takes the id given to the latest call with the same original id.
    """

    def __init__(self, rule: IdRule) -> None:
        self._rule = rule
        self._latest: dict[str, str] = {}
        self._taken: set[str] = set()

    def call(self, original: str) -> str:
        base = fit_id(original or f"call_{len(self._taken) + 1}", self._rule)
        mapped = unique_id(base, self._taken, self._rule)
        self._latest[original] = mapped
        return mapped

    def result(self, original: str) -> str:
        mapped = self._latest.get(original)
        return mapped if mapped is not None else fit_id(original or "call", self._rule)
