"""drover as the model of an OpenAI Agents SDK agent: two turns, the second streamed.

Run with a server up (`drover serve --token TOKEN`): DROVER_URL=http://127.0.0.1:8000
DROVER_TOKEN=TOKEN python examples/responses_agents_sdk.py
"""

import asyncio
import os

from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # (the SDK would send its traces to OpenAI's platform)
client = AsyncOpenAI(base_url=os.environ["DROVER_URL"] + "/v1", api_key=os.environ["DROVER_TOKEN"])
# No instructions and no tools: drover's agent has its own, and runs them on the server.
agent = Agent(name="drover", model=OpenAIResponsesModel(model="drover", openai_client=client))


def show_calls(items: list) -> None:
    for item in items:
        if item.type == "tool_call_item":  # a call drover ran (an mcp_call item)
            print(f"drover ran {item.raw_item.name}")


async def main() -> None:
    first = await Runner.run(agent, "Which files are here?")
    show_calls(first.new_items)
    print(first.final_output)

    # The whole history goes back: drover finds its conversation by the answers' ids.
    again = [*first.to_input_list(), {"role": "user", "content": "What does it say?"}]
    second = Runner.run_streamed(agent, again)
    async for event in second.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            print(event.data.delta, end="", flush=True)
    print()
    show_calls(second.new_items)


asyncio.run(main())
