"""Gap-free resumable streams against a real ``drover serve``: reconnect anywhere, live or
finished, inside a coalesced flush, after SIGKILL and restart; many clients, one sequence."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from support.sse import sse_lines

from drover.testing.server import FakeLLMServer

from .support import (
    TERMINAL,
    Served,
    Sse,
    View,
    check_stream,
    read_events,
    stored_summary,
    tool_turn_script,
)


def _start_turn(server: Served, content: str = "go") -> tuple[str, str]:
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": content})
        assert reply.status_code == 202, reply.text
        return sid, reply.json()["turn_id"]


def _transcript_of(events: list[Sse]) -> list[tuple[str, list[dict[str, object]], dict[str, str]]]:
    view = View()
    for e in events:
        view.apply(e)
    return view.summary()


def test_reconnect_after_every_event_of_a_finished_tool_turn(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script(*tool_turn_script(3000))
    server = serve()
    sid, _ = _start_turn(server)
    with server.client() as c:
        full = read_events(c, sid)
        snapshot = c.get(f"/v1/sessions/{sid}").json()
        stored = stored_summary(snapshot)
        assert snapshot["turns"][0]["status"] == "completed"
        assert _transcript_of(full) == stored
        # Several deltas per coalesced row: reconnecting at a delta id starts inside a flush.
        deltas = [e for e in full if e.event == "text_delta"]
        assert len(deltas) > 300
        for k in [0, *(e.id for e in full if e.id)]:
            prefix = [e for e in full if e.id is not None and e.id <= k]
            rest = read_events(c, sid, last_event_id=k) if k < full[-1].id else []  # type: ignore[operator]
            received = prefix + rest
            check_stream(received, full)
            assert _transcript_of(received) == stored, f"after {k}"


def test_a_client_dropping_every_few_events_of_a_live_turn_misses_nothing(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script(*tool_turn_script(2000, delay=0.002))
    server = serve()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
    reference: list[Sse] = []
    ready = threading.Event()

    def follow() -> None:
        with server.client() as rc:

            def until(ev: Sse, got: list[Sse]) -> bool:
                return ev.event in TERMINAL

            reference.extend(read_events(rc, sid, until=until))

    follower = threading.Thread(target=follow)
    follower.start()
    with server.client() as c:
        reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
        assert reply.status_code == 202
        received: list[Sse] = []
        last, hops = 0, 0
        while not received or received[-1].event not in TERMINAL:
            hops += 1
            chunk = read_events(
                c,
                sid,
                last_event_id=last or None,
                until=lambda ev, got: ev.event in TERMINAL or len(got) >= 7,
            )
            received += chunk
            last = received[-1].id or last
        ready.set()
    follower.join(60)
    assert hops > 20
    check_stream(received, reference)
    deltas = {e.id for e in reference if e.event == "text_delta"}
    # While the turn is live every delta is served, flushed (from the log) or not (memory).
    live_part = [e for e in received if e.event == "text_delta"]
    assert {e.id for e in live_part} <= deltas
    with server.client() as c:
        stored = stored_summary(c.get(f"/v1/sessions/{sid}").json())
    assert _transcript_of(received) == stored == _transcript_of(reference)


def test_fifty_clients_see_one_sequence(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script(*tool_turn_script(1500, delay=0.002))
    server = serve()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
    results: list[list[tuple[int | None, str, object]]] = [[] for _ in range(50)]
    connected = threading.Barrier(51)

    def client(i: int) -> None:
        with server.client() as cc:
            first = True

            def until(ev: Sse, got: list[Sse]) -> bool:
                return ev.event in TERMINAL

            with cc.stream("GET", f"/v1/sessions/{sid}/events") as response:
                from .support import parse_sse

                for ev in parse_sse(sse_lines(response)):
                    if first:
                        first = False
                        connected.wait(60)
                    if ev.event == "status":
                        continue
                    results[i].append((ev.id, ev.event, ev.data))
                    if ev.event in TERMINAL:
                        break

    threads = [threading.Thread(target=client, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    connected.wait(60)  # every client is subscribed before the turn starts
    with server.client() as c:
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}).status_code == 202
    for t in threads:
        t.join(120)
    assert all(r == results[0] for r in results)
    assert sum(1 for r in results[0] if r[1] == "text_delta") > 150
    assert results[0][-1][1] == "done"


def test_sigkill_mid_turn_then_restart_answers_with_survivors_and_a_reset(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    # A long slow answer: the server dies while text is streaming.
    fake_llm.script({"text": "x" * 40 + " ".join(f"w{i}" for i in range(3000)), "delay": 0.003})
    fake_llm.allow_unexpected = True
    server = serve()
    sid, turn_id = _start_turn(server)
    with server.client() as c:
        seen = read_events(
            c, sid, until=lambda ev, got: sum(e.event == "text_delta" for e in got) >= 400
        )
    server.stop(signal.SIGKILL)
    last_seen = seen[-1].id
    assert last_seen is not None

    # Only ended, not resumed (the default takeover would start a continuation turn).
    restarted = serve("--takeover", "end")
    with restarted.client() as c:
        snapshot = c.get(f"/v1/sessions/{sid}").json()
        (turn,) = snapshot["turns"]
        assert turn["status"] == "interrupted"  # recovered at start
        durable = snapshot["last_event_id"]
        # A client that saw more than survived gets a reset with the durable snapshot, then
        # the events after it (none: the recovered turn is over) — never a silent skip.
        ahead = read_events(c, sid, last_event_id=last_seen, until=lambda ev, got: True)
        assert ahead[0].event == "reset"
        assert ahead[0].id == durable
        assert ahead[0].data["turns"][0]["status"] == "interrupted"
        # A client whose id survived continues exactly from the log.
        survived = [e for e in seen if e.id is not None and e.id <= 3]
        rest = read_events(c, sid, last_event_id=3)
        assert rest[0].id == 4
        terminals = [e for e in rest if e.event in TERMINAL]
        assert len(terminals) == 1 and terminals[0].data["reason"] == "interrupted"
        received = survived + rest
        assert _transcript_of(received) == stored_summary(snapshot)
        # The whole log holds one terminal event for the turn.
        everything = read_events(c, sid)
        assert sum(e.event in TERMINAL for e in everything) == 1
        assert all(e.data["turn_id"] == turn_id for e in everything)
        # Every number the client saw past the survivors — deltas not yet flushed when the
        # process died — gets a reset or, when the log still covers it, exactly the events
        # recovery logged: never a skip over them (were the numbers not reserved, recovery
        # would reuse them and a client holding one would skip what recovery logged).
        logged = {(e.id, str(e.data)) for e in everything}
        frontier = max(e.id or 0 for e in seen if (e.id, str(e.data)) in logged)
        recovery = [e.event for e in everything if (e.id or 0) > last_seen]
        assert recovery == ["assistant_message", "incomplete"]
        past = [e.id for e in seen if (e.id or 0) > frontier]
        assert past
        for k in past[:4]:
            answer = read_events(
                c,
                sid,
                last_event_id=k,
                until=lambda ev, got: ev.event == "reset" or ev.event in TERMINAL,
            )
            events = [e.event for e in answer]
            assert events == ["reset"] or events == recovery, f"after lost id {k}: {events}"
