"""The page's session list in real chromium: searching it, renaming and deleting a session
from it (through ``PATCH``/``DELETE /v1/sessions/{id}``), the running marker and the token
counts kept across a reload mid-turn, and a turn's pending note gone once the next turn took
its work along."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Dialog, Page, expect

from drover.testing.server import FakeLLMServer

from .harness import ApiError, DroverServe, assert_page_shows_stored_transcript
from .pagehelp import card, expect_status, last_text, new_session, send, turn

WAIT_FOR_FLAG = {
    "text": "Waiting for the flag.",
    "tool_calls": [
        {
            "name": "bash",
            "input": {"command": "while [ ! -e go.flag ]; do sleep 0.05; done; echo released"},
        }
    ],
}
SO_FAR = re.compile(r"^\d+ in · \d+ out tokens \(so far\)$")


def _three_sessions(page: Page, fake_llm: FakeLLMServer, server: DroverServe) -> list[str]:
    fake_llm.script({"text": "Alpha answer."}, {"text": "Beta answer."}, {"text": "Gamma."})
    ids = []
    for word in ("alpha", "beta", "gamma"):
        if ids:
            page.click("#new-session")
            expect(page.locator("#transcript .turn")).to_have_count(0)
        else:
            new_session(page, server)
        ids.append(page.evaluate("decodeURIComponent(location.hash.split('/').pop())"))
        send(page, f"{word} question")
        expect_status(page, "completed")
    expect(page.locator("#sessions li")).to_have_count(3)
    return ids


def test_search_filters_the_list_by_title_or_id(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    server = serve(fake_llm.base_url)
    alpha, beta, gamma = _three_sessions(page, fake_llm, server)
    items = page.locator("#sessions li")
    search = page.locator("#session-search")
    search.fill("BETA")
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-session-id", beta)
    search.fill(gamma[:10])
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-session-id", gamma)
    search.fill("question")
    expect(items).to_have_count(3)
    search.fill("no such words")
    expect(items).to_have_count(0)
    expect(page.locator("#sessions-empty")).to_be_visible()
    # The filter holds while the list is redrawn (a turn ending refreshes it).
    fake_llm.script({"text": "Delta."})
    send(page, "one more")
    expect_status(page, "completed", 1)
    expect(items).to_have_count(0)
    search.fill("")
    expect(items).to_have_count(3)
    expect(page.locator("#sessions-empty")).to_be_hidden()
    assert alpha not in (beta, gamma)
    assert not page.script_errors  # type: ignore[attr-defined]


def test_rename_in_place_and_delete_after_a_confirmation(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    server = serve(fake_llm.base_url)
    alpha, beta, gamma = _three_sessions(page, fake_llm, server)

    # Rename the open session: the list, the header and the server all have the new title.
    current = page.locator("#sessions li.current")
    expect(current).to_have_attribute("data-session-id", gamma)
    current.locator(".session-rename").click()
    field = current.locator(".rename-input")
    expect(field).to_be_focused()
    expect(field).to_have_value("gamma question")
    field.fill("Gamma, renamed")
    field.press("Enter")
    expect(current.locator(".session-link")).to_have_text("Gamma, renamed")
    expect(page.locator("#session-title")).to_have_text("Gamma, renamed")
    assert server.snapshot(gamma)["title"] == "Gamma, renamed"
    # Escape leaves a rename without sending it.
    other = page.locator(f'#sessions li[data-session-id="{alpha}"]')
    other.locator(".session-rename").click()
    other.locator(".rename-input").fill("never sent")
    other.locator(".rename-input").press("Escape")
    expect(other.locator(".session-link")).to_have_text("alpha question")
    assert server.snapshot(alpha)["title"] == "alpha question"

    # Delete another session: nothing happens until the question is answered yes.
    asked: list[str] = []

    def answer(yes: bool) -> Callable[[Dialog], None]:
        def handle(dialog: Dialog) -> None:
            asked.append(dialog.message)
            if yes:
                dialog.accept()
            else:
                dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    page.locator(f'#sessions li[data-session-id="{beta}"] .session-delete').click()
    expect(page.locator("#sessions li")).to_have_count(3)
    assert asked == ["Delete “beta question”? Its whole transcript is deleted for good."]
    page.once("dialog", answer(True))
    page.locator(f'#sessions li[data-session-id="{beta}"] .session-delete').click()
    expect(page.locator("#sessions li")).to_have_count(2)
    with pytest.raises(ApiError) as gone:
        server.snapshot(beta)
    assert gone.value.status == 404
    expect(page.locator("#sessions li.current")).to_have_attribute("data-session-id", gamma)

    # Deleting the open session leaves the page on no session.
    page.once("dialog", answer(True))
    page.locator("#sessions li.current .session-delete").click()
    expect(page.locator("#sessions li")).to_have_count(1)
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#composer")).to_be_hidden()
    assert page.evaluate("location.hash") == "#/"
    assert [s["id"] for s in server.request("GET", "/v1/sessions")["sessions"]] == [alpha]
    assert not page.script_errors  # type: ignore[attr-defined]


def test_a_session_whose_turn_runs_is_not_deleted(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(WAIT_FOR_FLAG, {"text": "The flag appeared."})
    server = serve(fake_llm.base_url, permission_mode="allow")
    session_id = new_session(page, server)
    send(page, "wait for go.flag")
    expect(card(page, "bash")).to_have_attribute("data-state", "running")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#sessions li.current .session-delete").click()
    expect(page.locator("#flash")).to_contain_text("a turn is running on that session")
    expect(page.locator("#sessions li")).to_have_count(1)
    (tmp_path / "work" / "go.flag").touch()
    expect_status(page, "completed")
    assert server.snapshot(session_id)["turns"][0]["status"] == "completed"


def test_reload_mid_turn_keeps_the_running_marker_and_the_token_counts(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script({"text": "Earlier answer."}, WAIT_FOR_FLAG, {"text": "The flag appeared."})
    server = serve(fake_llm.base_url, permission_mode="allow")
    session_id = new_session(page, server)
    send(page, "first")
    expect_status(page, "completed")
    earlier = turn(page, 0).locator(".turn-usage").inner_text()
    send(page, "wait for go.flag")
    expect(card(page, "bash")).to_have_attribute("data-state", "running")
    current = page.locator("#sessions li.current")
    expect(current).to_have_class(re.compile(r"\brunning\b"))
    usage = turn(page).locator(".turn-usage")
    expect(usage).to_have_text(SO_FAR)
    shown = usage.inner_text()
    header = page.locator("#session-usage").inner_text()
    assert header.startswith("session: ") and header != f"session: {earlier}"

    page.reload()
    expect(card(page, "bash")).to_have_attribute("data-state", "running")
    expect(current).to_have_attribute("data-session-id", session_id)
    expect(current).to_have_class(re.compile(r"\brunning\b"))
    expect(current.locator(".session-meta")).to_contain_text("running · ")
    expect(usage).to_have_text(shown)
    expect(page.locator("#session-usage")).to_have_text(header)

    (tmp_path / "work" / "go.flag").touch()
    expect_status(page, "completed")
    expect(current).not_to_have_class(re.compile(r"\brunning\b"))
    expect(usage).to_have_text(re.compile(r"^\d+ in · \d+ out tokens$"))
    expect(last_text(page)).to_have_text("The flag appeared.")
    assert_page_shows_stored_transcript(page, server, session_id)
    assert not page.script_errors  # type: ignore[attr-defined]


def test_the_pending_note_goes_once_the_next_turn_takes_the_work(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": "Waiting for the flag.", "tool_calls": WAIT_FOR_FLAG["tool_calls"]},
        WAIT_FOR_FLAG,
        {"text": "Both flags seen."},
    )
    server = serve(fake_llm.base_url, permission_mode="allow")
    session_id = new_session(page, server)
    send(page, "wait")
    expect(card(page, "bash")).to_have_attribute("data-state", "running")
    page.click("#interrupt")
    expect_status(page, "interrupted")
    note = turn(page, 0).locator(".turn-pending")
    expect(note).to_contain_text("the next message resumes it")

    send(page, "go on")  # resumes the interrupted turn's work: its note goes at once
    expect(page.locator("#transcript .turn")).to_have_count(2)
    expect(card(page, "bash").last).to_have_attribute("data-state", "running")
    expect(note).to_have_count(0)
    page.click("#interrupt")
    expect_status(page, "interrupted", 1)
    # Both turns' work waits for the next message now: each says so.
    expect(note).to_have_count(1)
    expect(turn(page, 1).locator(".turn-pending")).to_have_count(1)

    (tmp_path / "work" / "go.flag").touch()
    send(page, "finish")
    expect_status(page, "completed", 2)
    expect(page.locator(".turn-pending")).to_have_count(0)
    page.reload()
    expect_status(page, "completed", 2)
    expect(page.locator("#transcript .turn")).to_have_count(3)
    expect(page.locator(".turn-pending")).to_have_count(0)
    assert_page_shows_stored_transcript(page, server, session_id)


def test_a_rewind_marks_the_turns_live_and_after_a_reload(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    """A rewind made elsewhere (the API, another client) greys the turns it undid in an open
    page at once, from the ``turns_rewound`` event, as a reload shows them from the snapshot."""
    fake_llm.script({"text": "First answer."}, {"text": "Second answer."}, {"text": "Third."})
    server = serve(fake_llm.base_url)
    sid = new_session(page, server)
    for n, word in enumerate(("first", "second", "third")):
        send(page, f"{word} question")
        expect_status(page, "completed", n)
    turns = server.snapshot(sid)["turns"]
    server.request("POST", f"/v1/sessions/{sid}/rewind", {"turn_id": turns[1]["id"]})
    marked = page.locator('#transcript .turn[data-rewound="true"]')
    expect(marked).to_have_count(2)
    expect(turn(page, 0)).to_have_attribute("data-rewound", "false")
    expect(turn(page, 2).locator(".status-rewound")).to_have_text("rewound")
    page.reload()
    expect(page.locator("#transcript .turn")).to_have_count(3)
    expect(marked).to_have_count(2)
    expect(turn(page, 0)).to_have_attribute("data-rewound", "false")
    assert not page.script_errors  # type: ignore[attr-defined]
