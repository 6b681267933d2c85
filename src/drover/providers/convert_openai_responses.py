"""Neutral history and tools → OpenAI Responses API ``input`` items, and response chaining.

Items, in history order:

* user text → ``{"role": "user", "content": text}`` (with images: ``content`` is a list of
  ``input_text`` and ``input_image`` parts, the image a ``data:`` URL); each tool result →
  ``{"type": "function_call_output", "call_id", "output"}`` (an error result's output starts
  with ``Error:``, the API having no error flag);
* assistant text → ``{"type": "message", "role": "assistant", "content": [{"type":
  "output_text", "text", "annotations": []}]}``; a tool call → ``{"type": "function_call",
  "call_id", "name", "arguments"}`` (arguments as a JSON string);
* a reasoning item goes back exactly as it came, and only when it came from this API and is
  followed by another item of its response (the API refuses a lone one). Thinking from other
  providers is dropped: it cannot be turned into a reasoning item.

Item ``id``\\ s (``msg_…``, ``fc_…``) are sent only when they are genuine: from this API, of a
response that completed, and while the server stores responses. When it does not (``store``
false, or a ``previous_response_id`` was refused) ids are left out and reasoning items are sent
only with their ``encrypted_content`` — the API cannot look anything up.

:func:`plan_input` decides whether the request can continue a stored response: when the last
assistant message carries this API's ``response_id`` and the history before it converts to the
very input that response was made from (compared by digest, recorded as ``input_digest`` in the
message meta), only the items after it are sent, with ``previous_response_id``. A history that
was compacted, repaired or edited since then no longer matches and is sent whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, assert_never

from openai.types.responses import FunctionToolParam

from drover.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
)
from drover.core.messages import ToolUseBlock as NeutralToolUse
from drover.core.model_stream import ToolSpec
from drover.providers.convert_common import data_url, has_text, normalise_history, user_parts
from drover.providers.convert_openai_chat import arguments_json, error_content
from drover.providers.ids import RESPONSES_IDS, ToolIdMapper

PROVIDER = "openai-responses"

Item = dict[str, Any]


def reasoning_item(block: ThinkingBlock) -> Mapping[str, Any] | None:
    """The Responses reasoning item a thinking block came from, if it came from this API."""
    if block.meta.get("provider") != PROVIDER:
        return None
    item = block.meta.get("item")
    if isinstance(item, Mapping) and item.get("type") == "reasoning" and item.get("id"):
        return item
    return None


def _sendable(block: ContentBlock) -> bool:
    match block:
        case TextBlock():
            return has_text(block)
        case ThinkingBlock():
            return reasoning_item(block) is not None
        case NeutralToolUse() | ToolResultBlock():
            return True
        case ImageBlock():
            return bool(block.data)
        case _:
            assert_never(block)


def _genuine_id(message: Message, block: ContentBlock, prefix: str, stored: bool) -> str | None:
    if not stored or message.meta.get("provider") != PROVIDER:
        return None
    if not message.meta.get("response_id") or block.meta.get("provider") != PROVIDER:
        return None
    item_id = block.meta.get("item_id")
    return item_id if isinstance(item_id, str) and item_id.startswith(prefix) else None


def _assistant_items(message: Message, ids: ToolIdMapper, stored: bool) -> list[Item]:
    items: list[Item] = []
    blocks = message.content
    for position, block in enumerate(blocks):
        match block:
            case ThinkingBlock():
                reasoning = reasoning_item(block)
                followed = any(not isinstance(b, ThinkingBlock) for b in blocks[position + 1 :])
                if reasoning is None or not followed:
                    continue
                if not stored and not reasoning.get("encrypted_content"):
                    continue
                items.append({k: v for k, v in reasoning.items() if v is not None})
            case TextBlock():
                text_item: Item = {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                }
                item_id = _genuine_id(message, block, "msg_", stored)
                if item_id is not None:
                    text_item["id"] = item_id
                    text_item["status"] = "completed"
                items.append(text_item)
            case NeutralToolUse():
                call: Item = {
                    "type": "function_call",
                    "call_id": ids.call(block.id),
                    "name": block.name,
                    "arguments": arguments_json(block),
                }
                item_id = _genuine_id(message, block, "fc_", stored)
                if item_id is not None:
                    call["id"] = item_id
                items.append(call)
            case ToolResultBlock() | ImageBlock():
                pass  # never in an assistant message
            case _:
                assert_never(block)
    return items


def _user_items(message: Message, ids: ToolIdMapper) -> list[Item]:
    results, parts = user_parts(message)
    items: list[Item] = [
        {
            "type": "function_call_output",
            "call_id": ids.result(result.tool_use_id),
            "output": error_content(result),
        }
        for result in results
    ]
    if any(isinstance(part, ImageBlock) for part in parts):
        items.append({"role": "user", "content": [_input_part(part) for part in parts]})
    elif parts:
        items.append({"role": "user", "content": "\n\n".join(_text(p) for p in parts)})
    return items


def _text(part: TextBlock | ImageBlock) -> str:
    return part.text if isinstance(part, TextBlock) else ""


def _input_part(part: TextBlock | ImageBlock) -> Item:
    if isinstance(part, ImageBlock):
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    return {"type": "input_text", "text": part.text}


def convert_messages(
    messages: Iterable[Message], *, stored: bool
) -> list[tuple[Message, list[Item]]]:
    """Each message of the normalised history with the input items it becomes."""
    ids = ToolIdMapper(RESPONSES_IDS)
    out: list[tuple[Message, list[Item]]] = []
    for message in normalise_history(messages, keep=_sendable, merge=False):
        if message.role == "assistant":
            out.append((message, _assistant_items(message, ids, stored)))
        else:
            out.append((message, _user_items(message, ids)))
    return out


def to_responses_input(messages: Iterable[Message], *, stored: bool) -> list[Item]:
    """The whole history as ``input`` items."""
    return [item for _message, items in convert_messages(messages, stored=stored) for item in items]


#: The digest's JSON form; one encoder for every item (``json.dumps`` would build one per call).
_DIGEST_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def items_digest(items: Sequence[Item]) -> str:
    """A stable fingerprint of input items (compared across requests and processes)."""
    text = _DIGEST_JSON.encode(items)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class InputPlan:
    """What one request sends: all items, or those after ``previous_response_id``.

    :attr:`digest` is the whole input's :func:`items_digest`. It is computed when first read,
    unless the chaining check already did (it reaches it for free): the provider reads it once
    the response has ended, so a request that cannot chain goes out without encoding the
    history a second time for it (the body's JSON is the first).
    """

    __slots__ = ("_digest", "_whole", "items", "previous_response_id")

    def __init__(
        self,
        items: list[Item],
        *,
        whole: Sequence[Item] | None = None,
        digest: str | None = None,
        previous_response_id: str | None = None,
    ) -> None:
        self.items = items
        self.previous_response_id = previous_response_id
        self._whole = items if whole is None else whole
        self._digest = digest

    @property
    def digest(self) -> str:
        """Digest of the whole input this response is made from (kept as ``input_digest``)."""
        if self._digest is None:
            self._digest = items_digest(self._whole)
        return self._digest


class _Digest:
    """:func:`items_digest` computed as items come, so the digest of any prefix is at hand too:
    the whole input and the part before the last assistant message cost one pass, not two."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"[")
        self._count = 0

    def add(self, item: Item) -> None:
        text = _DIGEST_JSON.encode(item)
        self._hash.update((("," if self._count else "") + text).encode("utf-8", "surrogatepass"))
        self._count += 1

    def value(self) -> str:
        done = self._hash.copy()
        done.update(b"]")
        return done.hexdigest()[:32]


def plan_input(messages: Iterable[Message], *, stored: bool) -> InputPlan:
    converted = convert_messages(messages, stored=stored)
    full = [item for _message, items in converted for item in items]
    last = max((i for i, (m, _) in enumerate(converted) if m.role == "assistant"), default=None)
    if not stored or last is None:
        return InputPlan(full)
    meta = converted[last][0].meta
    response_id = meta.get("response_id")
    if meta.get("provider") != PROVIDER or not isinstance(response_id, str) or not response_id:
        return InputPlan(full)
    after = [item for _message, items in converted[last + 1 :] for item in items]
    if not after or not isinstance(meta.get("input_digest"), str):
        return InputPlan(full)
    # Only now is the digest of what came before the last response worth a pass.
    running, before = _Digest(), None
    for position, (_message, items) in enumerate(converted):
        if position == last:
            before = running.value()
        for item in items:
            running.add(item)
    digest = running.value()
    if meta.get("input_digest") != before:
        return InputPlan(full, digest=digest)
    return InputPlan(after, whole=full, digest=digest, previous_response_id=response_id)


def to_responses_tools(tools: Sequence[ToolSpec]) -> list[FunctionToolParam]:
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.input_schema),
            "strict": False,
        }
        for tool in tools
    ]
