"""What the fake server streams for a scripted response, frame by frame, read back as content.

Tests that cut a stream after N frames (``error_after``, ``stall_after``, ``drop_after``) take
N from here instead of counting frames by hand: :func:`render` asks the wire module the fake
server itself uses for the frames of a response, and :func:`progress` reads how much text and
tool-argument text the client holds after each frame. A change of chunk size, ping placement or
framing then moves the cut with it instead of silently making a case test something else, and
:func:`render` given a request body the server recorded re-derives the frames that request
really got.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from drover.testing.scenario import ScenarioOptions, ScriptedResponse
from drover.testing.wire import (
    IdSource,
    ProtocolName,
    RenderContext,
    RenderedStream,
    anthropic,
    openai_chat,
    openai_responses,
)
from support.sse import split_lines

#: Loop-test protocol names → the fake server's wire modules.
WIRE: dict[str, ProtocolName] = {
    "anthropic": "anthropic",
    "openai": "openai-chat",
    "openai-responses": "openai-responses",
}
_RENDER: dict[ProtocolName, Callable[[ScriptedResponse, RenderContext], RenderedStream]] = {
    "anthropic": anthropic.render_stream,
    "openai-chat": openai_chat.render_stream,
    "openai-responses": openai_responses.render_stream,
}
#: A streaming request body as each provider sends it, as far as it shapes the frames.
_PROBE: dict[ProtocolName, dict[str, Any]] = {
    "anthropic": {"model": "m", "stream": True},
    "openai-chat": {"model": "m", "stream": True, "stream_options": {"include_usage": True}},
    "openai-responses": {"model": "m", "stream": True},
}


def render(
    protocol: str,
    response: Mapping[str, Any],
    *,
    body: Mapping[str, Any] | None = None,
    options: ScenarioOptions | None = None,
) -> tuple[bytes, ...]:
    """The frames the fake server streams for ``response`` (scenario format, faults ignored)
    to a request with ``body`` (default: a minimal streaming request of that protocol)."""
    wire = WIRE[protocol]
    scripted = ScriptedResponse.from_data(
        {k: v for k, v in response.items() if k not in ("error_after", "stall_after", "drop_after")}
    )
    request = dict(body) if body is not None else _PROBE[wire]
    ctx = RenderContext(
        body=request,
        raw_size=len(json.dumps(request)),
        options=options or ScenarioOptions(),
        ids=IdSource(),
        serial=1,
    )
    return _RENDER[wire](scripted, ctx).frames


@dataclass(frozen=True, slots=True)
class Progress:
    """What the client has after one frame: the answer's text and tool-argument text so far."""

    text: str
    arguments: str


def _payload(frame: bytes) -> dict[str, Any] | None:
    for line in split_lines(frame.decode()):
        if line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return None
            value = json.loads(data)
            return value if isinstance(value, dict) else None
    return None


def _pieces(protocol: str, payload: Mapping[str, Any]) -> tuple[str, str]:
    """(text, argument text) a single event adds."""
    if protocol == "anthropic":
        delta = payload.get("delta") if payload.get("type") == "content_block_delta" else None
        if not isinstance(delta, dict):
            return "", ""
        return str(delta.get("text") or ""), str(delta.get("partial_json") or "")
    if protocol == "openai":
        text, args = "", ""
        for choice in payload.get("choices") or []:
            delta = choice.get("delta") or {}
            text += str(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                args += str((call.get("function") or {}).get("arguments") or "")
        return text, args
    kind = payload.get("type")
    if kind == "response.output_text.delta":
        return str(payload["delta"]), ""
    if kind == "response.function_call_arguments.delta":
        return "", str(payload["delta"])
    return "", ""


def progress(protocol: str, frames: tuple[bytes, ...]) -> list[Progress]:
    """``progress(...)[n]``: what the client holds once the first ``n`` frames arrived
    (index 0: nothing yet), so a cut ``error_after: n`` leaves it with ``[n]``."""
    text, args = "", ""
    out = [Progress("", "")]
    for frame in frames:
        payload = _payload(frame)
        if payload is not None:
            more_text, more_args = _pieces(protocol, payload)
            text, args = text + more_text, args + more_args
        out.append(Progress(text, args))
    return out


def first_cut(
    protocol: str, frames: tuple[bytes, ...], reached: Callable[[Progress], bool]
) -> tuple[int, Progress]:
    """The fewest frames after which ``reached`` holds, and what the client then holds."""
    for count, state in enumerate(progress(protocol, frames)):
        if reached(state):
            return count, state
    raise AssertionError(f"{protocol}: no frame boundary satisfies the cut")
