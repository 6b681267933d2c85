"""The provider seam: one :class:`~drover.core.model_stream.ModelRequest` in, one stream of neutral
:data:`~drover.core.model_stream.StreamEvent` values out.

A provider adapts one wire protocol (Anthropic Messages, OpenAI Chat Completions, OpenAI
Responses) using the official SDK. It converts the neutral history of :mod:`drover.core.messages`
into its native request and the SDK's raw stream into neutral events (see
:mod:`drover.core.model_stream` for the stream's contract). SDK types never leave the provider
module.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol

from drover.core.model_stream import ModelRequest, StreamEvent


class Provider(Protocol):
    """One model behind one wire protocol."""

    @property
    def name(self) -> str:
        """The protocol name used in ``PROVIDER:MODEL`` (``anthropic``, ``openai``…)."""
        ...

    @property
    def model(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one model response; see the module docstring for the contract."""
        ...

    async def aclose(self) -> None:
        """Release the HTTP client."""
        ...


class EventMapper(Protocol):
    """Maps one response's SDK events onto neutral stream events (no I/O)."""

    def feed(self, event: Any, /) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]:
        """The SDK's stream ran out: end the response, or raise if it was cut short."""
        ...
