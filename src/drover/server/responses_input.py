"""What a ``POST /v1/responses`` may hold, read into what it asks of drover: the new user
message, the history the client sent before it, and how the answer is wanted.

The fields. drover takes ``model`` (any name: the server's agent runs the turn), ``input``,
``stream``, ``background``, ``store`` (true), ``stream_options`` and where the turn runs
(``previous_response_id``, ``conversation``). The other fields of the API are settings of a
model or a client's tools, which the server's agent decides: each is taken only with a value
that changes nothing — null for every one (the API's "not given"); the values the frameworks
send by default (``include: []``, ``tools: []``, ``tool_choice: "auto"``,
``parallel_tool_calls: true``); identifiers and hints that ask nothing of the agent (``user``,
``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``); and the values drover
keeps anyway (``truncation: "auto"`` — drover compacts a conversation that outgrows the
model's context —, ``text`` as plain text, ``reasoning`` with nothing set, ``metadata: {}``,
``service_tier`` ``auto``/``default``, ``top_logprobs: 0``, ``include`` of
``reasoning.encrypted_content``, since no reasoning item is sent). Any other value is refused
with a 422 naming the field; a field the API does not have is refused as unknown.

The input: a string, or a list of items ending with the new user message (string content or
``input_text`` parts). The items before it are the history the client holds, as the Agents
SDK's ``to_input_list()`` or pydantic-ai's ``message_history`` send it: user messages, the
assistant messages and ``mcp_call`` items of drover's answers (their text and output are not
compared: the journal's are the durable ones; an id-less assistant message is taken where an
answer is). It must be the conversation's own (:func:`check_history`). System and developer
messages, the client's own tool calls and outputs, and other items are refused by type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from drover.core.messages import blank
from drover.journal.records import TurnRecord
from drover.server.bodies import MAX_CONTENT
from drover.server.doors import DOOR_ID, invalid, user_text
from drover.server.errors import ApiError
from drover.server.responses_api import MCP_PREFIX, MESSAGE_PREFIX

#: The fields drover reads, and their types (null is "not given", as everywhere in the API).
TAKEN: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "input": (str, list),
    "background": bool,
    "stream": bool,
    "store": bool,
    "previous_response_id": str,
    "conversation": (str, dict),
    "stream_options": dict,
}


def _never(value: Any) -> bool:
    return False


def _strings(value: Any) -> bool:
    return isinstance(value, str)


def _plain_text(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= {"format", "verbosity"}
        and value.get("format", {"type": "text"}) == {"type": "text"}
        and value.get("verbosity") is None
    )


#: The API's fields drover takes only as null (not given): what each would change.
NULL_ONLY: dict[str, str] = {
    "max_tool_calls": "the server's --max-turns limits a turn",
    "instructions": "the server's agent has its own instructions",
    "max_output_tokens": "the server's agent sets its model's limits",
    "temperature": "the server's agent sets its model's sampling",
    "top_p": "the server's agent sets its model's sampling",
    "prompt": "the server's agent has its own prompt",
    "context_management": "drover manages the conversation's context",
    "moderation": "drover does not moderate",
    "background_options": "drover runs every response in the background",
    "prompt_cache_options": "the server's agent sets its model's caching",
    "access_programs": "drover's agent runs its own tools",
    "image": "drover takes text",
}


#: The API's other fields: the values taken as changing nothing, and what the refusal says.
NO_OPS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "include": (
        lambda v: isinstance(v, list) and all(x == "reasoning.encrypted_content" for x in v),
        "drover sends no reasoning, logprobs or hosted tool results to include",
    ),
    "tools": (lambda v: v == [], "drover's agent runs its own tools; a client's are not taken"),
    "tool_choice": (lambda v: v == "auto", "drover's agent decides which tools it calls"),
    "parallel_tool_calls": (lambda v: v is True, "drover runs a model's calls in parallel"),
    "top_logprobs": (
        lambda v: type(v) in (int, float) and v == 0,  # (not false, which == 0 too)
        "drover sends no logprobs",
    ),
    "reasoning": (
        lambda v: isinstance(v, dict) and all(x is None for x in v.values()),
        "the server's agent sets its model's reasoning",
    ),
    "text": (_plain_text, "drover answers in plain text"),
    "truncation": (lambda v: v == "auto", "drover compacts a conversation that grows too long"),
    "metadata": (lambda v: v == {}, "drover does not keep a response's metadata"),
    "service_tier": (lambda v: v in ("auto", "default"), "the server's agent picks its service"),
    "user": (_strings, "user is an end user's identifier"),
    "safety_identifier": (_strings, "safety_identifier is an end user's identifier"),
    "prompt_cache_key": (_strings, "prompt_cache_key is a hint"),
    "prompt_cache_retention": (_strings, "prompt_cache_retention is a hint"),
}
NO_OPS.update((name, (_never, why)) for name, why in NULL_ONLY.items())
#: Every field a request may name (json_body refuses the others as unknown).
FIELDS: dict[str, type] = dict.fromkeys([*TAKEN, *NO_OPS], object)


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


def read_request(data: dict[str, Any]) -> Asked:
    """The request's fields checked (422 naming the first refused one) and its input read."""
    for name in sorted(data):
        value = data[name]
        kind = TAKEN.get(name)
        if kind is not None and value is not None and not isinstance(value, kind):
            raise invalid(f"{name} must be {_TYPE_NAMES[name]}")
        if name in NO_OPS and value is not None and not NO_OPS[name][0](value):
            raise invalid(
                f"{name} {_shown(value)} is not supported: {NO_OPS[name][1]} (drover takes "
                "model, input, stream, background, store, conversation, previous_response_id)"
            )
    if data.get("store") is False:
        raise invalid("store must be true: drover's journal keeps every response")
    if not isinstance(data.get("model"), str) or not data["model"]:
        raise invalid("model is required (any name: the server's agent runs the turn)")
    options = data.get("stream_options") or {}
    if set(options) - {"include_obfuscation"} or not all(
        isinstance(v, bool) for v in options.values()
    ):
        raise invalid("stream_options takes only include_obfuscation, true or false")
    history, text = read_input(data.get("input"))
    return Asked(
        text=text,
        history=history,
        stream=data.get("stream") is True,
        wait=data.get("background") is not True,
    )


_TYPE_NAMES = {
    "model": "a string",
    "input": "a string or a list of items",
    "background": "true or false",
    "stream": "true or false",
    "store": "true",
    "previous_response_id": "a response id",
    "conversation": 'a conversation id or {"id": ...}',
    "stream_options": "an object",
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def read_input(value: Any) -> tuple[list[Posted], str]:
    """``input`` as the history before the new user message, and that message's text."""
    if isinstance(value, str):
        return [], _checked(value, "input")
    if not isinstance(value, list) or not value:
        raise invalid("input must be a non-empty string or a list of items")
    items = [_item(n, raw) for n, raw in enumerate(value, 1)]
    last = items[-1]
    if last.role != "user":
        raise ApiError(
            409,
            "no_new_message",
            "the input ends with an answer: drover answers a new user message, at the input's "
            "end (the items before it are the conversation's)",
        )
    return items[:-1], last.text


def _checked(text: Any, where: str) -> str:
    if not isinstance(text, str) or blank(text):
        raise invalid(f"{where} must be a non-empty string or a user message")
    if len(text) > MAX_CONTENT:
        raise ApiError(413, "body_too_large", f"{where} is over {MAX_CONTENT} characters")
    return text


def _item(n: int, raw: Any) -> Posted:
    where = f"input item {n}"
    if not isinstance(raw, dict):
        raise invalid(f"{where} is not an object")
    kind = raw.get("type", "message")
    if kind == "mcp_call":
        if not isinstance(raw.get("id"), str):
            raise invalid(f"{where}: an mcp_call item has its id")
        return Posted("assistant", turn=_turn_named(raw.get("id"), MCP_PREFIX), ident=_id(raw))
    if kind != "message":
        raise invalid(
            f"{where}: {str(kind)[:40]} items are not taken (drover runs its own tools and "
            "keeps its own history)"
        )
    role = raw.get("role")
    if role in ("system", "developer"):
        raise invalid(f"{where}: {role} messages are not taken (the agent has its own)")
    if role == "assistant":
        return Posted("assistant", turn=_turn_named(raw.get("id"), MESSAGE_PREFIX), ident=_id(raw))
    if role != "user":
        raise invalid(f"{where}: role must be user or assistant")
    unknown = sorted(set(raw) - {"type", "role", "content", "id", "status"})
    if unknown:
        raise invalid(f"unsupported field in {where}: {unknown[0][:40]}")
    if not all(isinstance(raw.get(k, ""), str) for k in ("id", "status")):
        raise invalid(f"{where}: a user message's id and status are strings")
    content = raw.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "input_text":
                kind = part.get("type") if isinstance(part, dict) else part
                raise invalid(f"{where}: only input_text content is taken, not {str(kind)[:40]!r}")
            if not isinstance(part.get("text"), str) or set(part) != {"type", "text"}:
                raise invalid(f'{where}: an input_text part is {{"type": "input_text", "text"}}')
            texts.append(part["text"])
        content = "\n".join(texts)
    return Posted("user", text=_checked(content, where))


def _id(raw: dict[str, Any]) -> str:
    ident = raw.get("id")
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
