"""How the page looks, in real chromium: a phone-sized screen (390 px: one column, the
sessions in a drawer), dark mode following the system's setting, file edits shown as diffs,
and Markdown tables. A failing test keeps a screenshot (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from drover.testing.server import FakeLLMServer

from .harness import DroverServe
from .pagehelp import card, expect_status, last_text, new_session, send

PHONE = {"width": 390, "height": 844}
LONG_LINE = "x" * 300
TABLE = (
    "| file | lines | note |\n|:-----|------:|:----:|\n| a.py | 12 | ok |\n"
    f"| b.py | 7 | `{LONG_LINE[:40]}` |\n\nhttps://example.com/{LONG_LINE}"
)


def _overflow(page: Page) -> int:
    """How far the page is wider than the screen (0: no sideways scrolling)."""
    width: int = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    return width


def _box(page: Page, selector: str) -> dict[str, float]:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return dict(box)


def test_a_phone_screen_gets_one_column_and_a_sessions_drawer(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    fake_llm.script({"text": "First."}, {"text": TABLE})
    server = serve(fake_llm.base_url)
    page.set_viewport_size(PHONE)
    first = new_session(page, server)
    send(page, "one")
    expect_status(page, "completed")

    # The sessions stay out of the way; the message box has the width.
    expect(page.locator("#sidebar")).to_be_hidden()
    page.locator("#sidebar-toggle").click()
    expect(page.locator("#sidebar")).to_be_visible()
    expect(page.locator("#sidebar-toggle")).to_have_attribute("aria-expanded", "true")
    page.click("#new-session")
    expect(page.locator("#sidebar")).to_be_hidden()
    expect(page.locator("#composer")).to_be_visible()
    assert _box(page, "#prompt")["width"] >= 250, _box(page, "#prompt")
    assert _box(page, "#send")["x"] + _box(page, "#send")["width"] <= PHONE["width"]
    send(page, "show the table")
    table = last_text(page).locator("table")
    expect(table.locator("tbody tr")).to_have_count(2)
    # A wide table and an unbroken line scroll inside their blocks, not the page.
    assert _overflow(page) == 0, page.evaluate("document.documentElement.scrollWidth")
    assert _box(page, "#transcript")["width"] <= PHONE["width"]

    # The drawer: over the page, closed by the scrim, Escape, or picking a session.
    toggle = page.locator("#sidebar-toggle")
    toggle.click()
    expect(page.locator("#sidebar")).to_have_css("transform", "none")  # slid all the way in
    drawer = _box(page, "#sidebar")
    assert drawer["x"] == 0 and drawer["width"] <= PHONE["width"] * 0.9, drawer
    expect(page.locator("#sessions li")).to_have_count(2)
    page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)  # the scrim, beside it
    expect(page.locator("#sidebar")).to_be_hidden()
    toggle.click()
    expect(page.locator("#sidebar")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#sidebar")).to_be_hidden()
    toggle.click()
    page.locator(f'#sessions li[data-session-id="{first}"] .session-link').click()
    expect(page.locator("#sidebar")).to_be_hidden()
    expect(last_text(page)).to_have_text("First.")
    assert _overflow(page) == 0

    # A wide screen shows both columns and no drawer button.
    page.set_viewport_size({"width": 1200, "height": 900})
    expect(page.locator("#sidebar")).to_be_visible()
    expect(toggle).to_be_hidden()
    assert _box(page, "#sidebar")["width"] == 260
    assert not page.script_errors  # type: ignore[attr-defined]


def _luminance(page: Page, selector: str, prop: str) -> float:
    """The relative luminance (0 black … 1 white) of a computed colour."""
    rgb: list[float] = page.evaluate(
        """([selector, prop]) => getComputedStyle(document.querySelector(selector))[prop]
             .match(/[\\d.]+/g).slice(0, 3).map(Number)""",
        [selector, prop],
    )

    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_dark_mode_follows_the_system_setting(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe]
) -> None:
    fake_llm.script(
        {"text": "Writing.", "tool_calls": [{"name": "write_file", "input": WRITE_INPUT}]},
        {"text": "Some `code` here."},
    )
    server = serve(fake_llm.base_url, permission_mode="allow")
    new_session(page, server)
    send(page, "write it")
    expect_status(page, "completed")
    surfaces = [
        ("html", "backgroundColor"),
        ("#sidebar", "backgroundColor"),
        (".user-message", "backgroundColor"),
        (".tool-card", "backgroundColor"),
        ("#prompt", "backgroundColor"),
        ("#send", "backgroundColor"),
        (".markdown code", "backgroundColor"),
    ]
    light = {s: _luminance(page, *s) for s in surfaces}
    assert all(v > 0.6 for v in light.values()), light
    assert _luminance(page, "body", "color") < 0.1

    page.emulate_media(color_scheme="dark")  # the system switches: no reload needed
    dark: dict[Any, float] = {s: _luminance(page, *s) for s in surfaces}
    assert all(v < 0.1 for v in dark.values()), dark
    for text in ("body", ".block.text", "#prompt", ".diff-add"):
        assert _luminance(page, text, "color") > 0.4, text
    page.reload()
    expect(last_text(page)).to_have_text("Some code here.")
    assert _luminance(page, "html", "backgroundColor") < 0.1
    assert not page.script_errors  # type: ignore[attr-defined]


WRITE_INPUT = {"path": "notes/new.txt", "content": "first line\nsecond line\n"}


def test_file_edits_show_as_diffs(
    page: Page, fake_llm: FakeLLMServer, serve: Callable[..., DroverServe], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("import os\n\ndef main():\n    return 1\n\nmain()\n")
    edit = {
        "path": "app.py",
        "old_string": "def main():\n    return 1\n",
        "new_string": "def main():\n    print('hi')\n    return 2\n",
    }
    fake_llm.script(
        {
            "text": "Editing.",
            "tool_calls": [
                {"name": "edit_file", "input": edit},
                {"name": "write_file", "input": WRITE_INPUT},
            ],
        },
        {"text": "Done."},
    )
    server = serve(fake_llm.base_url, permission_mode="ask")
    new_session(page, server)
    send(page, "edit it")

    # The question is asked with the diff in front of it, as in the REPL.
    edit_card, write_card = card(page, "edit_file"), card(page, "write_file")
    expect(edit_card).to_have_attribute("data-state", "awaiting-permission")
    diff = edit_card.locator(".tool-diff")
    expect(diff.locator(".diff-file")).to_have_text("app.py  −1 +2")
    expect(diff.locator(".diff-line")).to_have_text(
        ["  def main():", "-     return 1", "+     print('hi')", "+     return 2"]
    )
    expect(diff.locator(".diff-del")).to_have_count(1)
    expect(diff.locator(".diff-add")).to_have_count(2)
    expect(edit_card.locator(".tool-input")).to_be_hidden()
    written = write_card.locator(".tool-diff")
    expect(written.locator(".diff-file")).to_have_text("notes/new.txt  (writes 2 lines)")
    expect(written.locator(".diff-add")).to_have_text(["+ first line", "+ second line"])
    # The model's text is shown as text, whatever it holds.
    assert (
        page.evaluate("document.querySelectorAll('.tool-diff *:not(div, pre, span)').length") == 0
    )

    edit_card.get_by_role("button", name="Allow", exact=True).click()
    write_card.get_by_role("button", name="Allow", exact=True).click()
    expect_status(page, "completed")
    assert "print('hi')" in (work / "app.py").read_text()
    page.reload()
    expect(card(page, "edit_file").locator(".diff-add")).to_have_count(2)
    expect(card(page, "edit_file")).to_have_attribute("data-state", "output-available")
    assert not page.script_errors  # type: ignore[attr-defined]
