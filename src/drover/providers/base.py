"""The provider seam: one :class:`~drover.model_stream.ModelRequest` in, one stream of neutral
:data:`~drover.model_stream.StreamEvent` values out.

A provider adapts one wire protocol (Anthropic Messages, OpenAI Chat Completions, OpenAI
Responses) using the official SDK. It converts the neutral history of :mod:`drover.messages`
into its native request and the SDK's raw stream into neutral events (see
:mod:`drover.model_stream` for the stream's contract). SDK types never leave the provider module.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from drover.model_stream import ModelRequest, StreamEvent


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
