"""Several real ``drover serve`` processes on one PostgreSQL journal and one Redis.

Servers are shared by the module: A and B (with Redis) and C (without: it follows the log);
tests that SIGKILL a process start a victim of their own. Every wait is on an event of the
stream or a process; timeouts are failure bounds only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from server.support import (
    TERMINAL,
    Served,
    Sse,
    View,
    check_stream,
    parse_sse,
    read_events,
    stored_summary,
    tool_turn_script,
)
from support import redis as redis_support
from support.sse import sse_lines

from drover.testing.server import FakeLLMServer


@pytest.fixture(scope="module")
def a(spawn: Callable[..., Served]) -> Served:
    return spawn()


@pytest.fixture(scope="module")
def b(spawn: Callable[..., Served]) -> Served:
    return spawn()


@pytest.fixture(scope="module")
def c(spawn: Callable[..., Served]) -> Served:
    return spawn(redis=False)


def _session(server: Served) -> str:
    with server.client() as client:
        return str(client.post("/v1/sessions", json={}).json()["id"])


def _post(server: Served, sid: str, content: str = "go") -> str:
    with server.client() as client:
        reply = client.post(f"/v1/sessions/{sid}/messages", json={"content": content})
        assert reply.status_code == 202, reply.text
        return str(reply.json()["turn_id"])


def _snapshot(server: Served, sid: str) -> dict[str, Any]:
    with server.client() as client:
        return dict(client.get(f"/v1/sessions/{sid}").json())


def _view(events: list[Sse]) -> View:
    view = View()
    for ev in events:
        view.apply(ev)
    return view


class Follower(threading.Thread):
    """A client following a session on one server until ``until`` says stop."""

    def __init__(
        self,
        server: Served,
        sid: str,
        until: Callable[[Sse, list[Sse]], bool] = lambda ev, _: ev.event in TERMINAL,
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.sid, self.until = server, sid, until
        self.events: list[Sse] = []
        self.seen = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        def until(ev: Sse, got: list[Sse]) -> bool:
            with self.seen:
                self.events.append(ev)
                self.seen.notify_all()
            return self.until(ev, got)

        try:
            with self.server.client() as client:
                read_events(client, self.sid, until=until)
        except BaseException as exc:  # reported by result()
            self.error = exc

    def wait_for(self, test: Callable[[list[Sse]], bool], bound: float = 60.0) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: test(self.events), bound), "event never came"

    def result(self, *servers: Served) -> list[Sse]:
        self.join(60)
        logs = [line for server in servers for line in server.stderr[-30:]]
        assert not self.is_alive(), f"the stream never ended: {self.events[-3:]} {logs}"
        if self.error is not None:
            raise self.error
        return self.events


def _ids_increase(events: list[Sse]) -> None:
    ids = [e.id for e in events]
    assert all(i is not None for i in ids)
    assert ids == sorted(set(ids)), "ids must increase without repeats"  # type: ignore[type-var]


def test_a_client_on_a_follows_live_a_turn_run_by_b(
    fake: FakeLLMServer, a: Served, b: Served, redis_server: redis_support.RedisServer
) -> None:
    fake.script(*tool_turn_script(1500, delay=0.002))
    sid = _session(a)
    on_a = Follower(a, sid)
    on_b = Follower(b, sid)
    on_a.start()
    on_b.start()
    _post(b, sid)
    reference, received = on_b.result(), on_a.result()
    _ids_increase(received)
    assert [e.id for e in received] == [e.id for e in reference]
    assert [e.data for e in received] == [e.data for e in reference]
    assert sum(1 for e in received if e.event == "text_delta") > 100
    assert _view(received).summary() == stored_summary(_snapshot(a, sid))
    # A client arriving later on A (the stream now holds more than one page) gets the same.
    with a.client() as client:
        late = read_events(client, sid)
    check_stream(late, reference)  # a replay from the log: every live event, as it was sent
    assert _view(late).summary() == _view(received).summary()
    # The live events went through the session's Redis stream.
    assert b":" in redis_server.command("XLEN", f"drover:events:{sid}")
    assert int(redis_server.command("XLEN", f"drover:events:{sid}")[1:].split(b"\r")[0]) > 100


def test_concurrent_posts_on_two_processes_make_one_turn_and_one_409(
    fake: FakeLLMServer, a: Served, b: Served
) -> None:
    fake.script({"text": "slow " * 200, "delay": 0.005})
    sid = _session(a)
    barrier = threading.Barrier(2)
    replies: list[tuple[int, dict[str, Any]]] = []

    def post(server: Served) -> None:
        with server.client() as client:
            barrier.wait(30)
            reply = client.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
            replies.append((reply.status_code, reply.json()))

    posters = [threading.Thread(target=post, args=(s,)) for s in (a, b)]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join(60)
    assert sorted(code for code, _ in replies) == [202, 409], replies
    started = next(body["turn_id"] for code, body in replies if code == 202)
    refused = next(body for code, body in replies if code == 409)
    assert refused["error"]["code"] == "session_busy"
    assert refused["turn_id"] == started
    with a.client() as client:
        read_events(client, sid)
    turns = _snapshot(b, sid)["turns"]
    assert [(t["id"], t["status"]) for t in turns] == [(started, "completed")]


def _turn_ended(turn_id: str) -> Callable[[Sse, list[Sse]], bool]:
    """Until a turn other than ``turn_id`` (the continuation) ended: its terminal event, or a
    ``reset`` whose snapshot already holds its end."""

    def until(ev: Sse, _: list[Sse]) -> bool:
        if ev.event == "reset":
            turns = ev.data["turns"]
            return len(turns) > 1 and all(t["status"] != "running" for t in turns)
        return ev.event in TERMINAL and ev.data.get("turn_id") != turn_id

    return until


def _check_final(events: list[Sse], snap: dict[str, Any]) -> None:
    _ids_increase(events)
    assert _view(events).summary() == stored_summary(snap)
    for turn in snap["turns"]:
        assert turn["status"] != "running"
        for call in turn["tool_calls"]:
            assert call["state"] in ("output-available", "output-error", "denied", "interrupted")


def test_sigkill_mid_stream_another_process_takes_the_turn_over(
    fake: FakeLLMServer, spawn: Callable[..., Served], a: Served, b: Served
) -> None:
    victim = spawn()
    long_text = " ".join(f"w{i:04d}" for i in range(1500))
    fake.script({"text": long_text, "delay": 0.004}, {"text": "Resumed after the cut."})
    sid = _session(a)
    first = _post(victim, sid)
    on_a = Follower(a, sid, until=_turn_ended(first))
    on_a.start()
    on_a.wait_for(lambda got: sum(e.event == "text_delta" for e in got) >= 150)
    victim.stop(9)
    events = on_a.result(a, b)
    snap = _snapshot(a, sid)
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed"]
    # A continuation (the runner's "cut off" note), not a message of the user's.
    assert "cut off" in snap["turns"][1]["user_message"]["content"][0]["text"]
    # The flushed part of the cut answer is kept, as a partial message.
    kept = snap["turns"][0]["messages"]
    assert (
        kept
        and kept[0]["partial"]
        and long_text.startswith(kept[0]["message"]["content"][0]["text"])
    )
    _check_final(events, snap)


def test_sigkill_mid_tool_the_call_is_reported_unknown_never_rerun(
    fake: FakeLLMServer, spawn: Callable[..., Served], a: Served, tmp_path: Any
) -> None:
    victim = spawn()
    marker, pidfile = tmp_path / "ran", tmp_path / "pid"
    command = f"echo $$ > {pidfile}; echo x >> {marker}; exec sleep 60"
    fake.script(
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "The command was cut off; not running it again."},
    )
    sid = _session(a)
    first = _post(victim, sid)
    on_a = Follower(a, sid, until=_turn_ended(first))
    on_a.start()
    on_a.wait_for(
        lambda got: any(e.event == "tool_state" and e.data["state"] == "running" for e in got)
    )
    deadline = time.monotonic() + 30
    while not (marker.exists() and pidfile.exists()):  # the command has started
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)
    victim.stop(9)
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the command the victim left
    events = on_a.result()
    snap = _snapshot(a, sid)
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed"]
    (call,) = snap["turns"][0]["tool_calls"]
    assert call["state"] == "interrupted"
    assert call["outcome_unknown"] is True
    _check_final(events, snap)
    # The model was told, in the continuation's history, that the outcome is unknown.
    results = [
        block
        for message in fake.requests[-1].body["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "tool_result"
    ]
    assert results and "interrupt" in str(results[-1]["content"]).lower()
    assert marker.read_text() == "x\n"  # ran once, never again


def test_redis_killed_and_restarted_mid_turn_the_client_ends_with_the_stored_transcript(
    fake: FakeLLMServer, a: Served, b: Served, redis_server: redis_support.RedisServer
) -> None:
    fake.script(*tool_turn_script(2500, delay=0.003))
    sid = _session(a)
    on_a = Follower(a, sid)
    on_a.start()
    first = _post(b, sid)
    on_a.wait_for(lambda got: sum(e.event == "text_delta" for e in got) >= 50)
    redis_server.kill()
    seen = len(on_a.events)
    # Without Redis, A follows the journal's log: the turn keeps arriving.
    on_a.wait_for(lambda got: len(got) > seen + 20)
    redis_server.restart()
    events = on_a.result()
    snap = _snapshot(b, sid)
    assert [t["status"] for t in snap["turns"]] == ["completed"]
    _check_final(events, snap)
    # Redis is followed again: the next turn is live through it.
    fake.script({"text": "again " * 50})
    on_a = Follower(a, sid, until=_turn_ended(first))
    on_a.start()
    _post(b, sid)
    _check_final(on_a.result(), _snapshot(a, sid))
    assert int(redis_server.command("XLEN", f"drover:events:{sid}")[1:].split(b"\r")[0]) > 10


def test_postgresql_restarted_between_turns_the_pools_reconnect(
    fake: FakeLLMServer, a: Served, b: Served, pg_cluster: Any
) -> None:
    fake.script({"text": "before"})
    sid = _session(a)
    _post(b, sid)
    with a.client() as client:
        read_events(client, sid)
    for args in (("stop", "-m", "fast", "-w"), ("start", "-w", "-t", "30", "-l", "server.log")):
        result = pg_cluster.pg_ctl(*args)  # -l: the server must not hold the captured pipes
        assert result.returncode == 0, result.stderr
    fake.script({"text": "after the restart"})
    on_a = Follower(
        a, sid, until=lambda ev, _: ev.event in TERMINAL and ev.data["text"] != "before"
    )
    on_a.start()
    _post(b, sid)
    events = on_a.result()
    snap = _snapshot(a, sid)
    assert [t["status"] for t in snap["turns"]] == ["completed", "completed"]
    _check_final(events, snap)


def test_without_redis_a_process_follows_the_log_and_interrupts_reach_the_turn(
    fake: FakeLLMServer, b: Served, c: Served
) -> None:
    fake.script(*tool_turn_script(1500, delay=0.002))
    sid = _session(c)
    on_c = Follower(c, sid)
    on_b = Follower(b, sid)
    on_c.start()
    on_b.start()
    _post(b, sid)
    received, reference = on_c.result(), on_b.result()
    _ids_increase(received)
    by_id = {e.id: e.data for e in reference}
    assert all(by_id[e.id] == e.data for e in received)  # the same events, at the log's pace
    assert {e.id for e in reference if e.event != "text_delta"} <= {e.id for e in received}
    assert _view(received).summary() == stored_summary(_snapshot(c, sid))
    # An interrupt posted to C (no Redis: PostgreSQL NOTIFY) stops the turn B runs.
    fake.script({"text": "long " * 2000, "delay": 0.005})
    on_c = Follower(c, sid, until=lambda ev, _: ev.event in TERMINAL and ev.id > received[-1].id)  # type: ignore[operator]
    on_c.start()
    turn = _post(b, sid)
    on_c.wait_for(
        lambda got: any(e.event == "text_delta" and e.data["turn_id"] == turn for e in got)
    )
    with c.client() as client:
        reply = client.post(f"/v1/sessions/{sid}/interrupt", json={})
        assert reply.status_code == 202, reply.text
        assert reply.json()["turn_id"] == turn
    events = on_c.result()
    assert events[-1].data["reason"] == "interrupted"
    snap = _snapshot(c, sid)
    assert snap["turns"][-1]["status"] == "interrupted"
    fake.allow_unexpected = True


def test_workers_start_n_processes_on_one_port_and_stop_cleanly(
    fake: FakeLLMServer, spawn: Callable[..., Served]
) -> None:
    pool = spawn("--workers", "2")
    pid = pool.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 2
    fake.script({"text": "served by a worker"})
    sid = _session(pool)
    _post(pool, sid)
    with pool.client() as client:
        events = read_events(client, sid)
    assert events[-1].event == "done"
    assert pool.stop() == 0
    assert any("stopped" in line for line in pool.stderr)
    for child in children:
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


def test_a_permission_answer_posted_to_a_reaches_the_turn_on_another_process(
    fake: FakeLLMServer, spawn: Callable[..., Served], a: Served
) -> None:
    asking = spawn("--permission-mode", "ask")
    fake.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "p.txt", "content": "ok"}}]},
        {"text": "Written."},
    )
    sid = _session(a)
    on_a = Follower(a, sid)
    on_a.start()
    turn = _post(asking, sid)
    on_a.wait_for(lambda got: any(e.event == "permission_request" for e in got))
    request = next(e for e in on_a.events if e.event == "permission_request")
    with a.client() as client:
        # A knows the turn another process runs (it waits for the answer meanwhile).
        listed = {
            s["id"]: s["running_turn_id"] for s in client.get("/v1/sessions").json()["sessions"]
        }
        assert listed[sid] == turn
        assert _snapshot(a, sid)["running_turn_id"] == turn
        with client.stream("GET", f"/v1/sessions/{sid}/events") as response:
            status = next(parse_sse(sse_lines(response)))
        assert status.event == "status" and status.data["running_turn_id"] == turn
        url = f"/v1/sessions/{sid}/permissions/{request.data['request_id']}"
        reply = client.post(url, json={"decision": "allow"})
        assert reply.status_code == 200, reply.text
    events = on_a.result()
    assert events[-1].event == "done"
    (call,) = _snapshot(a, sid)["turns"][0]["tool_calls"]
    assert call["state"] == "output-available"


def _post_busy(server: Served, sid: str, content: str, if_busy: str) -> dict[str, Any]:
    with server.client() as client:
        body = {"content": content, "if_busy": if_busy}
        reply = client.post(f"/v1/sessions/{sid}/messages", json=body)
        assert reply.status_code == 202, reply.text
        return dict(reply.json())


def _ends(count: int, after: int = 0) -> Callable[[Sse, list[Sse]], bool]:
    """Until the ``count``-th turn end numbered after ``after`` the follower sees."""
    return lambda _ev, got: sum(e.event in TERMINAL and (e.id or 0) > after for e in got) >= count


def _asked_with(fake: FakeLLMServer, content: str) -> str:
    """The body of the model request made for the turn of the message ``content``."""
    return next(str(r.body) for r in fake.requests if content in str(r.body))


def test_interrupt_and_rollback_posted_to_another_process_stop_the_turn_there(
    fake: FakeLLMServer, a: Served, b: Served, c: Served
) -> None:
    """A message with ``if_busy`` ``interrupt`` posted to A while B runs the session's turn:
    B stops it (work kept) and leaves its queue alone, A runs the message's turn, which sees
    the work, then the message queued before it. ``rollback`` posted to C (no Redis: the
    control goes through PostgreSQL) discards the stopped turn's work instead."""
    partial = "long " * 2000
    fake.script(
        {"text": partial, "delay": 0.005},
        {"text": "Done instead."},
        {"text": "Queued one done."},
        {"text": partial, "delay": 0.005},
        {"text": "Rolled back."},
    )
    sid = _session(a)
    on_a = Follower(a, sid, until=_ends(3))
    on_a.start()
    first = _post(b, sid, "write a long answer")
    on_a.wait_for(lambda got: any(e.event == "text_delta" for e in got))
    queued = _post_busy(b, sid, "the queued message", "enqueue")
    assert queued["queued"] is True
    instead = _post_busy(a, sid, "do this instead", "interrupt")["turn_id"]
    assert instead != first
    seen = on_a.result(a, b)
    ends = [(e.data["turn_id"], e.event) for e in seen if e.event in TERMINAL]
    assert ends[0] == (first, "incomplete") and ends[1] == (instead, "done")
    snap = _snapshot(a, sid)
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed", "completed"]
    assert snap["turns"][1]["id"] == instead
    assert "the queued message" in str(snap["turns"][2]["user_message"])
    assert "long long" in _asked_with(fake, "do this instead")  # the work was kept

    on_c = Follower(c, sid, until=_ends(2, after=seen[-1].id or 0))
    on_c.start()
    second = _post(b, sid, "write another long answer")
    on_c.wait_for(
        lambda got: any(e.event == "text_delta" and e.data["turn_id"] == second for e in got)
    )
    rolled = _post_busy(c, sid, "start over", "rollback")["turn_id"]
    ends = [(e.data["turn_id"], e.event) for e in on_c.result(b, c) if e.event in TERMINAL]
    assert ends[-2:] == [(second, "incomplete"), (rolled, "done")]
    snap = _snapshot(c, sid)
    assert [t["status"] for t in snap["turns"]][-2:] == ["interrupted", "completed"]
    asked = _asked_with(fake, "start over")
    assert "write another long answer" not in asked  # the stopped turn's work was discarded
    assert "do this instead" in asked
