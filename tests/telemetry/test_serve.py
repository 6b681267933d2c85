"""``drover serve`` observed from outside: its spans at a real OTLP/HTTP collector (the request's
``traceparent`` as a turn's parent; a SIGKILL and the takeover that follows, the resumed turn
linked to the dead one) and ``GET /metrics`` parsed with ``prometheus_client``'s parser, its
counters checked against the journal."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server.support import BOUND, Served, clean_env, parse_sse, read_events, start_server
from support.otlp import Collector, Span
from support.sse import sse_lines

from drover.store.sql.log_shapes import unpack
from drover.testing.server import FakeLLMServer

TOKEN = "metrics-token"
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def servers(fake_llm: FakeLLMServer, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``start(env, *flags)``: a ``drover serve`` on one journal (stopped at teardown)."""
    started: list[Served] = []

    def start(env: dict[str, str], *flags: str) -> Served:
        served = start_server(fake_llm, tmp_path, *flags, env=env)
        started.append(served)
        return served

    yield start
    for served in started:
        served.close()


def journal(tmp: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{tmp / 'journal.db'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def turns_named(spans: list[Span]) -> dict[str, Span]:
    return {s.attributes["drover.turn.id"]: s for s in spans if s.name == "invoke_agent drover"}


def test_the_requests_traceparent_is_the_turns_parent(
    fake_llm: FakeLLMServer, collector: Collector, servers: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "hello"})
    server = servers(clean_env(**collector.env()))
    traceparent = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        reply = c.post(
            f"/v1/sessions/{sid}/messages",
            json={"content": "hi"},
            headers={"traceparent": traceparent},
        )
        assert reply.status_code == 202
        turn_id = reply.json()["turn_id"]
        read_events(c, sid)
    spans = collector.wait_for(lambda s: turn_id in turns_named(s))
    turn = turns_named(spans)[turn_id]
    assert (turn.trace_id, turn.parent_id) == (PARENT_TRACE, PARENT_SPAN)
    assert turn.attributes["drover.turn.state.id"] == sid
    assert turn.attributes["drover.turn.status"] == "completed"


def test_sigkill_then_takeover_links_the_resumed_turn_to_the_dead_one(
    fake_llm: FakeLLMServer, collector: Collector, servers: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": "sleep 300"}}]},
        {"text": "Resumed after the takeover."},
    )
    env = clean_env(**collector.env())
    first = servers(env)
    with first.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        reply = c.post(
            f"/v1/sessions/{sid}/messages",
            json={"content": "run it"},
            headers={"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"},
        )
        dead_turn = reply.json()["turn_id"]
        read_events(
            c, sid, until=lambda ev, _: ev.event == "tool_state" and ev.data["state"] == "running"
        )
    # A live event may go out before its row is committed (a crash then resets the stream):
    # wait until the call's ``running`` is durable, so the kill leaves a call whose tool ran.
    deadline = time.monotonic() + 60
    while True:
        with journal(tmp_path) as db:
            states = [r["state"] for r in db.execute("SELECT state FROM tool_calls")]
        if states == ["running"]:
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.05)
    first.stop(signal.SIGKILL)
    with journal(tmp_path) as db:
        (row,) = db.execute("SELECT traceparent FROM turn_traces WHERE turn_id = ?", (dead_turn,))
    _, dead_trace, dead_span, _ = row["traceparent"].split("-")
    assert dead_trace == PARENT_TRACE  # the request's trace

    # The restarted server ends the dead turn and resumes it (the default takeover).
    second = servers(env)
    spans = collector.wait_for(
        lambda s: (
            any(x.name == "drover.recover" for x in s)
            and any(
                t.attributes.get("drover.turn.status") == "completed"
                for t in turns_named(s).values()
            )
        )
    )
    (recover,) = [s for s in spans if s.name == "drover.recover"]
    # A child of the dead turn's span: the dead turn's trace shows how it ended.
    assert (recover.trace_id, recover.parent_id) == (dead_trace, dead_span)
    assert recover.attributes["drover.turn.id"] == dead_turn
    (closed,) = recover.events
    assert closed.attributes["gen_ai.tool.name"] == "bash"
    assert closed.attributes["drover.tool.state"] == "interrupted"
    assert closed.attributes["drover.tool.outcome_unknown"] is True

    (resumed,) = [
        t for t in turns_named(spans).values() if t.attributes["drover.turn.id"] != dead_turn
    ]
    assert resumed.parent_id == ""  # the takeover's own, not a request's
    assert [(x.trace_id, x.span_id) for x in resumed.links] == [(dead_trace, dead_span)]
    assert resumed.attributes["drover.turn.state.id"] == sid

    with second.client() as c:
        metrics = scrape(c)
    assert metrics[("drover_takeovers_total", ())] == 1
    assert metrics[("drover_turns_total", (("status", "completed"),))] == 1


def scrape(client: httpx2.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def settled(
    client: httpx2.Client, key: tuple[str, tuple[tuple[str, str], ...]], value: float
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics once ``key`` reads ``value`` (a gauge following what the server noticed,
    such as a client gone); the bound only fails the test."""
    deadline = time.monotonic() + BOUND
    while (metrics := scrape(client))[key] != value:
        assert time.monotonic() < deadline, f"{key} stayed {metrics[key]}, not {value}"
        time.sleep(0.05)
    return metrics


def test_metrics_count_what_the_journal_holds(
    fake_llm: FakeLLMServer, servers: Callable[..., Served], tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "notes.txt").write_text("some notes")
    overloaded = {"http_error": {"status": 529, "type": "overloaded_error", "message": "busy"}}
    invalid = {"http_error": {"status": 400, "type": "invalid_request_error", "message": "no"}}
    fake_llm.script(
        # a tool turn: two model calls, one tool call
        {
            "tool_calls": [{"name": "read_file", "input": {"path": "notes.txt"}}],
            "usage": {"input_tokens": 20, "output_tokens": 4},
        },
        {"text": "It holds notes.", "usage": {"input_tokens": 40, "output_tokens": 6}},
        # a turn whose model call is retried once
        overloaded,
        {"text": "Fine now.", "usage": {"input_tokens": 10, "output_tokens": 3}},
        # a turn that fails at once (the API refuses the request)
        invalid,
    )
    server = servers(clean_env(), "--token", TOKEN)
    with server.client() as anonymous:
        assert anonymous.get("/metrics").status_code == 401
        foreign = anonymous.get(
            "/metrics",
            headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"},
        )
        assert foreign.status_code == 403  # the guard applies
    with server.client(TOKEN) as c:
        for prompt in ("read the notes", "hello", "fail"):
            sid = c.post("/v1/sessions", json={}).json()["id"]
            assert c.post(f"/v1/sessions/{sid}/messages", json={"content": prompt}).is_success
            read_events(c, sid)
        # One event stream open (its backlog served: an event past the status came) while
        # the metrics are read; the streams closed before are gone once the server saw them
        # go.
        with c.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            received = parse_sse(sse_lines(stream))
            assert [next(received).event, next(received).event] == ["status", "turn_started"]
            while_open = settled(c, ("drover_sse_clients", ()), 1)
        metrics = settled(c, ("drover_sse_clients", ()), 0)

    with journal(tmp_path) as db:
        statuses = Counter(r["status"] for r in db.execute("SELECT status FROM turns"))
        calls = Counter((r["name"], r["state"]) for r in db.execute("SELECT * FROM tool_calls"))
        rows = db.execute("SELECT type, payload FROM events").fetchall()
        events = [(r["type"], unpack(r["type"], json.loads(r["payload"]))) for r in rows]
    assert statuses == {"completed": 2, "failed": 1}
    for status, count in statuses.items():
        assert metrics[("drover_turns_total", (("status", status),))] == count
    turn_samples = {k for k in metrics if k[0] == "drover_turns_total"}
    assert len(turn_samples) == len(statuses)
    assert calls == {("read_file", "output-available"): 1}
    for (tool, state), count in calls.items():
        labels = (("state", state), ("tool", tool))
        assert metrics[("drover_tool_calls_total", labels)] == count

    model = (("model", "test"), ("provider", "anthropic"))
    retries = sum(1 for kind, _ in events if kind == "retry")
    assert retries == 1
    assert metrics[("drover_model_retries_total", model)] == retries
    steps = sum(1 for kind, _ in events if kind == "step_started")
    assert metrics[("drover_model_call_duration_seconds_count", model)] == steps == 4
    assert metrics[("drover_model_time_to_first_token_seconds_count", model)] == 3
    # A partial report (the use as an answer began) is counted again, whole, at its end.
    usage = [p["usage"] for kind, p in events if kind == "usage" and not p["usage"]["partial"]]
    assert any(p["usage"]["partial"] for kind, p in events if kind == "usage")
    for kind in ("input", "output"):
        labels = tuple(sorted((*model, ("type", kind))))
        assert metrics[("drover_tokens_total", labels)] == sum(u[f"{kind}_tokens"] for u in usage)

    commits = metrics[("drover_journal_commits_total", ())]
    assert commits > 0
    assert metrics[("drover_journal_commit_seconds_count", ())] == commits
    assert metrics[("drover_journal_writes_total", ())] >= commits
    assert while_open[("drover_sse_clients", ())] == 1
    assert metrics[("drover_sse_clients", ())] == 0
    assert metrics[("drover_replay_seconds_count", ())] == 4  # every stream caught up once
    assert metrics[("drover_turns_running", ())] == 0
    assert metrics[("drover_takeovers_total", ())] == 0


def test_queue_metrics_count_what_the_queue_holds(
    fake_llm: FakeLLMServer, servers: Callable[..., Served], tmp_path: Path
) -> None:
    """Three messages queued behind a held turn, one cancelled, two run after it: each counted
    once, as the journal's queue records them; a message sent with ``enqueue`` to an idle
    session starts at once and is not counted as queued."""
    long = "A turn that streams for a good while, held by a stall in its reply. " * 2
    fake_llm.script(
        {"text": long, "stall_after": 5},
        {"text": "second done"},
        {"text": "fourth done"},
        {"text": "idle done"},
    )
    fake_llm.allow_unexpected = True  # the stalled stream is cut by the interrupt
    server = servers(clean_env(DROVER_STALL_TIMEOUT="600"))
    with server.client() as c:
        assert {k: v for k, v in scrape(c).items() if k[0] == "drover_queue_messages_total"} == {
            ("drover_queue_messages_total", (("outcome", o),)): 0.0
            for o in ("queued", "started", "cancelled")
        }
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "first"}).is_success
        read_events(c, sid, until=lambda ev, _: ev.event == "text_delta")  # held mid-text
        ids = []
        for content in ("second", "third", "fourth"):
            reply = c.post(
                f"/v1/sessions/{sid}/messages", json={"content": content, "if_busy": "enqueue"}
            )
            assert reply.status_code == 202 and reply.json()["queued"] is True, reply.text
            ids.append(reply.json()["message_id"])
        assert c.delete(f"/v1/sessions/{sid}/queue/{ids[1]}").status_code == 200
        assert c.delete(f"/v1/sessions/{sid}/queue/{ids[1]}").status_code == 404
        held = scrape(c)
        assert c.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 202
        read_events(c, sid, until=lambda _, got: sum(e.event == "done" for e in got) == 2)
        idle = c.post("/v1/sessions", json={}).json()["id"]
        body = {"content": "idle", "if_busy": "enqueue"}
        assert "turn_id" in c.post(f"/v1/sessions/{idle}/messages", json=body).json()
        read_events(c, idle)
        metrics = scrape(c)

    with journal(tmp_path) as db:
        rows = Counter(r["status"] for r in db.execute("SELECT status FROM queued_messages"))
    assert rows == {"started": 2, "cancelled": 1}

    def queue(outcome: str, read: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
        return read[("drover_queue_messages_total", (("outcome", outcome),))]

    assert [queue(o, held) for o in ("queued", "started", "cancelled")] == [3, 0, 1]
    assert queue("queued", metrics) == sum(rows.values()) == 3
    assert queue("started", metrics) == rows["started"] == 2
    assert queue("cancelled", metrics) == rows["cancelled"] == 1
