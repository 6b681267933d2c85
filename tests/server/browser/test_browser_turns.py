"""The web page in real headless chromium against a real ``drover serve``: a tool-using turn
with permission prompts answered in the page, the interrupt button, Markdown, an incomplete
turn's pending work, the session list and the access token."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from drover.testing.server import FakeLLMServer

from .harness import DroverServe, GateProxy, assert_page_shows_stored_transcript
from .pagehelp import card, expect_status, last_text, new_session, send, turn


def test_tool_turn_with_permission_prompts_answered_in_the_page(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "I will write the note and run the command.",
            "tool_calls": [
                {"name": "write_file", "input": {"path": "note.txt", "content": "from the page"}},
                {"name": "bash", "input": {"command": "echo ran > ran.txt"}},
            ],
        },
        {"text": "Wrote note.txt; the command was denied."},
    )
    server = serve(fake_llm.base_url, permission_mode="ask")
    session_id = new_session(page, server)
    send(page, "write a note")

    write, bash = card(page, "write_file"), card(page, "bash")
    expect(write).to_have_attribute("data-state", "awaiting-permission")
    expect(bash).to_have_attribute("data-state", "awaiting-permission")
    expect(write.locator(".permission")).to_contain_text("note.txt")
    expect_status(page, "running")
    expect(page.locator("#interrupt")).to_be_enabled()

    write.get_by_role("button", name="Allow", exact=True).click()
    expect(write).to_have_attribute("data-state", "output-available")
    expect(write.locator(".permission")).to_be_hidden()
    bash.get_by_role("button", name="Deny").click()
    expect(bash).to_have_attribute("data-state", "denied")

    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("Wrote note.txt; the command was denied.")
    usage = turn(page).locator(".turn-usage")
    expect(usage).to_have_text(re.compile(r"^\d+ in · \d+ out tokens$"))
    shown_usage = usage.inner_text()
    expect(page.locator("#interrupt")).to_be_disabled()
    assert (tmp_path / "work" / "note.txt").read_text() == "from the page"
    assert not (tmp_path / "work" / "ran.txt").exists()
    assert_page_shows_stored_transcript(page, server, session_id)
    # The figures come back from the snapshot after a reload.
    page.reload()
    expect(usage).to_have_text(shown_usage)
    expect(page.locator("#session-usage")).to_have_text(f"session: {shown_usage}")
    assert not page.script_errors  # type: ignore[attr-defined]


def test_interrupt_button_stops_a_running_tool(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "Waiting for the flag.",
            "tool_calls": [
                {
                    "name": "bash",
                    "input": {"command": "while [ ! -e never.flag ]; do sleep 0.05; done"},
                }
            ],
        }
    )
    server = serve(fake_llm.base_url, permission_mode="allow")
    session_id = new_session(page, server)
    send(page, "wait for the flag")
    bash = card(page, "bash")
    expect(bash).to_have_attribute("data-state", "running")
    expect(bash.locator(".outcome-unknown")).to_be_hidden()

    page.click("#interrupt")
    expect(bash).to_have_attribute("data-state", "interrupted")
    expect(bash.locator(".outcome-unknown")).to_be_visible()
    expect_status(page, "interrupted")
    footer = turn(page).locator(".turn-footer")
    expect(footer).to_contain_text("pending: 1 assistant message, 1 tool result")
    expect(page.locator("#interrupt")).to_be_disabled()
    assert_page_shows_stored_transcript(page, server, session_id)
    assert len(fake_llm.requests) == 1


MARKDOWN = """## Plan

Use **bold**, *italics* and `code <b>` here.

- first item
- second [link](https://example.com/docs)

```python
print("<hello>")
```

<script>window.pwned = true</script><img src=x onerror="window.pwned = true">
[bad](javascript:alert(1))"""


def test_markdown_is_rendered_as_it_streams_and_raw_html_is_not(
    page: Page,
    fake_llm: FakeLLMServer,
    gate: Callable[..., GateProxy],
    serve: Callable[..., DroverServe],
) -> None:
    fake_llm.script({"text": MARKDOWN})
    proxy = gate(3)  # 3 chunks of 8 characters: "## Plan\n\nUse **bold**, *"
    server = serve(proxy.base_url)
    new_session(page, server)
    send(page, "show markdown")
    proxy.wait_held(3)
    body = last_text(page)
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("h2")).to_have_text("Plan")
    expect_status(page, "running")
    proxy.release(3)

    expect_status(page, "completed")
    expect(body.locator("h2")).to_have_text("Plan")
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("em")).to_have_text("italics")
    expect(body.locator("p code")).to_have_text("code <b>")
    expect(body.locator("li")).to_have_count(2)
    link = body.locator("a")
    expect(link).to_have_count(1)
    expect(link).to_have_attribute("href", "https://example.com/docs")
    expect(body.locator("pre code")).to_have_text('print("<hello>")')
    # The model's HTML is shown as text, never run or parsed into elements.
    expect(body.locator("script, img, b")).to_have_count(0)
    expect(body).to_contain_text("<script>window.pwned = true</script><img src=x onerror=")
    assert page.evaluate("window.pwned") is None


def test_incomplete_turn_shows_its_pending_work_and_resumes(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("alpha")
    broken = {"text": "The file says alpha and", "error_after": 4, "error": {"type": "api_error"}}
    fake_llm.script(
        {"text": "Reading it.", "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        broken,
        broken,
        broken,
        {"text": "The file says alpha."},
    )
    server = serve(fake_llm.base_url)
    session_id = new_session(page, server)
    send(page, "read a.txt")
    expect_status(page, "incomplete")
    footer = turn(page).locator(".turn-footer")
    expect(footer).to_contain_text("incomplete")
    expect(footer).to_contain_text("pending: 2 assistant messages (1 partial), 1 tool result")
    expect(card(page, "read_file")).to_have_attribute("data-state", "output-available")
    assert_page_shows_stored_transcript(page, server, session_id)

    send(page, "go on")
    expect(page.locator("#transcript .turn")).to_have_count(2)
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("The file says alpha.")
    assert_page_shows_stored_transcript(page, server, session_id)


def test_session_list_switches_between_sessions(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    fake_llm.script({"text": "Answer one."}, {"text": "Answer two."})
    server = serve(fake_llm.base_url)
    first = new_session(page, server)
    send(page, "first question")
    expect_status(page, "completed")
    page.click("#new-session")
    expect(page.locator("#transcript .turn")).to_have_count(0)
    send(page, "second question")
    expect(last_text(page)).to_have_text("Answer two.")

    sessions = page.locator("#sessions li")
    expect(sessions).to_have_count(2)
    page.locator("#sessions li", has_text="first question").locator("a").click()
    expect(page.locator("#sessions li.current")).to_have_attribute("data-session-id", first)
    expect(page.locator("#transcript .turn")).to_have_count(1)
    expect(last_text(page)).to_have_text("Answer one.")


def test_token_is_asked_once_and_used_for_the_event_stream(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    fake_llm.script({"text": "Authorised answer."})
    server = serve(fake_llm.base_url, token="s3cret-token")
    page.goto(server.url + "/")
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    page.fill("#token-input", "wrong")
    page.click("#token-submit")
    expect(page.locator("#token-error")).to_contain_text("refused")
    page.fill("#token-input", "s3cret-token")
    page.click("#token-submit")
    expect(dialog).to_be_hidden()
    page.click("#new-session")
    expect(page.locator("#composer")).to_be_visible()
    send(page, "hello")
    # The event stream takes the token as ?token= (EventSource cannot send headers).
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(last_text(page)).to_have_text("Authorised answer.")
    expect_status(page, "completed")
    page.reload()
    expect(last_text(page)).to_have_text("Authorised answer.")
    expect(dialog).to_be_hidden()


def test_failed_turn_shows_why_and_survives_a_reload(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    fake_llm.script(
        {"http_error": {"status": 400, "type": "invalid_request_error", "message": "bad prompt"}}
    )
    server = serve(fake_llm.base_url)
    session_id = new_session(page, server)
    send(page, "this will fail")
    expect_status(page, "failed")
    footer = turn(page).locator(".turn-footer")
    expect(footer.locator(".turn-error")).to_contain_text("bad prompt")
    expect(footer.locator(".turn-pending")).to_have_count(0)
    assert_page_shows_stored_transcript(page, server, session_id)
    page.reload()
    expect_status(page, "failed")
    expect(footer.locator(".turn-error")).to_contain_text("bad prompt")
