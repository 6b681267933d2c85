"""The message queue in the web page, in real headless chromium against a real ``drover serve``:
messages sent while a turn runs are queued and listed (as text, never markup), one is
cancelled from the page, the list survives a reload and matches a page that followed it live,
and when the turn ends the next queued message leaves the list and its turn shows. A ``reset``
(the journal went back) rebuilds the list from the snapshot it carries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from drover.testing.server import FakeLLMServer

from .harness import (
    DroverServe,
    GateProxy,
    assert_page_shows_stored_transcript,
    journal_files,
    restore_journal,
)
from .pagehelp import expect_status, last_text, new_session, send, turn

ANSWER = "The first turn streams this answer slowly, and the test holds it in the middle."
#: A queued message that would run script if it were ever put in the page as HTML.
HOSTILE = '<img src=x onerror="window.__pwned = true"><b>bold?</b>'


def expect_queue(page: Page, texts: list[str]) -> None:
    """The page lists exactly ``texts`` as queued, in order (the list hidden when empty)."""
    expect(page.locator("#queue-list .queued-content")).to_have_text(texts)
    if texts:
        expect(page.locator("#queue")).to_be_visible()
    else:
        expect(page.locator("#queue")).to_be_hidden()


def stored_queue(server: DroverServe, session_id: str) -> list[str]:
    return [q["content"] for q in server.snapshot(session_id)["queued"]]


def test_queue_listed_cancelled_reloaded_then_run(
    page: Page,
    browser: Browser,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    fake_llm.script({"text": ANSWER}, {"text": "The queued message ran."})
    proxy = gate(3)
    server = serve(proxy.base_url)
    session_id = new_session(page, server)
    # A second page that only ever follows the events live (never reloaded).
    live = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    live.goto(f"{server.url}/#/sessions/{session_id}")
    expect(live.locator("#connection")).to_have_attribute("data-state", "live")

    send(page, "start the long turn")
    proxy.wait_held(3)
    expect_status(page, "running")

    # Sent while the turn runs: queued, the prompt cleared, no refusal shown.
    send(page, "never mind this one")
    send(page, HOSTILE)
    expect_queue(page, ["never mind this one", HOSTILE])
    expect(page.locator("#flash")).to_have_text("")
    expect(page.locator("#interrupt")).to_be_enabled()
    expect_queue(live, ["never mind this one", HOSTILE])
    assert stored_queue(server, session_id) == ["never mind this one", HOSTILE]
    # Shown as text: no element made of it, no script run.
    expect(page.locator("#queue img, #queue b")).to_have_count(0)
    assert page.evaluate("window.__pwned") is None

    page.locator("#queue-list .queued", has_text="never mind").get_by_role(
        "button", name="Cancel"
    ).click()
    expect_queue(page, [HOSTILE])
    expect_queue(live, [HOSTILE])  # the cancellation's event reached the other page
    assert stored_queue(server, session_id) == [HOSTILE]

    page.reload()
    expect_queue(page, [HOSTILE])
    expect_status(page, "running")
    expect(page.locator("#queue img, #queue b")).to_have_count(0)

    # The turn ends: the queued message starts, leaves the list, and its turn shows.
    proxy.release(3)
    expect(page.locator("#transcript .turn")).to_have_count(2)
    expect_status(page, "completed", 0)
    expect_status(page, "completed", 1)
    expect(turn(page).locator(".user-message")).to_have_text(HOSTILE)
    expect(last_text(page)).to_have_text("The queued message ran.")
    expect_queue(page, [])
    expect_queue(live, [])
    expect(live.locator("#transcript .turn")).to_have_count(2)
    expect(page.locator("#transcript img, #transcript b")).to_have_count(0)
    assert page.evaluate("window.__pwned") is None
    assert live.evaluate("window.__pwned") is None
    assert stored_queue(server, session_id) == []
    assert_page_shows_stored_transcript(page, server, session_id)
    assert_page_shows_stored_transcript(live, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]
    live.context.close()


def test_reset_rebuilds_the_queue(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
    tmp_path: Path,
) -> None:
    """The server comes back with a journal older than what the page saw (a message queued
    behind a running turn): the stream answers ``reset`` and the page's list is the
    snapshot's, empty."""
    fake_llm.script({"text": "First."}, {"text": ANSWER})
    fake_llm.allow_unexpected = True  # the held reply is cut by the kill
    proxy = gate(3)  # the second reply's second delta ("First." is one)
    server = serve(proxy.base_url)
    session_id = new_session(page, server)
    send(page, "one")
    expect_status(page, "completed")
    server.stop()
    saved = journal_files(tmp_path)

    again = serve(proxy.base_url, port=server.port)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    send(page, "two")
    proxy.wait_held(3)
    send(page, "three, queued")
    expect_queue(page, ["three, queued"])
    again.kill()
    restore_journal(tmp_path, saved)

    restored = serve(proxy.base_url, port=server.port)
    expect(page.locator("#transcript .turn")).to_have_count(1)
    expect_queue(page, [])
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    assert_page_shows_stored_transcript(page, restored, session_id)
    proxy.release(3)
