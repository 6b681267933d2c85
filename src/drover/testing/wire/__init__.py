"""What the three wire renderers share: SSE framing, chunking, ids, token counts, replies.

Each protocol module (:mod:`.anthropic`, :mod:`.openai_chat`, :mod:`.openai_responses`) turns a
:class:`~drover.testing.scenario.ScriptedResponse` into that API's bytes with the same four
functions: ``render_stream`` (SSE frames), ``render_object`` (the ``stream: false`` JSON),
``http_error`` and ``invalid_request`` (error replies), plus ``context_overflow`` (the API's
refusal of a prompt longer than the context window). Rendering is pure and deterministic: ids
come from a per-server :class:`IdSource` and timestamps from :data:`BASE_TIME`, so the same
requests always produce the same bytes. Faults (cut, drop, stall, delay) are applied by the
server, frame by frame, on top of a rendered stream — or of a recorded reply cut into frames by
:func:`split_frames`, which each module can fail part-way with ``raw_error_frame``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from drover.testing.scenario import JSON_CONTENT_TYPE as JSON_CONTENT_TYPE
from drover.testing.scenario import SSE_CONTENT_TYPE as SSE_CONTENT_TYPE
from drover.testing.scenario import ContextOverflow, ScenarioOptions, ScriptedResponse

ProtocolName: TypeAlias = Literal["anthropic", "openai-chat", "openai-responses"]

#: Fixed "now" for ``created`` fields, so runs are byte-for-byte repeatable.
BASE_TIME = 1_750_000_000
#: A blank line: two line ends in a row, where a line end is CRLF, LF or a lone CR.
_FRAME_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_OBFUSCATION = "Zq8wR2vN5tK1yH7cXp3M"

#: Default error type (Anthropic vocabulary) and message for an HTTP status.
_STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}
#: Which status an Anthropic error type comes with (for errors that end a non-streamed reply).
_TYPE_STATUS = {error_type: status for status, (error_type, _) in _STATUS_ERRORS.items()}


def dumps(value: object) -> str:
    """Compact JSON with raw UTF-8, as the APIs send it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One SSE frame: optional ``event:`` line, one ``data:`` line, blank line."""
    payload = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {payload}\n\n".encode()


def split_frames(body: bytes) -> tuple[bytes, ...]:
    """``body`` cut after each blank line (the SSE event boundary); nothing is added or lost.

    Bytes after the last blank line (a final event without its blank line, or a body that is no
    SSE at all, like JSON) make one last frame.
    """
    frames: list[bytes] = []
    start = 0
    for match in _FRAME_END.finditer(body):
        frames.append(body[start : match.end()])
        start = match.end()
    if start < len(body):
        frames.append(body[start:])
    return tuple(frames)


def chunks(text: str, size: int) -> list[str]:
    """``text`` cut every ``size`` characters (no pieces for an empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def obfuscation(delta: str) -> str:
    """The padding OpenAI adds to streamed deltas, made deterministic."""
    return _OBFUSCATION[: (len(delta) * 7 + 3) % len(_OBFUSCATION)]


def error_defaults(status: int) -> tuple[str, str]:
    """(Anthropic error type, message) for a status without a scripted type/message."""
    if status in _STATUS_ERRORS:
        return _STATUS_ERRORS[status]
    return ("api_error", "Internal server error") if status >= 500 else _STATUS_ERRORS[400]


def overflow_tokens(spec: ContextOverflow, ctx: RenderContext) -> int:
    """The prompt size a context-overflow error reports."""
    return spec.tokens if spec.tokens is not None else spec.limit + max(1, ctx.raw_size // 4)


def status_for_error(error_type: str) -> int:
    """The HTTP status that goes with an error type when it cannot be sent mid-stream."""
    return _TYPE_STATUS.get(error_type, 500)


class IdSource:
    """Deterministic ids: one counter per prefix, owned by one server."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def next(self, prefix: str, length: int = 24) -> str:
        count = self._counts.get(prefix, 0) + 1
        self._counts[prefix] = count
        return f"{prefix}fake{count:0{max(length - 4, 1)}d}"


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete (non-streamed) HTTP answer."""

    status: int
    body: Mapping[str, Any]
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        return dumps(self.body).encode()


@dataclass(frozen=True, slots=True)
class RenderedStream:
    """All frames of a successful stream, plus how to fail it part-way."""

    frames: tuple[bytes, ...]
    #: The mid-stream error frame, given how many frames were already sent.
    error_frame: Callable[[int], bytes]
    #: Called once every frame reached the client (the Responses API stores the response).
    on_complete: Callable[[], None] = lambda: None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RenderedObject:
    """The ``stream: false`` answer."""

    body: Mapping[str, Any]
    on_complete: Callable[[], None] = lambda: None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Tokens:
    input: int
    output: int
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0

    @property
    def prompt_total(self) -> int:
        """Input as OpenAI counts it: cached tokens included."""
        return self.input + self.cache_read + self.cache_creation


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderContext:
    """Everything a renderer needs about the request being answered."""

    body: Mapping[str, Any]
    #: Size of the raw request body, for the default input-token estimate.
    raw_size: int
    options: ScenarioOptions
    ids: IdSource
    #: 1-based number of the request on this server; makes ``created`` times distinct.
    serial: int
    #: Responses API: the ``previous_response_id`` chain's items followed by this ``input``.
    resolved_input: Sequence[Any] = ()
    #: Responses API: keep a finished response's output items under its id (or ignore them).
    remember: Callable[[str, list[dict[str, Any]]], None] = lambda _id, _items: None

    @property
    def model(self) -> str:
        if self.options.model is not None:
            return self.options.model
        model = self.body.get("model")
        return model if isinstance(model, str) and model else "fake-model"

    @property
    def created(self) -> int:
        return BASE_TIME + self.serial

    def tokens(self, response: ScriptedResponse) -> Tokens:
        usage = response.usage
        estimated_output = math.ceil(response.output_chars / 4)
        output = usage.output_tokens if usage.output_tokens is not None else estimated_output
        reasoning = min(output, math.ceil(len(response.thinking or "") / 4))
        return Tokens(
            input=usage.input_tokens
            if usage.input_tokens is not None
            else max(1, self.raw_size // 4),
            output=output,
            cache_read=usage.cache_read_input_tokens,
            cache_creation=usage.cache_creation_input_tokens,
            reasoning=reasoning,
        )
