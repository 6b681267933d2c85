"""Scenarios for the fake LLM server: what the model "says", one scripted response per request.

A scenario is a JSON or YAML file, or the equivalent Python data::

    options: {ping: true, chunk_size: 8, json_chunk: 7, delay: 0, store_responses: true,
              model: null}
    responses:
      - text: "Hello"
        thinking: "pondering"
        tool_calls: [{name: read_file, input: {path: a.txt}}, {name: x, raw_input: '{"a'}]
        stop_reason: end_turn
        usage: {input_tokens: 12, output_tokens: 5}
      - http_error: {status: 529, type: overloaded_error, message: Overloaded}
      - context_overflow: {tokens: 210000, limit: 200000}   # or just `context_overflow: true`
      - {text: "cut short", error_after: 5, error: {type: overloaded_error}}
      - {raw: recordings/tool-use.sse, delay: 0.01}
      - {hang: true}                       # no status line at all: a server that never answers
      - {text: "one frame at a time", gate: true}   # each frame waits for server.step()
      - {raw_text: "data: [DONE]\\n\\n", content_type: text/event-stream, status: 200}

``raw`` replays a recorded reply: the bytes of the file (a path relative to the scenario file's
directory, or absolute; for Python data, relative to ``base_dir``, by default the current one)
are sent verbatim, whatever the protocol and whether the request asked for a stream. ``raw_text``
gives the bytes inline (UTF-8). ``content_type`` (default ``text/event-stream; charset=utf-8``,
or ``application/json`` for a ``.json`` file) and ``status`` (default 200) set the reply's
headline. The body is cut into SSE frames after each blank line, so ``delay`` paces each frame
and ``error_after: N`` (the protocol's error event after N frames), ``drop_after: N`` and
``stall_after: N`` count frames. The request is still recorded and validated first; a raw reply
is never stored for a Responses ``previous_response_id``. ``raw``/``raw_text`` cannot be combined
with the keys that describe a rendered reply (``text``, ``tool_calls``, ``usage``, …).

``gate: true`` holds each frame of the reply (a reply that is not a stream: its body) until the
test lets it go with :meth:`FakeLLMServer.step <drover.testing.server.FakeLLMServer.step>`,
which returns the frame once it is written: the test knows, at every moment, exactly what the
client was sent (one gated reply at a time).

``context_overflow`` answers as each API does when the prompt does not fit the context window:
Anthropic's 400 "prompt is too long: N tokens > M maximum", Chat Completions' 400 with code
``context_length_exceeded``, the Responses API's 400 with that code — or, with ``mid_stream:
failed`` (or ``error``), a Responses stream that opens and then ends in ``response.failed`` (or
an ``error`` event) carrying that code; the other protocols ignore ``mid_stream``. ``tokens``
defaults to ``limit`` (default 200000) plus the request's estimated size.

A top-level list is read as ``responses``. Parsing is strict: an unknown key or a value of the
wrong type raises :class:`ValueError` naming where it is (``responses[2].tool_calls[0]: …``), so
the CLI can print it as one line. Everything here is immutable data; apart from ``raw`` replies,
which go out as they are, it is protocol-neutral, and the :mod:`drover.testing.wire` modules turn
it into each API's bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

import yaml

StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"
]
#: Behaviours of Chat-Completions-compatible servers (Ollama, vLLM, llama.cpp, LM Studio…).
Quirk: TypeAlias = Literal[
    "args_whole",
    "no_ids",
    "repeated_ids",
    "no_usage",
    "reasoning_content",
    "stop_on_tool_call",
    "no_role_chunk",
]
STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
QUIRKS: frozenset[str] = frozenset(get_args(Quirk))
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call; ``raw_input`` (argument text, maybe not JSON) wins over ``input``."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    raw_input: str | None = None
    id: str | None = None

    def arguments(self, *, spaced: bool = False) -> str:
        """The argument text as streamed: Anthropic spaces its JSON, OpenAI sends it compact."""
        if self.raw_input is not None:
            return self.raw_input
        separators = (", ", ": ") if spaced else (",", ":")
        return json.dumps(self.input, separators=separators, ensure_ascii=False)

    def parsed_input(self) -> dict[str, Any]:
        """The input as an object; unparseable ``raw_input`` becomes ``{}``."""
        if self.raw_input is None:
            return dict(self.input)
        try:
            value = json.loads(self.raw_input)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpError:
    """Answer with an error status and the protocol's error body instead of a response."""

    status: int
    #: Anthropic-style error type; derived from ``status`` when omitted.
    type: str | None = None
    message: str | None = None
    #: Seconds for the ``retry-after`` header (429 gets ``0`` when omitted).
    retry_after: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamError:
    """The error sent part-way through a stream.

    ``type: failed`` makes the Responses API send ``response.failed`` instead of ``error``.
    """

    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextOverflow:
    """Refuse the request as too long for the context window, as the real API does."""

    #: The prompt's size the error reports; None: ``limit`` plus the request's estimated size.
    tokens: int | None = None
    limit: int = 200_000
    #: Responses API only: report it inside a stream that already opened.
    mid_stream: Literal["failed", "error"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageSpec:
    """Scripted token counts; ``None`` means "estimate it"."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RawReply:
    """Recorded bytes sent as they are (``raw:`` / ``raw_text:`` in a scenario)."""

    body: bytes
    content_type: str = SSE_CONTENT_TYPE
    status: int = 200
    #: Where the bytes came from (the file, or ``raw_text``), for messages.
    source: str = "raw_text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedResponse:
    """What the model answers to one request, and how the transport misbehaves doing it."""

    text: str | None = None
    thinking: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason | None = None
    usage: UsageSpec = field(default_factory=UsageSpec)
    empty: bool = False
    http_error: HttpError | None = None
    context_overflow: ContextOverflow | None = None
    error_after: int | None = None
    error: StreamError | None = None
    drop_after: int | None = None
    stall_after: int | None = None
    #: Send nothing, not even the status line, until the client leaves or the server stops.
    hang: bool = False
    delay: float | None = None
    #: Each frame waits until the test lets it go (:meth:`FakeLLMServer.step`).
    gate: bool = False
    quirks: frozenset[str] = frozenset()
    raw: RawReply | None = None

    @property
    def resolved_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"

    @property
    def output_chars(self) -> int:
        text = len(self.text or "") + len(self.thinking or "")
        return text + sum(len(call.arguments()) for call in self.tool_calls)

    @classmethod
    def from_data(
        cls, data: object, where: str = "response", base_dir: str | Path | None = None
    ) -> ScriptedResponse:
        """Parse one response; a relative ``raw`` path is read from ``base_dir`` (default: cwd)."""
        return _parse_response(data, where, None if base_dir is None else Path(base_dir))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioOptions:
    ping: bool = True
    chunk_size: int = 8
    json_chunk: int = 7
    delay: float = 0.0
    store_responses: bool = True
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    responses: tuple[ScriptedResponse, ...] = ()
    options: ScenarioOptions = field(default_factory=ScenarioOptions)

    @classmethod
    def from_data(cls, data: object, base_dir: str | Path | None = None) -> Scenario:
        """Build a scenario from parsed JSON/YAML (a mapping, or a bare list of responses).

        Relative ``raw`` paths are read from ``base_dir`` (default: the current directory).
        """
        base = None if base_dir is None else Path(base_dir)
        if isinstance(data, list):
            data = {"responses": data}
        raw = _mapping(data, "scenario", {"options", "responses"})
        options = _parse_options(raw.get("options", {}))
        items = raw.get("responses", [])
        if not isinstance(items, list):
            raise ValueError(f"scenario.responses: expected a list, got {_kind(items)}")
        responses = tuple(
            _parse_response(item, f"responses[{i}]", base) for i, item in enumerate(items)
        )
        return cls(responses=responses, options=options)


def load_scenario(path: str | Path) -> Scenario:
    """Read a ``.json``, ``.yaml`` or ``.yml`` scenario file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read scenario ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {detail}"
        ) from exc
    try:
        return Scenario.from_data({} if data is None else data, base_dir=path.parent)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


# --- parsing helpers -----------------------------------------------------------------------------

_RAW_KEYS = {"raw", "raw_text", "content_type", "status"}
_RESPONSE_KEYS = {f.name for f in ScriptedResponse.__dataclass_fields__.values()} | _RAW_KEYS
#: Keys that describe a rendered reply, so they make no sense next to recorded bytes.
_RENDERED_KEYS = ("text", "thinking", "tool_calls", "stop_reason", "usage", "empty", "quirks")
_OPTION_KEYS = {f.name for f in ScenarioOptions.__dataclass_fields__.values()}


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(value: object, where: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {_kind(value)}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        keys = ", ".join(sorted(allowed))
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (expected one of: {keys})")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {_kind(value)}")
    return value


def _opt_str(value: object, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {_kind(value)}")
    return value


def _int(value: object, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {_kind(value)}")
    if value < minimum:
        raise ValueError(f"{where}: must be at least {minimum}, got {value}")
    return value


def _opt_int(value: object, where: str, *, minimum: int = 0) -> int | None:
    return None if value is None else _int(value, where, minimum=minimum)


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number of seconds, got {_kind(value)}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: must be a finite number >= 0, got {value}")
    return float(value)


def _parse_options(data: object) -> ScenarioOptions:
    raw = _mapping(data, "options", _OPTION_KEYS)
    defaults = ScenarioOptions()
    return ScenarioOptions(
        ping=_bool(raw.get("ping", defaults.ping), "options.ping"),
        chunk_size=_int(
            raw.get("chunk_size", defaults.chunk_size), "options.chunk_size", minimum=1
        ),
        json_chunk=_int(
            raw.get("json_chunk", defaults.json_chunk), "options.json_chunk", minimum=1
        ),
        delay=_seconds(raw.get("delay", defaults.delay), "options.delay"),
        store_responses=_bool(
            raw.get("store_responses", defaults.store_responses), "options.store_responses"
        ),
        model=_opt_str(raw.get("model"), "options.model"),
    )


def _parse_tool_call(data: object, where: str) -> ToolCall:
    raw = _mapping(data, where, {"name", "input", "raw_input", "id"})
    if "name" not in raw:
        raise ValueError(f"{where}: 'name' is required")
    if "input" in raw and "raw_input" in raw:
        raise ValueError(f"{where}: give either 'input' or 'raw_input', not both")
    tool_input = raw.get("input", {})
    if not isinstance(tool_input, Mapping):
        raise ValueError(f"{where}.input: expected a mapping, got {_kind(tool_input)}")
    return ToolCall(
        name=_str(raw["name"], f"{where}.name"),
        input=dict(tool_input),
        raw_input=_opt_str(raw.get("raw_input"), f"{where}.raw_input"),
        id=_opt_str(raw.get("id"), f"{where}.id"),
    )


def _parse_http_error(data: object, where: str) -> HttpError:
    raw = _mapping(data, where, {"status", "type", "message", "retry_after"})
    if "status" not in raw:
        raise ValueError(f"{where}: 'status' is required")
    status = _int(raw["status"], f"{where}.status", minimum=400)
    if status > 599:
        raise ValueError(f"{where}.status: must be an HTTP error status (400-599), got {status}")
    retry_after = raw.get("retry_after")
    return HttpError(
        status=status,
        type=_opt_str(raw.get("type"), f"{where}.type"),
        message=_opt_str(raw.get("message"), f"{where}.message"),
        retry_after=None if retry_after is None else _seconds(retry_after, f"{where}.retry_after"),
    )


def _parse_overflow(data: object, where: str) -> ContextOverflow | None:
    if data is None or data is False:
        return None
    if data is True:
        return ContextOverflow()
    raw = _mapping(data, where, {"tokens", "limit", "mid_stream"})
    mid_stream = raw.get("mid_stream")
    if mid_stream not in (None, "failed", "error"):
        raise ValueError(f"{where}.mid_stream: expected failed or error, got {mid_stream!r}")
    limit = _int(raw.get("limit", 200_000), f"{where}.limit", minimum=1)
    tokens = _opt_int(raw.get("tokens"), f"{where}.tokens", minimum=1)
    if tokens is not None and tokens <= limit:
        raise ValueError(f"{where}.tokens: must exceed the limit ({limit}), got {tokens}")
    return ContextOverflow(tokens=tokens, limit=limit, mid_stream=mid_stream)


def _parse_usage(data: object, where: str) -> UsageSpec:
    keys = {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }
    raw = _mapping(data, where, keys)
    return UsageSpec(
        input_tokens=_opt_int(raw.get("input_tokens"), f"{where}.input_tokens"),
        output_tokens=_opt_int(raw.get("output_tokens"), f"{where}.output_tokens"),
        cache_read_input_tokens=_int(
            raw.get("cache_read_input_tokens", 0), f"{where}.cache_read_input_tokens"
        ),
        cache_creation_input_tokens=_int(
            raw.get("cache_creation_input_tokens", 0), f"{where}.cache_creation_input_tokens"
        ),
    )


def _parse_quirks(data: object, where: str) -> frozenset[str]:
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {_kind(data)}")
    quirks = [_str(q, f"{where}[{i}]") for i, q in enumerate(data)]
    unknown = sorted(set(quirks) - QUIRKS)
    if unknown:
        raise ValueError(
            f"{where}: unknown quirk {unknown[0]!r} (expected one of: {', '.join(sorted(QUIRKS))})"
        )
    return frozenset(quirks)


def _parse_raw(raw: Mapping[str, Any], where: str, base_dir: Path | None) -> RawReply | None:
    if "raw" not in raw and "raw_text" not in raw:
        for key in ("content_type", "status"):
            if key in raw:
                raise ValueError(f"{where}: {key!r} only applies together with 'raw' or 'raw_text'")
        return None
    if "raw" in raw and "raw_text" in raw:
        raise ValueError(f"{where}: give either 'raw' or 'raw_text', not both")
    default_type = SSE_CONTENT_TYPE
    if "raw" in raw:
        path = Path(_str(raw["raw"], f"{where}.raw"))
        if not path.is_absolute():
            path = (base_dir if base_dir is not None else Path.cwd()) / path
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{where}.raw: cannot read {path} ({exc.strerror or exc})") from exc
        source = str(path)
        if path.suffix == ".json":
            default_type = JSON_CONTENT_TYPE
    else:
        body = _str(raw["raw_text"], f"{where}.raw_text").encode()
        source = "raw_text"
    status = _int(raw.get("status", 200), f"{where}.status", minimum=100)
    if status > 599:
        raise ValueError(f"{where}.status: must be an HTTP status (100-599), got {status}")
    content_type = _str(raw.get("content_type", default_type), f"{where}.content_type")
    return RawReply(body=body, content_type=content_type, status=status, source=source)


def _parse_response(data: object, where: str, base_dir: Path | None = None) -> ScriptedResponse:
    raw = _mapping(data, where, _RESPONSE_KEYS)
    raw_reply = _parse_raw(raw, where, base_dir)
    if raw_reply is not None:
        others = (*_RENDERED_KEYS, "http_error", "context_overflow")
        clash = next((key for key in others if key in raw), None)
        if clash is not None:
            source = "raw" if "raw" in raw else "raw_text"
            raise ValueError(f"{where}: {source!r} cannot be combined with {clash!r}")
    calls = raw.get("tool_calls", [])
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        raise ValueError(f"{where}.tool_calls: expected a list, got {_kind(calls)}")
    stop_reason = raw.get("stop_reason")
    if stop_reason is not None and stop_reason not in STOP_REASONS:
        raise ValueError(
            f"{where}.stop_reason: unknown stop reason {stop_reason!r} "
            f"(expected one of: {', '.join(sorted(STOP_REASONS))})"
        )
    error = raw.get("error")
    stream_error = None
    if error is not None:
        err = _mapping(error, f"{where}.error", {"type", "message"})
        stream_error = StreamError(
            type=_str(err.get("type", "overloaded_error"), f"{where}.error.type"),
            message=_str(err.get("message", "Overloaded"), f"{where}.error.message"),
        )
    response = ScriptedResponse(
        text=_opt_str(raw.get("text"), f"{where}.text"),
        thinking=_opt_str(raw.get("thinking"), f"{where}.thinking"),
        tool_calls=tuple(
            _parse_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)
        ),
        stop_reason=stop_reason,
        usage=_parse_usage(raw.get("usage", {}), f"{where}.usage"),
        empty=_bool(raw.get("empty", False), f"{where}.empty"),
        http_error=None
        if raw.get("http_error") is None
        else _parse_http_error(raw["http_error"], f"{where}.http_error"),
        context_overflow=_parse_overflow(raw.get("context_overflow"), f"{where}.context_overflow"),
        error_after=_opt_int(raw.get("error_after"), f"{where}.error_after"),
        error=stream_error,
        drop_after=_opt_int(raw.get("drop_after"), f"{where}.drop_after"),
        stall_after=_opt_int(raw.get("stall_after"), f"{where}.stall_after"),
        hang=_bool(raw.get("hang", False), f"{where}.hang"),
        delay=None if raw.get("delay") is None else _seconds(raw["delay"], f"{where}.delay"),
        gate=_bool(raw.get("gate", False), f"{where}.gate"),
        quirks=_parse_quirks(raw.get("quirks", []), f"{where}.quirks"),
        raw=raw_reply,
    )
    _check_consistent(response, where)
    return response


def _check_consistent(response: ScriptedResponse, where: str) -> None:
    faults = [
        name
        for name in ("error_after", "drop_after", "stall_after")
        if getattr(response, name) is not None
    ]
    if response.hang and (faults or response.http_error is not None or response.raw is not None):
        other = faults[0] if faults else "http_error" if response.http_error else "raw"
        raise ValueError(f"{where}: 'hang' cannot be combined with {other!r}")
    if len(faults) > 1:
        raise ValueError(f"{where}: choose one of {' / '.join(faults)}, not several")
    if response.http_error is not None and faults:
        raise ValueError(f"{where}: 'http_error' cannot be combined with {faults[0]!r}")
    if response.hang:
        faults.append("hang")
    if response.context_overflow is not None and (faults or response.http_error is not None):
        other = faults[0] if faults else "http_error"
        raise ValueError(f"{where}: 'context_overflow' cannot be combined with {other!r}")
    if response.error is not None and response.error_after is None:
        raise ValueError(f"{where}: 'error' only applies together with 'error_after'")
    has_content = response.text is not None or response.thinking is not None or response.tool_calls
    if response.empty and has_content:
        raise ValueError(f"{where}: 'empty' cannot be combined with text, thinking or tool_calls")
