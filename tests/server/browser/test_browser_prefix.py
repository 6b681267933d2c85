"""The web page in real headless chromium through a real nginx that serves drover under a path
(``location /drover/``, as ``docs/deployment.md`` says to): the page's files and every call it
makes to the API go under that path, and a turn runs to its answer."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Browser, expect

from drover.testing.server import FakeLLMServer

from ..nginx import Proxied
from .conftest import EXPECT_TIMEOUT_MS
from .pagehelp import expect_status, last_text, send

PREFIX = "/drover/"


def test_the_page_works_under_a_path_prefix(
    browser: Browser, fake_llm: FakeLLMServer, proxied: Callable[..., Proxied]
) -> None:
    fake_llm.script({"text": "Answered under /drover/."})
    # (no --allowed-host: chromium reaches nginx as 127.0.0.1, a loopback name drover takes,
    # and the page's Origin names that same host and port)
    proxy = proxied(public=False, prefix=PREFIX)
    context = browser.new_context(ignore_https_errors=True)  # (the test's own CA)
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    requested: list[str] = []
    failed: list[str] = []
    page = context.new_page()
    page.on("request", lambda r: requested.append(r.url))
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    try:
        base = f"https://127.0.0.1:{proxy.nginx.port}"
        page.goto(base + PREFIX.rstrip("/"))  # (nginx sends /drover on to /drover/)
        page.click("#new-session")
        expect(page.locator("#composer")).to_be_visible()
        send(page, "hello")
        expect_status(page, "completed")
        expect(last_text(page)).to_have_text("Answered under /drover/.")
    finally:
        context.close()
    assert failed == [], failed
    paths = [re.sub(r"^https://[^/]+", "", url) for url in requested if url.startswith(base)]
    assert paths[0] == PREFIX.rstrip("/"), paths
    assert paths[1:] and all(p.startswith(PREFIX) for p in paths[1:]), paths
    assert any(p.startswith(f"{PREFIX}static/app.js") for p in paths), paths
    assert any(p.startswith(f"{PREFIX}v1/sessions/") and "/events" in p for p in paths), paths
    assert len(fake_llm.requests) == 1
