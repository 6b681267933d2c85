"""Webhooks of a real ``drover serve``: a receiver (a real HTTP server in the test) that fails
twice then accepts gets exactly one accepted delivery, every attempt validly signed with the
same id; a SIGKILL of the server between a failed attempt and the next still delivers, from
the outbox, after a restart, and so does one killed while the receiver had not answered yet
(at least once, the same id); a message may name its own webhook only under an allowed origin."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from drover.server.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from drover.testing.server import FakeLLMServer

from .support import BOUND, Served, clean_env, read_events, start_server

SECRET = "s3cret-for-tests"


@dataclass
class Receiver:
    """Answers each POST with the next status of ``answers`` (200 once they run out) and
    records what it got: ``(path, headers, body, status)``."""

    answers: list[int]
    got: list[tuple[str, dict[str, str], bytes, int]] = field(default_factory=list)
    #: An answer of 0 holds the request until this is set (a receiver still thinking).
    release: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    url: str = ""

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.got) >= count, BOUND), self.got

    def accepted(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, _, body, status in self.got if status == 200]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box = Receiver(answers=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with box.changed:
                status = box.answers.pop(0) if box.answers else 200
                box.got.append((self.path, dict(self.headers.items()), body, status))
                box.changed.notify_all()
            if status == 0:
                box.release.wait(BOUND)
                return  # no answer: the connection closes
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield box
    box.release.set()
    server.shutdown()
    server.server_close()
    thread.join(BOUND)


def _serve(fake: FakeLLMServer, tmp: Path, hook: str, *extra: str) -> Served:
    flags = ("--webhook", hook, "--webhook-secret", SECRET, "--webhook-backoff", "0.05", *extra)
    return start_server(fake, tmp, *flags)


def _turn(served: Served, **message: str) -> tuple[str, str]:
    with served.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": "hi", **message})
        assert reply.status_code == 202, reply.text
        assert read_events(c, sid)[-1].event == "done"
        return sid, str(reply.json()["turn_id"])


def _check_signed(receiver: Receiver) -> set[str]:
    """Every attempt's signature is valid; the delivery ids the attempts carried."""
    ids = set()
    for _, headers, body, _ in receiver.got:
        assert verify(SECRET, body, headers[SIGNATURE_HEADER])
        assert not verify("another secret", body, headers[SIGNATURE_HEADER])
        assert headers[DELIVERY_HEADER] == json.loads(body)["id"]
        ids.add(headers[DELIVERY_HEADER])
    return ids


def test_fails_twice_then_accepts_exactly_one_signed_delivery(
    fake_llm: FakeLLMServer, tmp_path: Path, receiver: Receiver
) -> None:
    fake_llm.script({"text": "Hello."})
    receiver.answers = [500, 503]
    served = _serve(fake_llm, tmp_path, receiver.url + "/hook")
    try:
        sid, turn_id = _turn(served)
        receiver.wait_for(3)
    finally:
        assert served.stop() == 0
        served.close()
    assert [status for *_, status in receiver.got] == [500, 503, 200]
    assert len(_check_signed(receiver)) == 1  # one delivery, tried three times
    (body,) = receiver.accepted()
    assert (body["type"], body["session_id"], body["turn_id"]) == ("turn.ended", sid, turn_id)
    assert body["status"] == "completed" and body["reason"] is None
    usage = body["usage"]
    assert isinstance(usage, dict) and usage["output_tokens"] > 0


def test_a_restart_between_failure_and_success_still_delivers(
    fake_llm: FakeLLMServer, tmp_path: Path, receiver: Receiver
) -> None:
    fake_llm.script({"text": "Hello."})
    receiver.answers = [500]
    # A long first backoff: the retry is due only after the restart.
    flags = ("--webhook-secret", SECRET, "--webhook-backoff", "2")
    first = start_server(fake_llm, tmp_path, "--webhook", receiver.url + "/hook", *flags)
    try:
        _, turn_id = _turn(first)
        receiver.wait_for(1)
        _wait_recorded(tmp_path / "journal.db", turn_id)
        first.proc.send_signal(signal.SIGKILL)  # our own server, by its pid
        first.proc.wait(BOUND)
    finally:
        first.close()
    assert len(receiver.got) == 1
    # Restarted without --webhook: the secret alone delivers what the outbox holds.
    second = start_server(fake_llm, tmp_path, *flags)
    try:
        receiver.wait_for(2)
    finally:
        second.close()
    assert [status for *_, status in receiver.got] == [500, 200]
    assert len(_check_signed(receiver)) == 1
    assert receiver.accepted()[0]["turn_id"] == turn_id


def test_a_server_killed_mid_delivery_sends_it_again_after_a_restart(
    fake_llm: FakeLLMServer, tmp_path: Path, receiver: Receiver
) -> None:
    fake_llm.script({"text": "Hello."})
    receiver.answers = [0]  # the first attempt gets no answer before the server dies
    flags = ("--webhook-secret", SECRET)
    first = start_server(fake_llm, tmp_path, "--webhook", receiver.url + "/hook", *flags)
    try:
        _turn(first)
        receiver.wait_for(1)
        first.proc.send_signal(signal.SIGKILL)  # our own server, by its pid
        first.proc.wait(BOUND)
    finally:
        first.close()
    receiver.release.set()
    second = start_server(fake_llm, tmp_path, *flags)
    try:
        receiver.wait_for(2)
    finally:
        second.close()
    # At least once: the delivery the dead server never saw answered is sent again, same id.
    assert [status for *_, status in receiver.got] == [0, 200]
    assert len(_check_signed(receiver)) == 1


def _wait_recorded(db: Path, turn_id: str) -> None:
    """Until the journal holds the first attempt's failure (an observable state)."""
    import sqlite3
    import time

    deadline = time.monotonic() + BOUND
    with sqlite3.connect(db) as conn:
        while True:
            row = conn.execute(
                "SELECT attempts FROM webhook_outbox WHERE turn_id = ?", (turn_id,)
            ).fetchone()
            if row is not None and row[0] == 1:
                return
            assert time.monotonic() < deadline, "the failed attempt was never recorded"
            time.sleep(0.02)


def test_a_message_names_its_own_webhook_under_an_allowed_origin(
    fake_llm: FakeLLMServer, tmp_path: Path, receiver: Receiver
) -> None:
    fake_llm.script({"text": "Hello."})
    served = _serve(fake_llm, tmp_path, receiver.url + "/hook")
    try:
        with served.client() as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            for refused in ("http://10.0.0.1/x", "ftp://127.0.0.1/x", "http://u:p@127.0.0.1/"):
                reply = c.post(
                    f"/v1/sessions/{sid}/messages", json={"content": "hi", "webhook": refused}
                )
                assert reply.status_code == 422, refused
                assert reply.json()["error"]["code"] == "webhook_refused"
        _turn(served, webhook=receiver.url + "/mine")
        receiver.wait_for(1)
    finally:
        served.close()
    assert [path for path, *_ in receiver.got] == ["/mine"]


def test_a_queued_message_keeps_its_own_webhook_across_a_restart(
    fake_llm: FakeLLMServer, tmp_path: Path, receiver: Receiver
) -> None:
    """A message queued with its own webhook announces its turn's end there, whichever process
    runs it: here the process that queued it is SIGKILLed, and the restarted one runs both
    queued messages — the one that named a webhook announces there, the other (and the turn
    cut off) at the server's."""
    long = "Working through the request step by step, and this goes on for a while. " * 2
    fake_llm.script(
        {"text": long, "stall_after": 7}, {"text": "second done"}, {"text": "third done"}
    )
    env = clean_env(DROVER_STALL_TIMEOUT="600")
    flags = ("--webhook", receiver.url + "/hook", "--webhook-secret", SECRET)
    first = start_server(fake_llm, tmp_path, *flags, env=env)
    try:
        with first.client() as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            cut = c.post(f"/v1/sessions/{sid}/messages", json={"content": "first"})
            read_events(c, sid, until=lambda ev, _: ev.event == "text_delta")  # stalled
            for content, more in (("second", {"webhook": receiver.url + "/mine"}), ("third", {})):
                body = {"content": content, "if_busy": "enqueue", **more}
                reply = c.post(f"/v1/sessions/{sid}/messages", json=body)
                assert reply.status_code == 202 and reply.json()["queued"] is True, reply.text
        first.stop(signal.SIGKILL)
    finally:
        first.close()
    restarted = start_server(fake_llm, tmp_path, *flags, env=env)
    try:
        receiver.wait_for(3)
        with restarted.client() as c:
            turns = c.get(f"/v1/sessions/{sid}").json()["turns"]
    finally:
        restarted.close()
    assert [t["status"] for t in turns] == ["interrupted", "completed", "completed"]
    assert turns[0]["id"] == cut.json()["turn_id"]
    paths = {str(json.loads(body)["turn_id"]): path for path, _, body, _ in receiver.got}
    assert paths == {turns[0]["id"]: "/hook", turns[1]["id"]: "/mine", turns[2]["id"]: "/hook"}
    _check_signed(receiver)
