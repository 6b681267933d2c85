"""Fixtures of the web page's tests: Debian's chromium under Playwright, a page per test (with
a screenshot kept when the test fails), and a ``drover serve`` process per test.

The tests skip, saying why, when chromium or Playwright is missing; CI installs both
(``scripts/ci-deps``, the dev dependencies).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from drover.testing.server import FakeLLMServer

from .harness import DroverServe, GateProxy

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Longest wait for any one DOM condition (a bound on failure, not a pace).
EXPECT_TIMEOUT_MS = 20_000

try:
    from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev dependencies include it
    sync_playwright = None


def _skip_reason() -> str | None:
    if sync_playwright is None:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        return f"chromium is not installed ({CHROMIUM}; scripts/ci-deps installs it)"
    return None


# Module scope, not session: while Playwright's sync API is up, its event loop counts as
# running in the main thread, and every asyncio test collected after these would fail.
@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Playwright]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(f"BROWSER TESTS SKIPPED: {reason}")
    with sync_playwright() as p:
        expect.set_options(timeout=EXPECT_TIMEOUT_MS)
        yield p


@pytest.fixture(scope="module")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    browser = playwright_instance.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    page.on(
        "console",
        lambda msg: (
            errors.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" and "EventSource" not in msg.text
            else None
        ),
    )
    page.script_errors = errors  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        context.close()


def _artifact_dir(config: pytest.Config) -> Path:
    path = config.rootpath / "test-artifacts"
    path.mkdir(exist_ok=True)
    return path


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    """On a failed test, keep a screenshot and the page's HTML, and show drover serve's log."""
    report = yield
    if report.when != "call" or not report.failed:
        return report
    funcargs = getattr(item, "funcargs", {})
    page = funcargs.get("page")
    name = re.sub(r"[^\w.-]+", "_", item.nodeid.split("::", 1)[-1])
    if page is not None and not page.is_closed():
        out = _artifact_dir(item.config)
        try:
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            (out / f"{name}.html").write_text(page.content())
            report.sections.append(
                ("browser artefacts", f"screenshot: {out / name}.png\nhtml: {out / name}.html")
            )
        except Exception as exc:  # a dead page must not hide the real failure
            report.sections.append(("browser artefacts", f"could not capture the page: {exc}"))
        errors = getattr(page, "script_errors", [])
        if errors:
            report.sections.append(("page script errors", "\n".join(errors)))
    for server in getattr(item, "drover_servers", []):
        report.sections.append((f"drover serve log ({server.url})", server.log()))
    return report


@pytest.fixture
def serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., DroverServe]]:
    """Starts ``drover serve`` against a model API URL; stopped at the end of the test."""
    started: list[DroverServe] = []
    request.node.drover_servers = started

    def start(
        model_base_url: str,
        *,
        permission_mode: str = "ask",
        token: str | None = None,
        port: int = 0,
    ) -> DroverServe:
        """Start one; another with the same journal and ``port`` is a restart."""
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        server = DroverServe(
            model_base_url=model_base_url,
            workdir=workdir,
            db=tmp_path / "journal.db",
            log=tmp_path / f"serve-{len(started)}.log",
            permission_mode=permission_mode,
            token=token,
            port=port,
        )
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def gate(fake_llm: FakeLLMServer) -> Iterator[Callable[..., GateProxy]]:
    """A :class:`GateProxy` in front of the fake LLM, holding at the given text deltas."""
    proxies: list[GateProxy] = []

    def make(*hold_at: int, marker: bytes = b"text_delta") -> GateProxy:
        proxy = GateProxy(fake_llm.port, hold_at, marker).start()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.close()
