"""Reloading a real ``drover serve`` mid-answer, at moments the test chooses: the fake model is
gated (``gate: true``) and the test lets its frames go a few at a time. At each moment a
client loads the session the documented way (``GET /v1/sessions/{id}``, then ``…/events?after=
<last_event_id>``), another holds a number the server cannot continue (a ``reset``), the AI SDK
door's resume (``GET /api/chat/{id}/stream``) replays the answer, and an OpenAI SDK client that
was reading the Responses door's stream resumes it with ``starting_after``; each follows to the
end. Every one ends with the answer — the words the model said, the secret among them
redacted where the journal wrote it — each delta once, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import openai
import pytest
from store.conftest import pg_cluster, pg_database, pg_url
from support.sse import sse_lines

from drover.journal.redact import Redactor
from drover.testing.server import FakeLLMServer

from .support import BOUND, TERMINAL, Served, Sse, model_texts, new_session, parse_sse

#: The store tests' fixtures (a throwaway PostgreSQL, a schema per test), found by pytest here.
FIXTURES = (pg_cluster, pg_database, pg_url)
SECRET = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2" * 2
#: Words cut anywhere by the fake model's 8-character chunks, runs the journal's redactor holds
#: back while they grow, and a secret it redacts.
ANSWER = (
    "Reloading mid answer: seven eight nine ten, a sentence sentence sentence, a run like "
    f"abcdefghijklmnopqrstuvwxyz0123 and the key {SECRET} — then the rest of the words, "
    "eleven twelve thirteen, until the end."
)
#: How many of the model's frames go out between two moments (in turn).
STRIDES = (3, 1, 5, 2, 7, 4)
#: A number no log here reaches: a client holding it is sent a ``reset``.
AHEAD = 10**9


class Thread(threading.Thread):
    """``fn(ready)`` in a thread of its own; made once ``fn`` has set ``ready`` (the server
    holds the reader's place: what it is served from then on does not depend on when the
    test goes on); :meth:`result` is what ``fn`` returned."""

    def __init__(self, fn: Callable[[threading.Event], Any]) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self._ready = threading.Event()
        self._out: list[Any] = []
        self._error: BaseException | None = None
        self.start()
        assert self._ready.wait(BOUND), "a reader never got its place"

    def run(self) -> None:
        try:
            self._out.append(self._fn(self._ready))
        except BaseException as exc:  # (raised again in the test's thread)
            self._error = exc
        finally:
            self._ready.set()

    def result(self) -> Any:
        self.join(4 * BOUND)
        assert not self.is_alive(), "a reader never saw the answer end"
        if self._error is not None:
            raise self._error
        return self._out[0]


class Live:
    """A client following the session's events from the start, as they come."""

    def __init__(self, server: Served, sid: str) -> None:
        self.events: list[Sse] = []
        self._seen = threading.Condition()
        self._thread = Thread(lambda ready: self._follow(server, sid, ready))

    def _follow(self, server: Served, sid: str, ready: threading.Event) -> None:
        for ev in _follow(server, sid, None, ready):
            with self._seen:
                self.events.append(ev)
                self._seen.notify_all()

    def text(self) -> str:
        return "".join(e.data["text"] for e in self.events if e.event == "text_delta")

    def wait_for_text(self, fed: str) -> None:
        with self._seen:
            assert self._seen.wait_for(lambda: self.text() == fed, BOUND), (self.text(), fed)

    def result(self) -> list[Sse]:
        self._thread.result()
        return self.events


class ResponsesReader:
    """An OpenAI SDK client reading the Responses door's stream of the answer as it comes."""

    def __init__(self, client: openai.OpenAI, response_id: str) -> None:
        self.events: list[Any] = []
        self._seen = threading.Condition()
        self._thread = Thread(lambda ready: self._read(client, response_id, ready))

    def _read(self, client: openai.OpenAI, response_id: str, ready: threading.Event) -> None:
        with client.responses.retrieve(response_id, stream=True) as stream:
            ready.set()
            for event in stream:
                with self._seen:
                    self.events.append(event)
                    self._seen.notify_all()

    def held(self, fed: str) -> list[Any]:
        """What it holds once it has read the text the model said so far."""
        with self._seen:
            assert self._seen.wait_for(lambda: _output_text(self.events) == fed, BOUND)
            return list(self.events)


def _output_text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def _partial_text(snapshot: dict[str, Any]) -> str:
    return "".join(
        block["text"]
        for turn in snapshot["turns"]
        for m in turn["messages"]
        if m["partial"] and turn["status"] == "running"
        for block in m["message"]["content"]
        if block["type"] == "text"
    )


def _sse_text(events: list[Sse]) -> tuple[str, dict[str, Any] | None]:
    """The text a client rebuilds from events it was served: a ``reset``'s snapshot, then the
    deltas up to the step's message; and that snapshot. Numbers increase, none twice."""
    ids = [e.id for e in events]
    assert ids == sorted(set(ids)), ids  # type: ignore[type-var]
    reset = events[0].data if events and events[0].event == "reset" else None
    text = "" if reset is None else _partial_text(reset)
    for e in events:
        if e.event == "assistant_message":
            break
        if e.event == "text_delta":
            text += e.data["text"]
    return text, reset


def _follow(server: Served, sid: str, after: int | None, ready: threading.Event) -> Iterator[Sse]:
    """The session's events after ``after`` (None: from the start) to the turn's end, or to a
    ``reset`` showing no turn running; ``ready`` once the server holds the reader's place
    (subscribed, or for a reset, once it is sent)."""
    query = "" if after is None else f"?after={after}"
    with (
        server.client() as client,
        client.stream("GET", f"/v1/sessions/{sid}/events{query}") as response,
    ):
        assert response.status_code == 200, response.read()
        for ev in parse_sse(sse_lines(response)):
            if ev.event == "status":
                if after != AHEAD:
                    ready.set()
                continue
            ready.set()
            yield ev
            if ev.event in TERMINAL or (ev.event == "reset" and not ev.data["running_turn_id"]):
                return


def _ui_text(server: Served, sid: str, ready: threading.Event) -> str:
    """The text of the AI SDK door's resume, as the transport reads it: its ``text-delta``
    chunks up to the step's end (a ``reset-step`` sends the journal's message again)."""
    texts: list[str] = []
    ended = False
    with (
        server.client() as client,
        client.stream("GET", f"/api/chat/{sid}/stream") as response,
    ):
        assert response.status_code == 200, response.read()
        ready.set()
        for line in sse_lines(response):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            ended = ended or chunk["type"] in ("reset-step", "finish-step", "finish")
            if chunk["type"] == "text-delta" and not ended:
                texts.append(chunk["delta"])
    return "".join(texts)


@pytest.fixture(params=["sqlite", "postgres"])
def db_flags(request: pytest.FixtureRequest) -> tuple[str, ...]:
    if request.param == "sqlite":
        return ()
    return ("--db", str(request.getfixturevalue("pg_url")))


def test_a_reload_at_any_moment_of_an_answer_holds_it_once(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
    db_flags: tuple[str, ...],
) -> None:
    fake_llm.script({"text": ANSWER, "gate": True})
    server = serve(*db_flags)
    client = sdk(server)
    with server.client() as c:
        sid = new_session(c)
    live = Live(server, sid)
    with server.client() as c:
        reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
        assert reply.status_code == 202, reply.text
        turn_id = reply.json()["turn_id"]
    responses = ResponsesReader(client, f"resp_{turn_id}")
    # (what each reader held at its moment, and the thread reading the rest to the end)
    readers: list[tuple[str, str, str, Thread]] = []
    fed, n = "", 0
    for piece in model_texts(fake_llm):
        fed += piece
        n += 1
        if not piece or n % STRIDES[len(readers) % len(STRIDES)]:
            continue
        live.wait_for_text(fed)  # the server has published every delta the model sent
        with server.client() as c:
            snapshot = c.get(f"/v1/sessions/{sid}").json()
        # A Responses client that lost its stream a while ago (halfway to here) resumes now.
        held = responses.held(fed)
        held = held[: max(1, len(held) // 2)]
        readers += [
            (fed, "snapshot", _partial_text(snapshot), _rest(server, sid, snapshot)),
            (fed, "reset", "", Thread(lambda ready: _sse_text(_events(server, sid, AHEAD, ready)))),
            (fed, "ai sdk resume", "", Thread(partial(_ui_text, server, sid))),
            (
                fed,
                "starting_after",
                _output_text(held),
                Thread(partial(_resumed, client, turn_id, held[-1].sequence_number)),
            ),
        ]
    assert fed == ANSWER
    events = live.result()
    with server.client() as c:
        final = c.get(f"/v1/sessions/{sid}").json()
    assert [t["status"] for t in final["turns"]] == ["completed"]
    (message,) = [m["message"] for m in final["turns"][0]["messages"]]
    answer = message["content"][0]["text"]
    redact = Redactor().redact
    assert answer == redact(ANSWER) != ANSWER
    assert _sse_text(events)[0] == ANSWER  # live: the model's text as it came
    assert len(readers) >= 4 * 5
    for fed, how, held_text, reader in readers:
        got = reader.result()
        if how == "reset":
            got, snapshot = got
            assert snapshot is not None, "a client holding a number never logged is reset"
        # Text served live is the model's, text read from the log redacted: redacted, the same.
        assert redact(held_text + got) == answer, f"{how} at {fed!r}"


def _events(server: Served, sid: str, after: int, ready: threading.Event) -> list[Sse]:
    return list(_follow(server, sid, after, ready))


def _rest(server: Served, sid: str, snapshot: dict[str, Any]) -> Thread:
    """The text of the events after the snapshot's number, read to the end."""
    after = int(snapshot["last_event_id"])
    return Thread(lambda ready: _sse_text(_events(server, sid, after, ready))[0])


def _resumed(client: openai.OpenAI, turn_id: str, after: int, ready: threading.Event) -> str:
    """The text of the Responses stream resumed after ``after``, read to the end."""
    with client.responses.retrieve(f"resp_{turn_id}", stream=True, starting_after=after) as rest:
        ready.set()
        return _output_text(list(rest))
