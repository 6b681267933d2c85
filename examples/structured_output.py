"""Typed tool dependencies and structured output: an agent plans a restock from an inventory.

The inventory is the run's ``deps``: the tool reads it as ``ctx.deps``, typed by
``ToolContext[Inventory]`` (mypy checks the tool's use of it). The answer must be a ``Restock``
(``output_type``): ``result.output`` is the validated model. Runs as it is with drover's
scripted model, no API key needed; name a model to use a real one::

    python examples/structured_output.py                               # the scripted model
    python examples/structured_output.py anthropic:claude-sonnet-4-5   # needs ANTHROPIC_API_KEY

The scripted model's first answer leaves out a field: drover sends it back once with
pydantic's message, and the corrected answer is the output. The turn is journaled in
restock-journal.db.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from pydantic import BaseModel, Field

from drover import Agent, ToolContext, tool
from drover.providers.base import Provider
from drover.testing.scripted import Reply, ScriptedProvider, call


@dataclass
class Inventory:
    """What the tools work on, handed to each run (never written to the journal)."""

    stock: dict[str, int]
    minimum: int = 5


class Order(BaseModel):
    sku: str
    quantity: int = Field(gt=0)


class Restock(BaseModel):
    """The orders to place, and why."""

    orders: list[Order]
    reason: str


@tool(read_only=True)
async def low_stock(ctx: ToolContext[Inventory]) -> str:
    """List the items whose stock is below the minimum, with their stock."""
    low = {sku: n for sku, n in ctx.deps.stock.items() if n < ctx.deps.minimum}
    return "\n".join(f"{sku}: {n} (minimum {ctx.deps.minimum})" for sku, n in low.items())


def scripted_model() -> ScriptedProvider:
    return ScriptedProvider(
        [
            Reply(calls=[call("low_stock")]),
            Reply(text='{"orders": [{"sku": "lamp-oil", "quantity": 8}]}'),  # no "reason"
            Reply(
                text='{"orders": [{"sku": "lamp-oil", "quantity": 8}], '
                '"reason": "lamp-oil is below the minimum"}'
            ),
        ]
    )


async def main(model: str | Provider) -> None:
    inventory = Inventory(stock={"lamp-oil": 2, "rope": 40})
    agent = Agent(
        model,
        tools=[low_stock],
        system_prompt="You plan restocks. Order what is below the minimum, up to 10 each.",
        store="restock-journal.db",
        output_type=Restock,
    )
    async with agent:
        result = await agent.run("What should we reorder?", deps=inventory)
    if result.output is None:
        print(f"{result.status} ({result.reason}): {result.error}")
        return
    for order in result.output.orders:
        print(f"order {order.quantity} x {order.sku}")
    print(f"because {result.output.reason}")
    if isinstance(model, ScriptedProvider):
        print(f"{len(model.requests)} model calls")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else scripted_model()))
