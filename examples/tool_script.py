"""A tool-using script: an agent keeps a to-do list (todo.json) with two typed tools.

Runs as it is with drover's scripted model, no API key needed; name a model to use a real one::

    python examples/tool_script.py                               # the scripted model
    python examples/tool_script.py anthropic:claude-sonnet-4-5   # needs ANTHROPIC_API_KEY

The scripted model first sends an item with an empty title: pydantic refuses it, the model sees
the message as a tool error and sends a valid call. The turn is journaled in todo-journal.db.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Literal

from pydantic import BaseModel, Field

from drover import Agent, ToolContext, ToolDone, tool
from drover.testing.scripted import Reply, ScriptedProvider, call


class Item(BaseModel):
    title: str = Field(min_length=1, description="What to do.")
    priority: Literal["low", "high"] = "low"


@tool
async def add_items(ctx: ToolContext, items: list[Item]) -> str:
    """Add items to the to-do list.

    Args:
        items: The items to add, in order.
    """
    path = ctx.workdir / "todo.json"
    todo = json.loads(path.read_text()) if path.exists() else []
    todo += [item.model_dump() for item in items]
    path.write_text(json.dumps(todo, indent=1))
    return f"the list has {len(todo)} items"


@tool(read_only=True)
async def show_items(ctx: ToolContext, priority: Literal["low", "high"] | None = None) -> str:
    """Show the to-do list.

    Args:
        priority: Only the items of this priority.
    """
    path = ctx.workdir / "todo.json"
    todo = json.loads(path.read_text()) if path.exists() else []
    return "\n".join(i["title"] for i in todo if priority in (None, i["priority"])) or "(empty)"


SCRIPT = [
    Reply(text="Adding.", calls=[call("add_items", items=[{"title": ""}])]),
    Reply(
        text="Fixing the title.",
        calls=[call("add_items", items=[{"title": "buy lamp oil", "priority": "high"}])],
    ),
    Reply(calls=[call("show_items", priority="high")]),
    Reply(text="Added 'buy lamp oil' as high priority."),
]


async def main(model: str | None) -> int:
    agent = Agent(
        model or ScriptedProvider(SCRIPT),
        tools=[add_items, show_items],
        system_prompt="You keep the user's to-do list with your tools.",
        store="todo-journal.db",
        permission_mode="allow",  # a script has nobody to ask
    )
    async with agent, agent.run_stream("Add 'buy lamp oil', high priority.") as stream:
        async for event in stream:
            if isinstance(event, ToolDone):
                print(f"[{event.name}] {'error: ' if event.is_error else ''}{event.output_summary}")
        result = stream.result
        print(f"{result.status}: {result.text or result.error}")
        return 0 if result.completed else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None)))
