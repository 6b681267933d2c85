"""Fixtures of the security tests: real ``drover serve`` processes on the fake LLM, shared per
module (the rules they test keep the journal unchanged), and Debian's chromium under
Playwright resolving ``rebind.example`` to 127.0.0.1, as a DNS-rebinding name does."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli.tmux_screen import screens
from scale.conftest import journal_url, pg_cluster, redis_server
from server.browser.conftest import CHROMIUM, CHROMIUM_ARGS, EXPECT_TIMEOUT_MS, playwright_instance
from server.support import BOUND, Served, start_server

from drover.testing.server import FakeLLMServer

# The browser tests' fixture, the REPL tests' screens and the scale tests' PostgreSQL and Redis,
# re-used as they are.
__all__ = ["journal_url", "pg_cluster", "playwright_instance", "redis_server", "screens"]

#: The name the attacker's page lives under; chromium resolves it to 127.0.0.1.
REBIND_HOST = "rebind.example"
#: What the victim's session holds, which no attack may read.
SECRET = "the secret transcript"


@pytest.fixture
def cloned(tmp_path: Path) -> Path:
    """A repository someone cloned, empty but for its ``.git``: the attacks add to it."""
    repo = tmp_path / "cloned"
    (repo / ".git").mkdir(parents=True)
    return repo


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLMServer]:
    """One fake LLM per module; a test that expects no model call checks its requests."""
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def spawn(
    fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Served]]:
    """``spawn(*flags)``: a ``drover serve`` with its own journal, stopped with the module."""
    started: list[Served] = []

    def start(*flags: str) -> Served:
        served = start_server(fake, tmp_path_factory.mktemp("serve"), *flags)
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.close()


@pytest.fixture(scope="module")
def victim(spawn: Callable[..., Served], fake: FakeLLMServer) -> tuple[Served, str]:
    """``drover serve`` as started by default (loopback, no token) and the id of a session
    whose one turn, ended, holds :data:`SECRET`."""
    served = spawn()
    fake.script({"text": SECRET})
    with served.client() as c:
        sid = str(c.post("/v1/sessions", json={}).json()["id"])
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}).status_code == 202
        deadline = time.monotonic() + BOUND
        while c.get(f"/v1/sessions/{sid}").json()["turns"][0]["status"] == "running":
            assert time.monotonic() < deadline, "the turn never ended"
            time.sleep(0.02)  # the turn runs in the server: look again
    return served, sid


@pytest.fixture(scope="module")
def browser(playwright_instance):  # type: ignore[no-untyped-def]
    executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1"]
    browser = playwright_instance.chromium.launch(executable_path=executable, args=args)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context()
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()
