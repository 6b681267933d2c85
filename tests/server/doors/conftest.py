"""Fixtures of the door tests: the AI SDK's client processes (``chat_clients``), skipped loudly
where Node.js or the ``ai`` package is missing (failed under ``DROVER_REQUIRE_NODE=1``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .support import ChatClient, require_ai_sdk


@pytest.fixture
def chat_clients() -> Iterator[Callable[[], ChatClient]]:
    """``chat_clients()`` starts one more AI SDK client (each stopped at teardown)."""
    require_ai_sdk()
    started: list[ChatClient] = []

    def start() -> ChatClient:
        client = ChatClient()
        started.append(client)
        return client

    yield start
    for client in started:
        client.close()
