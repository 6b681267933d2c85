"""Real ``drover serve`` processes on loopback, an HTTP client, an SSE reader, a transcript
reducer (what a browser does with the events), all blocking with timeouts as failure bounds."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from support import forkserver
from support.sse import sse_lines

from drover.testing.server import FakeLLMServer

DROVER = [sys.executable, "-m", "drover.cli.main"]
TERMINAL = {"done", "incomplete", "error"}
BOUND = 60.0  # seconds: a failure bound, never a synchronisation


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name in ("DROVER_DB", "DROVER_TOKEN"):
        env.pop(name, None)
    env["DROVER_CONFIG"] = "/nonexistent/drover-config.toml"
    env["ANTHROPIC_API_KEY"] = "test"
    env.update(extra)
    return env


@dataclass
class Served:
    #: Forked from the run's warm interpreter (:mod:`support.forkserver`) unless
    #: ``DROVER_TEST_SPAWN=exec``: ``drover serve`` without its seconds of imports.
    proc: subprocess.Popen[str] | forkserver.Popen
    url: str
    stderr: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def client(self, token: str | None = None) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=BOUND)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=BOUND)

    def close(self) -> None:
        """Stop the process (SIGKILL if SIGTERM hangs) and close its pipes."""
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.reader is not None:
            self.reader.join(BOUND)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def start_server(
    fake: FakeLLMServer, tmp: Path, *extra: str, env: dict[str, str] | None = None
) -> Served:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    argv = [
        *DROVER,
        "serve",
        "--port",
        "0",
        "--model",
        "anthropic:test",
        "--base-url",
        fake.base_url,
        "--db",
        str(tmp / "journal.db"),
        "--workdir",
        str(work),
        *extra,
    ]
    if "--permission-mode" not in extra:
        argv += ["--permission-mode", "allow"]
    proc: subprocess.Popen[str] | forkserver.Popen
    if forkserver.forking():
        proc = forkserver.Popen(forkserver.shared(), argv[len(DROVER) :], env=env or clean_env())
    else:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env or clean_env(),
        )
    assert proc.stdout is not None and proc.stderr is not None
    served = Served(proc=proc, url="")
    served.reader = threading.Thread(target=_drain, args=(proc.stderr, served.stderr), daemon=True)
    served.reader.start()
    line = _readline(proc, BOUND)
    prefix = "drover serve: listening on "
    if not line.startswith(prefix):
        proc.kill()
        raise AssertionError(f"drover serve did not start: {line!r} {served.stderr}")
    served.url = line[len(prefix) :].strip()
    return served


@contextlib.contextmanager
def servers(fake: FakeLLMServer, tmp: Path) -> Iterator[Callable[..., Served]]:
    """``start(*flags, env=None)`` starts a server on ``tmp``'s journal and workdir
    (:func:`start_server`); each is stopped when the block ends (SIGKILL if SIGTERM hangs)."""
    started: list[Served] = []

    def start(*flags: str, env: dict[str, str] | None = None) -> Served:
        served = start_server(fake, tmp, *flags, env=env)
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.close()


def _drain(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)


def _readline(proc: subprocess.Popen[str] | forkserver.Popen, timeout: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    return out[0] if out else ""


# -- SSE ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sse:
    id: int | None
    event: str
    data: dict[str, Any]


def read_events(
    client: httpx2.Client,
    session_id: str,
    *,
    last_event_id: int | None = None,
    after: int | None = None,
    until: Callable[[Sse, list[Sse]], bool] = lambda ev, _: ev.event in TERMINAL,
    query: str = "",
) -> list[Sse]:
    """Connect, read events until ``until`` says stop (it sees each event and those before),
    then disconnect. Transient events are left out."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    url = f"/v1/sessions/{session_id}/events"
    params = [] if after is None else [f"after={after}"]
    if query:
        params.append(query)
    if params:
        url += "?" + "&".join(params)
    got: list[Sse] = []
    with client.stream("GET", url, headers=headers, timeout=BOUND) as response:
        assert response.status_code == 200, response.read()
        for ev in parse_sse(_bounded(sse_lines(response), got)):
            if ev.event == "status":
                continue
            got.append(ev)
            if until(ev, got):
                break
    return got


def new_session(client: httpx2.Client) -> str:
    """``POST /v1/sessions``: the new session's id (201 asserted)."""
    reply = client.post("/v1/sessions", json={})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def live_turn(client: httpx2.Client, session_id: str, content: str) -> list[Sse]:
    """Subscribe to the session's events, send ``content`` once subscribed (so that every event
    of its turn comes live, none from the log) and read them to the turn's terminal event.
    Transient events are kept; the ``status`` event of the subscription is left out."""
    got: list[Sse] = []
    with client.stream("GET", f"/v1/sessions/{session_id}/events", timeout=BOUND) as response:
        assert response.status_code == 200, response.read()
        for ev in parse_sse(_bounded(sse_lines(response), got)):
            if ev.event == "status":
                sent = client.post(f"/v1/sessions/{session_id}/messages", json={"content": content})
                assert sent.status_code == 202, sent.text
                continue
            got.append(ev)
            if ev.event in TERMINAL:
                break
    return got


def _bounded(lines: Iterator[str], got: list[Sse]) -> Iterator[str]:
    """``lines`` until ``4 × BOUND`` seconds have passed: keep-alive comments reset the read
    timeout, so a stream whose awaited event never comes would otherwise be read for ever."""
    deadline = time.monotonic() + 4 * BOUND
    for line in lines:
        if time.monotonic() > deadline:
            kinds = [ev.event for ev in got]
            raise AssertionError(f"the awaited event did not come in {4 * BOUND:g} s: {kinds}")
        yield line


def parse_sse(lines: Iterator[str]) -> Iterator[Sse]:
    ident: int | None = None
    event, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield Sse(ident, event, json.loads("\n".join(data)))
            ident, event, data = None, "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                ident = int(value)
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)


# -- what a client builds from the events -------------------------------------------------------


class View:
    """The transcript a client rebuilds from the stream (as the web page does)."""

    def __init__(self) -> None:
        self.turns: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []

    def turn(self, turn_id: str) -> dict[str, Any]:
        if turn_id not in self.turns:
            self.turns[turn_id] = {"status": "running", "messages": [], "texts": {}, "calls": {}}
            self.order.append(turn_id)
        return self.turns[turn_id]

    def reset(self, snapshot: dict[str, Any]) -> None:
        """Replace everything with the durable snapshot."""
        self.turns, self.order = {}, []
        for t in snapshot["turns"]:
            turn = self.turn(t["id"])
            turn["status"] = t["status"]
            for i, m in enumerate(t["messages"]):
                if m["message"]["role"] != "assistant":
                    continue
                if t["status"] == "running" and m["partial"]:
                    # Text still streaming (rebuilt from its deltas): the step's final message
                    # replaces it.
                    turn["texts"][("snapshot", i)] = [m["message"]["content"][0]["text"]]
                else:
                    turn["messages"].append(m["message"])
            turn["calls"] = {c["call_id"]: c["state"] for c in t["tool_calls"]}

    def apply(self, ev: Sse) -> None:
        d = ev.data
        if ev.event == "reset":
            self.reset(d)
            return
        turn = self.turn(d["turn_id"])
        if ev.event == "text_delta":
            turn["texts"].setdefault((d["step"], d["index"]), []).append(d["text"])
        elif ev.event == "retry" and d["discard_partial"]:
            turn["texts"] = {}
        elif ev.event == "assistant_message":
            turn["texts"] = {}
            turn["messages"].append(d["message"])
        elif ev.event == "tool_state":
            turn["calls"][d["call_id"]] = d["state"]
        elif ev.event in TERMINAL:
            turn["status"] = _status(d)

    def summary(self) -> list[tuple[str, list[dict[str, Any]], dict[str, str]]]:
        return [
            (self.turns[t]["status"], self.turns[t]["messages"], self.turns[t]["calls"])
            for t in self.order
        ]


def _status(data: dict[str, Any]) -> str:
    if data["type"] == "done":
        return "completed"
    if data["reason"] == "interrupted":
        return "interrupted"
    return "incomplete" if data["type"] == "incomplete" else "failed"


def stored_summary(
    snapshot: dict[str, Any],
) -> list[tuple[str, list[dict[str, Any]], dict[str, str]]]:
    return [
        (
            t["status"],
            [m["message"] for m in t["messages"] if m["message"]["role"] == "assistant"],
            {c["call_id"]: c["state"] for c in t["tool_calls"]},
        )
        for t in snapshot["turns"]
    ]


def tool_turn_script(text_chars: int = 3000, delay: float = 0.0) -> list[dict[str, Any]]:
    """A tool-using turn: a long answer (several coalesced flushes), a tool call, an answer."""
    words = " ".join(f"word{i}" for i in range(text_chars // 6))[:text_chars]
    first: dict[str, Any] = {
        "text": words,
        "tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "hi"}}],
    }
    second: dict[str, Any] = {"text": "Wrote a.txt. " + words[: text_chars // 2]}
    if delay:
        first["delay"] = second["delay"] = delay
    return [first, second]


def check_stream(received: list[Sse], reference: list[Sse]) -> None:
    """What one client received (across reconnects) against a client that never dropped:
    increasing ids, no duplicate, identical data per id, every event present — text deltas
    included — but those a ``reset`` replaced (at or below its id), and no hole inside any
    streamed text (what arrived of each block is a prefix of the block's final text)."""
    ids = [e.id for e in received]
    assert all(i is not None for i in ids)
    assert ids == sorted(set(ids)), "ids must increase without repeats"  # type: ignore[type-var]
    by_id = {e.id: e for e in reference}
    for e in received:
        if e.event == "reset":
            continue
        assert e.id in by_id, f"event {e.id} {e.event} was never sent live"
        assert e.data == by_id[e.id].data, f"event {e.id} differs"
    got = set(ids)
    start = received[0].id or 0
    replaced = max((e.id or 0 for e in received if e.event == "reset"), default=0)
    missing = [
        e for e in reference if e.id and e.id >= start and e.id > replaced and e.id not in got
    ]
    assert not missing, f"missing {[(e.id, e.event) for e in missing]}"
    assert sum(1 for e in received if e.event in TERMINAL) == 1
    check_text_has_no_hole(received)


def check_text_has_no_hole(events: list[Sse]) -> None:
    step: dict[str, int] = {}
    texts: dict[tuple[str, int, int], list[str]] = {}
    for e in events:
        d = e.data
        if e.event == "step_started":
            step[d["turn_id"]] = d["step"]
        elif e.event == "text_delta":
            texts.setdefault((d["turn_id"], d["step"], d["index"]), []).append(d["text"])
        elif e.event == "retry" and d["discard_partial"]:
            for key in [k for k in texts if k[0] == d["turn_id"]]:
                del texts[key]
        elif e.event == "assistant_message":
            current = step.get(d["turn_id"], 0)
            for i, block in enumerate(d["message"]["content"]):
                seen = "".join(texts.pop((d["turn_id"], current, i), []))
                if block["type"] == "text" and seen:
                    assert block["text"].startswith(seen), f"a hole in the text of step {current}"


def model_texts(fake_llm: FakeLLMServer) -> Iterator[str]:
    """The frames of the fake model's gated Anthropic reply (``gate: true``), let go one at a
    time as the caller asks for the next: the text each one carries ("" if none), until the
    reply's last."""
    while True:
        frame = fake_llm.step(BOUND).decode()
        data = json.loads(frame.split("data: ", 1)[1])
        yield data.get("delta", {}).get("text", "") if data["type"] == "content_block_delta" else ""
        if data["type"] == "message_stop":
            return
