"""What a ``POST /v1/responses`` asks of drover, read from its validated body
(:mod:`.responses_request`): the new user message, the history the client sent before it, and
how the answer is wanted.

The items before the new message are the history the client holds, as the Agents SDK's
``to_input_list()`` or pydantic-ai's ``message_history`` send it: user messages, the assistant
messages and ``mcp_call`` items of drover's answers (their text and output are not compared:
the journal's are the durable ones; an id-less assistant message is taken where an answer is).
It must be the conversation's own (:func:`check_history`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drover.journal.records import TurnRecord
from drover.server.doors import DOOR_ID, user_text
from drover.server.errors import ApiError
from drover.server.responses_api import MCP_PREFIX, MESSAGE_PREFIX
from drover.server.responses_request import AnswerItem, McpCallItem, ResponsesRequest, UserItem


@dataclass(frozen=True, slots=True)
class Posted:
    """An item of the history a request sent before its new message: a user message's text,
    or an answer's item (``turn``: the drover turn its id names; None for one without)."""

    role: Literal["user", "assistant"]
    text: str = ""
    turn: str | None = None
    ident: str = ""


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asks: the new message after ``history``; ``stream`` its events;
    ``wait`` (not ``background``) the answer once the response ended."""

    text: str
    history: list[Posted]
    stream: bool
    wait: bool


def read_request(body: ResponsesRequest) -> Asked:
    """What the request asks (409 when its input ends with an answer, not a new message)."""
    history, text = read_input(body.input)
    return Asked(
        text=text,
        history=history,
        stream=body.stream is True,
        wait=body.background is not True,
    )


def read_input(value: str | list[UserItem | AnswerItem | McpCallItem]) -> tuple[list[Posted], str]:
    """``input`` as the history before the new user message, and that message's text."""
    if isinstance(value, str):
        return [], value
    items = [_posted(item) for item in value]
    last = items[-1]
    if last.role != "user":
        raise ApiError(
            409,
            "no_new_message",
            "the input ends with an answer: drover answers a new user message, at the input's "
            "end (the items before it are the conversation's)",
        )
    return items[:-1], last.text


def _posted(item: UserItem | AnswerItem | McpCallItem) -> Posted:
    if isinstance(item, UserItem):
        return Posted("user", text=item.text)
    prefix = MCP_PREFIX if isinstance(item, McpCallItem) else MESSAGE_PREFIX
    return Posted("assistant", turn=_turn_named(item.id, prefix), ident=_id(item.id))


def _id(ident: Any) -> str:
    return ident[:64] if isinstance(ident, str) else ""


def _turn_named(ident: Any, prefix: str) -> str | None:
    """The drover turn an output item's id names (``PREFIX + TURN + _ + …``), if it names one."""
    if not isinstance(ident, str) or not ident.startswith(prefix):
        return None
    turn = ident[len(prefix) :].partition("_")[0]
    return turn if DOOR_ID.fullmatch(turn) else None


def named_turn(history: Sequence[Posted]) -> str | None:
    """The first drover turn the history's items name by their ids (None: none does)."""
    return next((item.turn for item in history if item.turn is not None), None)


def mismatch(message: str) -> ApiError:
    return ApiError(409, "history_mismatch", message)


def check_history(history: Sequence[Posted], groups: Sequence[Sequence[TurnRecord]]) -> None:
    """Raise a 409 unless ``history`` is the conversation of ``groups`` (its responses, in
    order): its user messages in order with the same text, all of them, and answers' items
    only where they answer — an answer the client never got may be missing."""
    stored: list[tuple[str, str]] = []  # ("user", text) | ("assistant", the response's head)
    heads: dict[str, str] = {}
    for group in groups:
        text = user_text(group[0])
        if text is not None:
            stored.append(("user", text))
        stored.append(("assistant", group[0].id))
        heads.update((turn.id, group[0].id) for turn in group)
    at, answering = 0, None
    for n, item in enumerate(history, 1):
        if item.role == "user":
            while at < len(stored) and stored[at][0] == "assistant":
                at += 1
            if at >= len(stored) or stored[at] != ("user", item.text):
                raise mismatch(
                    f"input item {n} is not the conversation's user message at that place: "
                    "the items before the new message must be the conversation's own"
                )
            at, answering = at + 1, None
            continue
        head = heads.get(item.turn) if item.turn is not None else answering
        if item.turn is not None and head is None:
            raise mismatch(f"input item {n} ({item.ident!r}) is not of this conversation")
        if head is not None and head == answering:
            continue  # (another item of the same answer)
        found = at
        while found < len(stored) and stored[found][0] == "assistant":
            if head is None or stored[found][1] == head:
                break
            found += 1
        if found >= len(stored) or stored[found][0] != "assistant":
            raise mismatch(
                f"input item {n} (an answer) is not the conversation's answer at that place"
            )
        at, answering = found + 1, stored[found][1]
    missing = sum(1 for role, _ in stored[at:] if role == "user")
    if missing:
        raise mismatch(
            f"the conversation holds {missing} more user message(s) than the input sent "
            "before its new one"
        )
