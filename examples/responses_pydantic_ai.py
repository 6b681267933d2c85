"""drover as the model of a pydantic-ai agent: two turns, the second streamed.

Run with a server up (`drover serve --token TOKEN`): DROVER_URL=http://127.0.0.1:8000
DROVER_TOKEN=TOKEN python examples/responses_pydantic_ai.py
"""

import asyncio
import os

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, NativeToolCallPart
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider

provider = OpenAIProvider(
    base_url=os.environ["DROVER_URL"] + "/v1", api_key=os.environ["DROVER_TOKEN"]
)
# "auto": a message_history goes on from drover's latest response (previous_response_id)
# instead of being sent again, as drover keeps the conversation.
settings = OpenAIResponsesModelSettings(openai_previous_response_id="auto")
agent = Agent(OpenAIResponsesModel("drover", provider=provider), model_settings=settings)


def calls(messages: list) -> list[str]:
    """The tools drover ran (mcp_call items, to pydantic-ai a provider's native tool)."""
    return [
        part.args_as_dict()["tool_name"]
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, NativeToolCallPart)
    ]


async def main() -> None:
    first = await agent.run("Which files are here?")
    for name in calls(first.new_messages()):
        print(f"drover ran {name}")
    print(first.output)

    history = first.all_messages()
    async with agent.run_stream("What does it say?", message_history=history) as second:
        async for delta in second.stream_text(delta=True):
            print(delta, end="", flush=True)
        print()
        for name in calls(second.new_messages()):
            print(f"drover ran {name}")


asyncio.run(main())
