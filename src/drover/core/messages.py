"""Provider-neutral conversation types: content blocks, messages and token usage.

Everything above ``providers/`` speaks these types only. Provider-specific detail that must
survive a round trip (thinking signatures, Responses item ids, encrypted reasoning) travels in
each block's ``meta`` mapping, which the core never interprets.

All types are immutable and convert to and from plain JSON-compatible dicts
(:func:`message_to_dict` / :func:`message_from_dict`) for storage and output.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, assert_never

from drover.errors import BlankPromptError, PromptTextError

Role: TypeAlias = Literal["user", "assistant"]
Meta: TypeAlias = Mapping[str, Any]


def _empty_meta() -> dict[str, Any]:
    return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class TextBlock:
    text: str
    #: True for text cut off by a failure before its block finished streaming.
    partial: bool = False
    meta: Meta = field(default_factory=_empty_meta)
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingBlock:
    thinking: str
    #: Anthropic's signature; required to send the block back unchanged.
    signature: str | None = None
    #: Opaque payload of a redacted thinking block (Anthropic ``redacted_thinking``).
    redacted_data: str | None = None
    meta: Meta = field(default_factory=_empty_meta)
    type: Literal["thinking"] = "thinking"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUseBlock:
    id: str
    name: str
    input: Mapping[str, Any]
    #: Set when the model's input could not be parsed as a JSON object; ``input`` is then ``{}``.
    input_error: str | None = None
    meta: Meta = field(default_factory=_empty_meta)
    type: Literal["tool_use"] = "tool_use"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    meta: Meta = field(default_factory=_empty_meta)
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageBlock:
    """An image in a user's message: ``data`` is its bytes in base64, ``media_type`` one of
    ``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp`` (:mod:`drover.agent.images` reads
    one from a file, checked)."""

    media_type: str
    data: str
    meta: Meta = field(default_factory=_empty_meta)
    type: Literal["image"] = "image"

    @property
    def size(self) -> int:
        """The image's size in bytes (from the base64 length)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    @property
    def digest(self) -> str:
        """A short SHA-256 of the base64 data: what names the image where its data is left
        out (events, transcripts)."""
        return hashlib.sha256(self.data.encode("ascii", "replace")).hexdigest()[:16]


ContentBlock: TypeAlias = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    role: Role
    content: tuple[ContentBlock, ...]
    #: Message-level provider detail, e.g. ``{"provider": "openai-responses", "response_id": ...}``.
    meta: Meta = field(default_factory=_empty_meta)

    @property
    def text(self) -> str:
        """The concatenated text blocks of the message."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple([b for b in self.content if isinstance(b, ToolUseBlock)])

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple([b for b in self.content if isinstance(b, ToolResultBlock)])


def answers_in_order(uses: Sequence[ToolUseBlock], content: Sequence[ContentBlock]) -> bool:
    """Whether ``content`` starts with one result for each of ``uses`` (their ids distinct), in
    their order, and holds no other result: a results message nothing needs to change."""
    n = len(uses)
    if len(content) < n:
        return False
    ids: set[str] = set()
    for i in range(n):
        block, use_id = content[i], uses[i].id
        if not isinstance(block, ToolResultBlock) or block.tool_use_id != use_id:
            return False
        if n > 1:  # a single call cannot repeat its id
            if use_id in ids:
                return False
            ids.add(use_id)
    return len(content) == n or not any(isinstance(b, ToolResultBlock) for b in content[n:])


#: What a turn is given: the user's text, or their whole message (text and images).
Prompt: TypeAlias = str | Message

#: A pattern a text matches when it is not blank: it holds a character that is white space
#: neither to ECMAScript's ``\s`` (what a JSON Schema pattern means: a client validating with
#: the schema) nor to Python's ``str.isspace`` (what the providers drop as an empty text block).
#: The two differ: U+FEFF is white space only to the first, U+001C-U+001F and U+0085 only to the
#: second. Written out, so every regex engine reads the same class.
NOT_BLANK = (
    r"[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
    r"\u001c-\u001f\u0085]"
)
_NOT_BLANK = re.compile(NOT_BLANK)


def blank(text: str) -> bool:
    """Whether ``text`` is empty or white space only (:data:`NOT_BLANK`): the library, the
    command line and the HTTP API's schemas refuse such a prompt alike."""
    return _NOT_BLANK.search(text) is None


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a UTF-16 surrogate (U+D800–U+DFFF): half of a pair, which Python
    keeps apart where JSON wrote it as an escape, and which no UTF-8 (no journal) can hold."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def mend_surrogates(text: str) -> str:
    """``text`` with its surrogate pairs joined into their characters and any lone half
    replaced by U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def mend_json(value: Any) -> Any:
    """A decoded JSON value with every string (keys too) mended (:func:`mend_surrogates`)."""
    if isinstance(value, str):
        return mend_surrogates(value)
    if isinstance(value, dict):
        return {mend_surrogates(k): mend_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mend_json(v) for v in value]
    return value


def storable(text: str) -> str:
    """``text`` as UTF-8 (and so a journal) can hold it: itself, unless it holds surrogates
    (:func:`mend_surrogates`) — as a file name that is not UTF-8 comes from the file system
    (``surrogateescape``), into a tool's output."""
    return mend_surrogates(text) if has_surrogate(text) else text


def refuse_unsendable(prompt: Prompt) -> None:
    """Raise :class:`~drover.errors.BlankPromptError` when ``prompt`` has nothing to send (its
    text is blank and it holds no image), :class:`~drover.errors.PromptTextError` when its text
    holds half of a UTF-16 surrogate pair (no journal can write it, no API takes it)."""
    text = prompt if isinstance(prompt, str) else prompt.text
    if blank(text) and (
        isinstance(prompt, str) or not any(isinstance(b, ImageBlock) for b in prompt.content)
    ):
        raise BlankPromptError()
    if has_surrogate(text):
        raise PromptTextError()


def message_of_prompt(prompt: Prompt) -> Message:
    """The user message of a prompt; a message must be the user's, of text and images only."""
    if isinstance(prompt, str):
        return user_message(prompt)
    if prompt.role != "user" or not prompt.content:
        raise ValueError("a prompt message must be a non-empty user message")
    if not all(isinstance(b, TextBlock | ImageBlock) for b in prompt.content):
        raise ValueError("a prompt message holds text and image blocks only")
    return prompt


def user_message(text: str, images: Iterable[ImageBlock] = ()) -> Message:
    """A user's message: its text, then its images."""
    blocks: list[ContentBlock] = [TextBlock(text=text)] if text or not images else []
    return Message(role="user", content=(*blocks, *images))


def assistant_message(blocks: Iterable[ContentBlock], meta: Meta | None = None) -> Message:
    return Message(role="assistant", content=tuple(blocks), meta=dict(meta or {}))


def tool_result_message(results: Iterable[ToolResultBlock]) -> Message:
    return Message(role="user", content=tuple(results))


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: True when the stream was cut off, so the counts are only what was known by then.
    partial: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            partial=self.partial or other.partial,
        )

    def as_partial(self) -> Usage:
        return replace(self, partial=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "partial": self.partial,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cache_read_tokens=int(data.get("cache_read_tokens", 0)),
            cache_write_tokens=int(data.get("cache_write_tokens", 0)),
            partial=bool(data.get("partial", False)),
        )


# --- JSON conversion -------------------------------------------------------------------------


def block_to_dict(block: ContentBlock, *, image_data: bool = True) -> dict[str, Any]:
    """The JSON form of a block. ``image_data=False`` leaves an image's data out (its size and
    digest name it): the form of events and transcripts, so an image is stored once, in its
    turn's message, not again in every event that shows the message."""
    out: dict[str, Any]
    match block:
        case ImageBlock():
            out = {"type": "image", "media_type": block.media_type}
            if image_data:
                out["data"] = block.data
            else:
                out["bytes"] = block.size
                out["sha256"] = block.digest
        case TextBlock():
            out = {"type": "text", "text": block.text}
            if block.partial:
                out["partial"] = True
        case ThinkingBlock():
            out = {"type": "thinking", "thinking": block.thinking}
            if block.signature is not None:
                out["signature"] = block.signature
            if block.redacted_data is not None:
                out["redacted_data"] = block.redacted_data
        case ToolUseBlock():
            out = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            if block.input_error is not None:
                out["input_error"] = block.input_error
        case ToolResultBlock():
            out = {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": block.content,
                "is_error": block.is_error,
            }
        case _:
            assert_never(block)
    if block.meta:
        out["meta"] = dict(block.meta)
    return out


def _copy(mapping: Mapping[str, Any] | None) -> dict[str, Any]:
    """A fresh dict of ``mapping`` (None or empty: an empty one)."""
    return dict(mapping) if mapping else {}


def block_from_dict(data: Mapping[str, Any]) -> ContentBlock:
    meta = _copy(data.get("meta"))
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=str(data["text"]), partial=bool(data.get("partial")), meta=meta)
    if kind == "tool_result":
        return ToolResultBlock(
            tool_use_id=str(data["tool_use_id"]),
            content=str(data.get("content", "")),
            is_error=bool(data.get("is_error", False)),
            meta=meta,
        )
    if kind == "tool_use":
        return ToolUseBlock(
            id=str(data["id"]),
            name=str(data["name"]),
            input=_copy(data.get("input")),
            input_error=data.get("input_error"),
            meta=meta,
        )
    if kind == "image":
        # An image given without its data (an event's form) comes back with none.
        return ImageBlock(
            media_type=str(data.get("media_type", "")), data=str(data.get("data", "")), meta=meta
        )
    if kind == "thinking":
        return ThinkingBlock(
            thinking=str(data.get("thinking", "")),
            signature=data.get("signature"),
            redacted_data=data.get("redacted_data"),
            meta=meta,
        )
    raise ValueError(f"unknown content block type: {kind!r}")


def message_to_dict(message: Message, *, image_data: bool = True) -> dict[str, Any]:
    """The JSON form of a message (``image_data``: see :func:`block_to_dict`)."""
    out: dict[str, Any] = {
        "role": message.role,
        "content": [block_to_dict(b, image_data=image_data) for b in message.content],
    }
    if message.meta:
        out["meta"] = dict(message.meta)
    return out


def message_from_dict(data: Mapping[str, Any]) -> Message:
    role = data.get("role")
    if role not in ("user", "assistant"):
        raise ValueError(f"unknown message role: {role!r}")
    return Message(
        role=role,
        content=tuple([block_from_dict(b) for b in data.get("content", ())]),
        meta=_copy(data.get("meta")),
    )


#: What an image counts for in the token estimate, in characters: about 1,600 tokens, what
#: the APIs charge for an image of a little over a megapixel.
IMAGE_CHARS = 6_400


def content_chars(message: Message) -> int:
    """Characters of content in a message, the basis of the token estimate."""
    total = 0
    for block in message.content:
        match block:
            case TextBlock():
                total += len(block.text)
            case ThinkingBlock():
                total += len(block.thinking)
            case ToolUseBlock():
                total += len(block.name) + len(json.dumps(block.input, ensure_ascii=False))
            case ToolResultBlock():
                total += len(block.content)
            case ImageBlock():
                total += IMAGE_CHARS
            case _:
                assert_never(block)
    return total
