"""Reloading the page in the middle of a turn shows the true state and goes on live: while
text streams (the gate proxy holds the model's reply mid-text; the model, gated, stops
between any two chunks of a word), while a tool runs (a bash call that waits for a file the
test creates), and while a permission prompt waits. Each ends with the page showing exactly
the transcript the server stores."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from playwright.sync_api import Page, expect

from drover.testing.server import FakeLLMServer

from ..support import BOUND, TERMINAL, Sse, model_texts, read_events
from .harness import (
    DroverServe,
    GateProxy,
    assert_page_shows_stored_transcript,
    durable_text,
    journal_files,
    restore_journal,
)
from .pagehelp import card, expect_status, last_text, new_session, send

ANSWER = (
    "The lighthouse keeper climbs the stairs every evening, trims the wick, "
    "polishes the lens and writes the weather in the log before the ships come in."
)
CHUNK = 8  # the fake server's default chunk of streamed text


def test_reload_while_text_streams(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    fake_llm.script({"text": ANSWER})
    proxy = gate(5, 10)
    server = serve(proxy.base_url)
    session_id = new_session(page, server)
    send(page, "tell me about the keeper")
    proxy.wait_held(5)
    streamed = ANSWER[: 5 * CHUNK]
    expect(last_text(page)).to_have_text(streamed)
    expect_status(page, "running")
    # Once the journal holds the text, the reloaded page gets it from the snapshot (not from
    # a replay of the deltas), and the live deltas after it must extend that block.
    durable_text(server, session_id, streamed)

    page.reload()
    # The reloaded page rebuilds the half-streamed text from the snapshot and the replay.
    expect(last_text(page)).to_have_text(streamed)
    expect_status(page, "running")
    expect(last_text(page)).to_have_attribute("data-partial", "true")
    expect(page.locator("#interrupt")).to_be_enabled()

    # Live deltas continue the text the snapshot brought, in the same block.
    proxy.release(5)
    proxy.wait_held(10)
    expect(last_text(page)).to_have_text(ANSWER[: 10 * CHUNK])
    expect(page.locator("#transcript .block.text")).to_have_count(1)

    proxy.release(10)
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text(ANSWER)
    expect(last_text(page)).to_have_attribute("data-partial", "false")
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


#: Words the fake model's 8-character chunks cut anywhere (the issue's "sentence sentence").
WORDS = (
    "seven eight nine ten, a sentence sentence sentence about the keeper, then eleven "
    "twelve thirteen words more and the sentence sentence ends here"
)
#: After how many of its text chunks the page is reloaded.
RELOADS = (3, 5, 8, 12, 17)


class Published:
    """The numbers of the session's text deltas as the server publishes them (a client that
    follows the session's events, in a thread of its own)."""

    def __init__(self, server: DroverServe, session_id: str) -> None:
        self.ids: list[int] = []
        self._seen = threading.Condition()
        self._thread = threading.Thread(
            target=self._follow, args=(server.url, session_id), daemon=True
        )
        self._thread.start()

    def _follow(self, url: str, session_id: str) -> None:
        with httpx2.Client(base_url=url, timeout=BOUND) as client:
            read_events(client, session_id, after=0, until=self._see)

    def _see(self, ev: Sse, got: list[Sse]) -> bool:
        if ev.event == "text_delta":
            with self._seen:
                self.ids.append(ev.id or 0)
                self._seen.notify_all()
        return ev.event in TERMINAL

    def wait(self, count: int) -> list[int]:
        with self._seen:
            assert self._seen.wait_for(lambda: len(self.ids) >= count, BOUND)
            return list(self.ids)

    def close(self) -> None:
        self._thread.join(BOUND)


def flushed_to(server: DroverServe, session_id: str, seq: int) -> None:
    """Wait until the journal has written the running answer's text to event ``seq``."""
    deadline = time.monotonic() + BOUND
    while int(server.snapshot(session_id)["last_event_id"]) < seq:
        assert time.monotonic() < deadline, f"the journal never wrote event {seq}"
        time.sleep(0.05)  # the journal flushes on its 250 ms timer: look again


def test_reloads_mid_answer_show_every_word_whole(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    """The page reloaded at chosen moments of an answer (the model gated, the journal's text
    written up to the word in progress) shows the text the model sent so far, each word whole,
    and goes on live to the answer."""
    fake_llm.script({"text": WORDS, "gate": True})
    server = serve(fake_llm.base_url)
    session_id = new_session(page, server)
    send(page, "tell me about the keeper")
    published = Published(server, session_id)
    texts = model_texts(fake_llm)
    fed, chunks = "", 0
    for reload_at in RELOADS:
        while chunks < reload_at:
            piece = next(texts)
            fed += piece
            chunks += bool(piece)
        expect(last_text(page)).to_have_text(fed)
        # The word in progress spans at most the last two chunks: the journal has written
        # the text before it (its timer) — a row may end anywhere near the word it holds back.
        flushed_to(server, session_id, published.wait(chunks)[-3])
        page.reload()
        expect(last_text(page)).to_have_text(fed)
        expect(page.locator("#transcript .block.text")).to_have_count(1)
        expect_status(page, "running")
    for piece in texts:
        fed += piece
    assert fed == WORDS
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text(WORDS)
    published.close()
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


def test_reload_while_a_tool_runs(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "Waiting for the go flag.",
            "tool_calls": [
                {
                    "name": "bash",
                    "input": {
                        "command": "while [ ! -e go.flag ]; do sleep 0.05; done; echo released"
                    },
                }
            ],
        },
        {"text": "The flag appeared."},
    )
    server = serve(fake_llm.base_url, permission_mode="allow")
    session_id = new_session(page, server)
    send(page, "wait for go.flag")
    expect(card(page, "bash")).to_have_attribute("data-state", "running")

    page.reload()
    bash = card(page, "bash")
    expect(bash).to_have_attribute("data-state", "running")
    expect(bash.locator(".tool-input")).to_contain_text("go.flag")
    expect(bash.locator(".tool-output")).to_be_hidden()
    expect_status(page, "running")

    (tmp_path / "work" / "go.flag").touch()
    expect(bash).to_have_attribute("data-state", "output-available")
    expect(bash.locator(".tool-output")).to_have_text("released\n")
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("The flag appeared.")
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


def _reload_while_tool_input_streams(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
    *,
    check_text: bool,
) -> None:
    fake_llm.script(
        {"text": "Let me look.", "tool_calls": [{"name": "read_file", "input": {"path": "nope"}}]},
        {"text": "It is not there."},
    )
    proxy = gate(2, marker=b"input_json_delta")  # the first fragment is empty
    server = serve(proxy.base_url)
    session_id = new_session(page, server)
    send(page, "look for it")
    proxy.wait_held(2)
    read = card(page, "read_file")
    expect(read).to_have_attribute("data-state", "input-streaming")
    expect(last_text(page)).to_have_text("Let me look.")

    page.reload()
    expect(read).to_have_attribute("data-state", "input-streaming")
    expect_status(page, "running")
    if check_text:
        expect(last_text(page)).to_have_text("Let me look.", timeout=5000)

    proxy.release(2)
    expect(read).to_have_attribute("data-state", "output-error")
    expect(read).to_have_class(re.compile(r"\berror\b"))
    expect(read.locator(".tool-input")).to_contain_text('"path": "nope"')
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("It is not there.")
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


def test_reload_while_tool_input_streams(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    _reload_while_tool_input_streams(page, fake_llm, gate, serve, check_text=False)


def test_reload_while_tool_input_streams_shows_the_text_before_it(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    _reload_while_tool_input_streams(page, fake_llm, gate, serve, check_text=True)


def test_reload_while_a_permission_prompt_waits(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "I need to run a command.",
            "tool_calls": [{"name": "bash", "input": {"command": "echo approved > ok.txt"}}],
        },
        {"text": "It ran."},
    )
    server = serve(fake_llm.base_url, permission_mode="ask")
    session_id = new_session(page, server)
    send(page, "run it")
    expect(card(page, "bash")).to_have_attribute("data-state", "awaiting-permission")

    page.reload()
    bash = card(page, "bash")
    expect(bash).to_have_attribute("data-state", "awaiting-permission")
    expect(bash.locator(".permission")).to_contain_text("echo approved")
    expect_status(page, "running")

    bash.get_by_role("button", name="Always allow").click()
    expect(bash).to_have_attribute("data-state", "output-available")
    expect(bash.locator(".permission")).to_be_hidden()
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("It ran.")
    assert (tmp_path / "work" / "ok.txt").read_text() == "approved\n"
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


def test_server_killed_mid_turn_then_restarted(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    """The page rides out a crash of the server: it reconnects to the restarted process and
    shows the turn as recovery recorded it (interrupted, its streamed text kept), then the
    continuation the restarted server resumes it with (its takeover policy)."""
    fake_llm.script({"text": ANSWER}, {"text": "Carried on after the restart."})
    proxy = gate(5)
    server = serve(proxy.base_url)
    session_id = new_session(page, server)
    send(page, "tell me about the keeper")
    proxy.wait_held(5)
    streamed = ANSWER[: 5 * CHUNK]
    expect(last_text(page)).to_have_text(streamed)
    durable_text(server, session_id, streamed)

    server.kill()
    expect(page.locator("#connection")).not_to_have_attribute("data-state", "live")
    restarted = serve(proxy.base_url, port=server.port)
    expect_status(page, "interrupted", 0)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(page.locator("#transcript .turn").first.locator(".block.text")).to_have_text(streamed)
    expect_status(page, "completed", 1)
    expect(last_text(page)).to_have_text("Carried on after the restart.")
    assert_page_shows_stored_transcript(page, restarted, session_id)
    proxy.release(5)


def test_reset_when_the_journal_lost_what_the_page_saw(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    """The server comes back with an older journal than the events the page applied: the
    stream answers with ``reset`` and the page replaces its view with the surviving one."""
    fake_llm.script({"text": "First answer."}, {"text": "Second answer."})
    server = serve(fake_llm.base_url)
    session_id = new_session(page, server)
    send(page, "one")
    expect_status(page, "completed")
    server.stop()
    saved = journal_files(tmp_path)

    again = serve(fake_llm.base_url, port=server.port)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    send(page, "two")
    expect(last_text(page)).to_have_text("Second answer.")
    expect(page.locator("#transcript .turn")).to_have_count(2)
    again.stop()
    restore_journal(tmp_path, saved)

    restored = serve(fake_llm.base_url, port=server.port)
    expect(page.locator("#transcript .turn")).to_have_count(1)
    expect(last_text(page)).to_have_text("First answer.")
    assert_page_shows_stored_transcript(page, restored, session_id)
