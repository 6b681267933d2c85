"""No SDK generator outlives its stream: after every way a stream can end, on every protocol,
nothing of the SDK's chain of async generators (stream → SSE decoder → httpx body iterators)
is left suspended, and a garbage collection — in this thread or another one, as the fake
server's thread may run it — finalises nothing and raises nothing.

Before the providers closed those chains themselves, an ``error`` event left ten generators
suspended in a reference cycle, and a collection in another thread failed an unrelated test
with "async generator already executing"; the suite had to run with the collector off.

Every test runs on the SDKs' httpx client and on their aiohttp client (whose response stream is
an async generator of the SDK's vendored transport, over aiohttp's reader).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from drover.core.model_stream import BlockDelta
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer

from .conftest import ON_BOTH_CLIENTS, drain, make_provider, request

LONG = "The quick brown fox jumps over the lazy dog. " * 3
SDK_PACKAGES = ("anthropic", "openai", "httpx2", "httpx", "httpcore", "httpcore2", "aiohttp")

#: Failure kind → what the fake server does (each ends the stream without success).
FAILURES: dict[str, dict[str, Any]] = {
    "error event mid-stream": {"text": LONG, "error_after": 6},
    "error event before the first event": {"text": LONG, "error_after": 0},
    "failed response mid-stream": {"text": LONG, "error_after": 6, "error": {"type": "failed"}},
    "dropped connection": {"text": LONG, "drop_after": 6},
    "stall mid-stream": {"text": LONG, "stall_after": 6},
    "no status line": {"hang": True},
    "context overflow": {"context_overflow": {"mid_stream": "failed"}},
}


def _is_sdk(generator: types.AsyncGeneratorType[Any, Any]) -> bool:
    parts = generator.ag_code.co_filename.replace("\\", "/").split("/")
    return any(package in parts for package in SDK_PACKAGES)


def suspended_sdk_generators() -> list[types.AsyncGeneratorType[Any, Any]]:
    # ``type(obj) is`` rather than isinstance: the type cannot be subclassed, so the two agree,
    # but isinstance reads ``__class__`` of the millions of objects the SDKs hold, and their
    # lazy proxies resolve (import) on that read — seconds per scan.
    return [
        obj
        for obj in gc.get_objects()
        if type(obj) is types.AsyncGeneratorType and obj.ag_frame is not None and _is_sdk(obj)
    ]


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []

    def hook(info: Any) -> None:
        seen.append(f"{info.exc_type.__name__}: {info.exc_value} ({info.object!r})")

    monkeypatch.setattr(sys, "unraisablehook", hook)
    return seen


pytestmark = ON_BOTH_CLIENTS


@pytest.fixture
async def leaky(
    protocol: str, fake_llm: FakeLLMServer, http_client: str
) -> AsyncIterator[Provider]:
    provider = make_provider(
        protocol, fake_llm, max_retries=0, stall_timeout=0.2, http_client=http_client
    )
    yield provider
    await provider.aclose()


async def assert_nothing_left(before: list[object], unraisable: list[str]) -> None:
    known = {id(obj) for obj in before}
    left = [g.ag_code.co_qualname for g in suspended_sdk_generators() if id(g) not in known]
    assert left == [], f"suspended SDK generators: {left}"
    collector = threading.Thread(target=gc.collect)  # as the fake server's thread might
    collector.start()
    collector.join()
    gc.collect()
    for _ in range(3):  # let any finaliser scheduled on this loop run
        await asyncio.sleep(0)
    assert unraisable == []


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_a_failed_stream_leaves_no_sdk_generator(
    leaky: Provider, fake_llm: FakeLLMServer, unraisable: list[str], failure: str
) -> None:
    before: list[object] = list(suspended_sdk_generators())
    fake_llm.script(FAILURES[failure])
    outcome = await drain(leaky, request())
    assert outcome.error is not None
    await assert_nothing_left(before, unraisable)


async def test_a_cancelled_stream_leaves_no_sdk_generator(
    leaky: Provider, fake_llm: FakeLLMServer, unraisable: list[str], http_client: str
) -> None:
    before: list[object] = list(suspended_sdk_generators())
    fake_llm.script({"text": LONG, "stall_after": 6, "delay": 0})
    first_delta = asyncio.Event()
    # Only the cancel ends it.
    provider = make_provider(leaky.name, fake_llm, stall_timeout=600, http_client=http_client)
    try:

        async def consume() -> None:
            async with contextlib.aclosing(provider.stream(request())) as stream:
                async for event in stream:
                    if isinstance(event, BlockDelta):
                        first_delta.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first_delta.wait(), timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)
    finally:
        await provider.aclose()
    await assert_nothing_left(before, unraisable)


async def test_a_stream_the_consumer_leaves_early_leaves_no_sdk_generator(
    leaky: Provider, fake_llm: FakeLLMServer, unraisable: list[str]
) -> None:
    before: list[object] = list(suspended_sdk_generators())
    fake_llm.script({"text": LONG})
    async with contextlib.aclosing(leaky.stream(request())) as stream:
        async for event in stream:
            if isinstance(event, BlockDelta):
                break
    await assert_nothing_left(before, unraisable)
