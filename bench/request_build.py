"""What building one model request costs, by history size (issue #12, item 3).

For a history of n neutral messages (n/2 tool steps: an assistant message with ~200 characters
of text and one tool call, then the user message with its ~2 KiB result), each provider's real
``stream()`` is timed from the call to the moment its HTTP request — headers and the whole JSON
body — reaches the transport. That is everything drover and the official SDK do before a byte
goes out: drover's conversion of the history (``to_chat_messages``, ``plan_input``,
``to_anthropic_messages``), then whatever the SDK does with the request (its ``maybe_transform``
walk of the parameters against their TypedDicts, where it still runs), and the JSON encoding.

The transport is an in-process ``httpx2.MockTransport`` that notes the time, checks the body
holds every message, and answers a one-word stream in the protocol's own wire format, so no
server, socket or parsing of a large reply is timed. Beside the whole request, the table shows
drover's conversion alone.

Columns: per size, the median of ``--runs`` requests in milliseconds — the process's CPU time
(steady on a busy machine) and wall time — then µs per message at the
largest size and the ratio of the largest size's time to the smallest's scaled by size (1.0 is
linear; quadratic work makes it grow with the size range).

    .venv/bin/python bench/request_build.py            # --sizes 250,500,1000,2000,4000 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
from common import forbid_network, median, print_environment, table, words

from drover.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.core.model_stream import ModelRequest, ToolSpec

PROTOCOLS = ("openai", "openai-responses", "anthropic")
TOOL = ToolSpec(
    name="lookup",
    description="Look a number up.",
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
)

_CHAT_REPLY = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _anthropic_reply() -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    return b"".join(
        [
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "ok"},
                },
            ),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 1},
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    )


def _responses_reply() -> bytes:
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "ok", "annotations": []}],
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": [item],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }
    events = [
        ("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}}),
        ("response.output_text.delta", {"output_index": 0, "content_index": 0, "delta": "ok"}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": response}),
    ]
    return b"".join(
        _sse(name, {"type": name, "sequence_number": n, **data})
        for n, (name, data) in enumerate(events)
    )


REPLIES = {
    "openai": _CHAT_REPLY,
    "openai-responses": _responses_reply(),
    "anthropic": _anthropic_reply(),
}


def history(n: int) -> list[Message]:
    """``n`` messages: a task, then assistant/user pairs of one tool step each."""
    out = [user_message("task")]
    for step in range((n - 1) // 2):
        call_id = f"call_{step}"
        use = ToolUseBlock(id=call_id, name="lookup", input={"n": step})
        out.append(Message(role="assistant", content=(TextBlock(text=words(200, step)), use)))
        result = ToolResultBlock(tool_use_id=call_id, content=words(2048, step + 1))
        out.append(Message(role="user", content=(result,)))
    return out


class Probe:
    """The transport: notes when a request arrived and answers with a canned stream."""

    def __init__(self, protocol: str) -> None:
        self.reply = REPLIES[protocol]
        self.arrived = 0.0
        self.arrived_cpu = 0.0
        self.body_bytes = 0
        self.expected_calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.arrived = time.perf_counter()
        self.arrived_cpu = time.process_time()
        body = request.content
        self.body_bytes = len(body)
        # The request must really carry the history (not a cache hit or an empty body).
        calls = body.count(b'"call_')
        assert calls >= self.expected_calls, (calls, self.expected_calls)
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=self.reply
        )


def provider_for(protocol: str, probe: Probe) -> Any:
    from drover.providers.anthropic import AnthropicProvider
    from drover.providers.openai_chat import OpenAIChatProvider
    from drover.providers.openai_responses import OpenAIResponsesProvider

    kinds = {
        "openai": OpenAIChatProvider,
        "openai-responses": OpenAIResponsesProvider,
        "anthropic": AnthropicProvider,
    }
    provider = kinds[protocol]("bench-model", api_key="k", base_url="http://bench.test/v1")
    sdk = type(provider._client)
    provider._client = sdk(
        api_key="k",
        base_url="http://bench.test/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(probe)),
    )
    return provider


async def time_request(provider: Any, probe: Probe, request: ModelRequest) -> tuple[float, float]:
    """Wall and CPU seconds from ``stream()`` to the request reaching the transport."""
    start, start_cpu = time.perf_counter(), time.process_time()
    async for _event in provider.stream(request):
        pass
    return probe.arrived - start, probe.arrived_cpu - start_cpu


def converter(protocol: str) -> Callable[[list[Message]], Any]:
    from drover.providers.convert_anthropic import to_anthropic_messages
    from drover.providers.convert_openai_chat import to_chat_messages
    from drover.providers.convert_openai_responses import plan_input

    if protocol == "openai":
        return lambda m: to_chat_messages("system", m)
    if protocol == "openai-responses":
        return lambda m: plan_input(m, stored=True)
    return to_anthropic_messages


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250,500,1000,2000,4000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    forbid_network()
    print_environment("bench/request_build.py — one request's build time by history size")
    histories = {n: history(n) for n in sizes}
    rows: list[list[str]] = []
    body_sizes: dict[str, int] = {}
    for protocol in PROTOCOLS:
        probe = Probe(protocol)
        provider = provider_for(protocol, probe)
        convert = converter(protocol)
        walls: list[float] = []
        cpus: list[float] = []
        alone: list[float] = []
        for n in sizes:
            messages = histories[n]
            request = ModelRequest(system="system", messages=messages, tools=(TOOL,))
            probe.expected_calls = (n - 1) // 2 * 2
            await time_request(provider, probe, request)  # warm-up
            timings = [await time_request(provider, probe, request) for _ in range(args.runs)]
            walls.append(median([wall for wall, _cpu in timings]))
            cpus.append(median([cpu for _wall, cpu in timings]))
            runs = []
            for _ in range(args.runs):
                t = time.process_time()
                convert(messages)
                runs.append(time.process_time() - t)
            alone.append(median(runs))
            body_sizes[protocol] = probe.body_bytes
        await provider.aclose()
        for label, times in (
            (f"{protocol}: request, CPU", cpus),
            (f"{protocol}: request, wall", walls),
            (f"{protocol}: drover convert, CPU", alone),
        ):
            per_message = times[-1] / sizes[-1] * 1e6
            growth = (times[-1] / times[0]) / (sizes[-1] / sizes[0])
            cells = [f"{t * 1e3:.1f}" for t in times]
            rows.append([label, *cells, f"{per_message:.0f}", f"{growth:.2f}"])
    headers = ["ms per request", *(f"n={n}" for n in sizes), "µs/msg", "growth"]
    print(table(headers, rows))
    print()
    sizes_text = ", ".join(f"{p} {b / 1e6:.1f} MB" for p, b in body_sizes.items())
    print(f"request body at n={sizes[-1]}: {sizes_text}")
    print("growth: (t[largest] / t[smallest]) / (largest / smallest); 1.0 is linear.")


if __name__ == "__main__":
    asyncio.run(main())
