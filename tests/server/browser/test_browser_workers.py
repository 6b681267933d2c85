"""The ``task`` tool's workers in the web page: each worker shows under its task call, live and
after a reload, with its own tool calls as cards — a worker's permission question answered there —
and never as calls of the parent's step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from drover.testing.server import FakeLLMServer

from .harness import DroverServe, assert_page_shows_stored_transcript
from .pagehelp import card, expect_status, last_text, new_session, send


def test_a_workers_calls_show_under_its_task_call_live_and_after_a_reload(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    write = {"path": "w.txt", "content": "from a worker"}
    task = {"description": "write w", "prompt": "Write w.txt, then say so."}
    # One worker: the fake server sees the parent's and the worker's requests in a fixed order.
    fake_llm.script(
        {"tool_calls": [{"name": "task", "input": task}]},
        {"tool_calls": [{"name": "write_file", "input": write}]},
        {"text": "Wrote **w.txt**."},
        {"text": "The worker wrote w.txt."},
    )
    server = serve(fake_llm.base_url, permission_mode="ask")
    session_id = new_session(page, server)
    send(page, "use a worker")

    parent = card(page, "task")
    expect(parent).to_have_attribute("data-state", "awaiting-permission")
    parent.get_by_role("button", name="Allow", exact=True).first.click()
    worker = parent.locator(".worker[data-worker='0']")
    expect(worker.locator(".worker-prompt")).to_have_text("Write w.txt, then say so.")
    inner = worker.locator(".tool-card")
    expect(inner).to_have_attribute("data-state", "awaiting-permission")
    expect(inner.locator(".tool-name")).to_have_text("write_file")
    inner.get_by_role("button", name="Allow", exact=True).click()
    expect(inner).to_have_attribute("data-state", "output-available")
    expect(worker).to_have_attribute("data-status", "completed")
    expect(worker.locator(".worker-text")).to_have_text("Wrote w.txt.")  # Markdown rendered
    expect_status(page, "completed")
    expect(last_text(page)).to_have_text("The worker wrote w.txt.")
    assert (tmp_path / "work" / "w.txt").read_text() == "from a worker"
    # Only the task call is a call of the parent's step; the page matches the journal.
    expect(page.locator("#transcript .step > .tool-card")).to_have_count(1)
    assert_page_shows_stored_transcript(page, server, session_id)

    page.reload()
    inner = card(page, "task").locator(".worker[data-worker='0'] .tool-card")
    expect(inner).to_have_attribute("data-state", "output-available")
    expect(inner.locator(".tool-output")).to_contain_text("w.txt")
    expect(page.locator("#transcript .step > .tool-card")).to_have_count(1)
    assert_page_shows_stored_transcript(page, server, session_id)
