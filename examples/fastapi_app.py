"""A FastAPI app serving a drover agent::

    uvicorn --app-dir examples fastapi_app:app

``POST /chat {"prompt", "session_id"?}`` runs a turn and returns its result;
``POST /chat/stream`` streams the turn's events, one JSON object per line. Sessions live in the
journal (``DROVER_DB``, else drover's default), so they outlast the process, and a turn cut off
— the client went away, the server stopped — is resumed by the next message on its session.
``DROVER_MODEL`` picks the model (e.g. ``anthropic:claude-sonnet-4-5``); without it drover's
scripted model answers, so the app runs with no API key.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from drover import Agent, event_to_dict
from drover.testing.scripted import Reply, ScriptedProvider


class Chat(BaseModel):
    prompt: str
    session_id: str | None = None


class ChatResult(BaseModel):
    session_id: str
    status: str
    text: str
    pending_messages: int


def create_app(agent: Agent) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with agent:  # opened on the first request anyway; closed at shutdown
            yield

    app = FastAPI(title="drover agent", lifespan=lifespan)
    app.state.agent = agent

    @app.post("/chat")
    async def chat(body: Chat) -> ChatResult:
        result = await agent.run(body.prompt, session=body.session_id)
        return ChatResult(
            session_id=result.session_id,
            status=result.status,
            text=result.text,
            pending_messages=len(result.pending),
        )

    @app.post("/chat/stream")
    async def chat_stream(body: Chat) -> StreamingResponse:
        async def lines() -> AsyncIterator[str]:
            # A client that goes away cancels this generator: leaving the block interrupts
            # the turn, and its work stays pending in the session.
            async with agent.run_stream(body.prompt, session=body.session_id) as stream:
                async for event in stream:
                    yield json.dumps(event_to_dict(event)) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return app


def default_agent() -> Agent:
    scripted = ScriptedProvider(
        [Reply(text=f"Hello from the scripted model ({n}).") for n in range(100)]
    )
    return Agent(
        os.environ.get("DROVER_MODEL") or scripted,
        tools=[],
        system_prompt="You are a helpful assistant.",
        permission_mode="deny",  # nobody is there to ask
    )


app = create_app(default_agent())
