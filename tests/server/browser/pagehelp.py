"""Steps the browser tests take in the page, as a user would."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Locator, Page, expect

from .harness import DroverServe


def new_session(page: Page, server: DroverServe) -> str:
    """Open the page, press "New session" (in the drawer on a narrow screen), and return the
    new session's id."""
    page.goto(server.url + "/")
    if page.locator("#sidebar-toggle").is_visible():  # a narrow screen: the sessions' drawer
        page.click("#sidebar-toggle")
    page.click("#new-session")
    expect(page.locator("#composer")).to_be_visible()
    match = re.fullmatch(r"#/sessions/(.+)", page.evaluate("location.hash"))
    assert match, page.evaluate("location.hash")
    return match.group(1)


def send(page: Page, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")
    expect(page.locator("#prompt")).to_have_value("")


def turn(page: Page, index: int = -1) -> Locator:
    turns = page.locator("#transcript .turn")
    return turns.last if index == -1 else turns.nth(index)


def card(page: Page, name: str) -> Locator:
    return page.locator(".tool-card", has=page.locator(".tool-name", has_text=name))


def expect_status(page: Page, status: str, index: int = -1) -> None:
    expect(turn(page, index)).to_have_attribute("data-status", status)


def last_text(page: Page) -> Locator:
    return page.locator("#transcript .turn .block.text").last


def shown(page: Page) -> Any:
    """Where the page stands, for assertion messages."""
    return page.evaluate("document.querySelector('#transcript').innerText")
