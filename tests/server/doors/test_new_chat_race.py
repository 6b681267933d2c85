"""Two first messages of one new chat id at once (a double click, a client's retry, or two
tokens guessing the same id) on the AI SDK door: the session is created under the client's id
atomically with its owner, so exactly one request starts the chat; the other gets the answer
it would get a moment later — another token's chat is a 404, the same token's a 409 (busy, or
a history that is not the chat's) — never a 500, and no message ever runs in another token's
chat (nor its history reaches the model).

Against a real ``drover serve`` on SQLite and PostgreSQL, many tries of two requests released
together; and in process, a gate that holds one request between its read of the chat (none)
and what follows until the other request created the chat and its turn ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from drover import Agent
from drover.config.settings import Config
from drover.journal.protocol import Store
from drover.journal.records import SessionRecord
from drover.runtime.hub import Hub
from drover.server.app import create_app
from drover.server.config import ServerSettings, token_owner
from drover.server.service import Service
from drover.testing.scripted import Reply, ScriptedProvider
from drover.testing.server import FakeLLMServer

from ..support import BOUND, Served

TOKENS = ("alpha-token", "beta-token")
TRIES = 16


def _chat(chat_id: str, text: str) -> dict[str, Any]:
    """A first message of a chat as ``DefaultChatTransport`` posts it."""
    message = {"id": f"m-{text}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message"}


def _post_together(server: Served, chat_id: str, tokens: tuple[str, str]) -> list[tuple[int, str]]:
    """Post the chat's first message with each token at the same moment (the text names the
    token and the request); each answer's status and body."""
    ready = threading.Barrier(2)
    answers: list[tuple[int, str]] = [(0, "")] * 2

    def post(n: int) -> None:
        body = _chat(chat_id, f"{chat_id} from {tokens[n]} #{n}")
        with server.client(tokens[n]) as client:
            ready.wait(BOUND)
            reply = client.post("/api/chat", json=body)
            answers[n] = (reply.status_code, reply.text)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    return answers


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, ...]:
    """The ``--db`` flag of the server (none: its SQLite file)."""
    if request.param == "sqlite":
        return ()
    return ("--db", str(request.getfixturevalue("pg_url")))


def test_two_first_messages_at_once_start_one_chat(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], journal: tuple[str, ...]
) -> None:
    fake_llm.script(*({"text": "Hi."} for _ in range(4 * TRIES)))
    server = serve("--token", TOKENS[0], "--token", TOKENS[1], *journal)
    for n in range(TRIES):
        # Another token's, then the same token's (a double click).
        for tokens in (TOKENS, (TOKENS[0], TOKENS[0])):
            chat_id = f"chat-{n}-{'same' if tokens[0] == tokens[1] else 'other'}"
            answers = _post_together(server, chat_id, tokens)
            assert 500 not in [status for status, _ in answers], answers
            won = [i for i, (status, _) in enumerate(answers) if status == 200]
            assert len(won) == 1, answers
            loser = answers[1 - won[0]]
            if tokens[0] != tokens[1]:
                assert loser[0] == 404, answers
            else:
                assert loser[0] == 409, answers
                assert '"session_busy"' in loser[1] or '"history_mismatch"' in loser[1]
            with server.client(tokens[won[0]]) as client:
                snapshot = client.get(f"/v1/sessions/{chat_id}").json()
            users = [turn["user_message"]["content"][0]["text"] for turn in snapshot["turns"]]
            assert users == [f"{chat_id} from {tokens[won[0]]} #{won[0]}"]
    # Every request the model saw holds one chat's one message.
    for request in fake_llm.requests:
        texts = str(request.body["messages"])
        assert texts.count("-token #") == 1, texts
    assert len(fake_llm.requests) == 2 * TRIES


# -- a gate that widens the window -------------------------------------------------------------


class GatedReads:
    """Holds the first read of ``chat_id`` that finds no such chat until :attr:`opened` is
    set: the request that made it goes on as if the chat were still new."""

    def __init__(self, store: Store, chat_id: str) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()
        real = store.get_session
        held = False

        async def get_session(session_id: str) -> SessionRecord | None:
            nonlocal held
            found = await real(session_id)
            if found is None and session_id == chat_id and not held:
                held = True
                self.entered.set()
                await self.opened.wait()
            return found

        store.get_session = get_session  # type: ignore[method-assign]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def door(tmp_path: Path, store_url: str) -> AsyncIterator[tuple[Agent, ScriptedProvider]]:
    provider = ScriptedProvider([Reply(text="one answer"), Reply(text="another answer")])
    work = tmp_path / "work"
    work.mkdir()
    agent = Agent(provider, tools=[], store=store_url, workdir=work, config=Config())
    async with agent:
        yield agent, provider


@pytest.mark.parametrize("same_token", [False, True], ids=["other-token", "same-token"])
async def test_a_request_held_after_finding_no_chat(
    door: tuple[Agent, ScriptedProvider], same_token: bool
) -> None:
    agent, provider = door
    service = Service(agent=agent, hub=Hub())
    settings = ServerSettings.build(host="127.0.0.1", port=8000, tokens=list(TOKENS))
    app = create_app(service, settings)
    gate = GatedReads(agent.store, "chat-x")
    first, second = TOKENS[0], TOKENS[0] if same_token else TOKENS[1]
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client,
        asyncio.timeout(BOUND),
    ):
        held = asyncio.create_task(
            client.post(
                "/api/chat",
                json=_chat("chat-x", "the held one"),
                headers={"Authorization": f"Bearer {second}"},
            )
        )
        await gate.entered.wait()  # it found no chat-x
        reply = await client.post(
            "/api/chat",
            json=_chat("chat-x", "the first one"),
            headers={"Authorization": f"Bearer {first}"},
        )
        assert reply.status_code == 200, reply.text  # chat-x made, its answer streamed to the end
        gate.opened.set()
        late = await held
    record = await agent.store.get_session("chat-x")
    assert record is not None and record.owner == token_owner(first)
    if same_token:
        # As if it came a moment later: the chat holds a message it did not send before.
        assert late.status_code == 409, late.text
        assert late.json()["error"]["code"] == "history_mismatch"
    else:
        assert late.status_code == 404, late.text
    # The held message never ran: one turn, one request, which never saw it.
    assert [t.user_message.text for t in await agent.store.turns("chat-x") if t.user_message] == [
        "the first one"
    ]
    assert len(provider.requests) == 1
    assert "the held one" not in str(provider.requests[0].messages)
