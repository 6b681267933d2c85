"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page or
an unresolved reference fails it), its references cover what the code has — every command and
flag, every route, every exported name, every configuration key — and it works offline: a
browser given only the built files renders its diagrams and asks nothing of any other host.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest

import drover
from drover.cli import main
from drover.config import settings as config
from drover.server.openapi import schema

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MERMAID = Path(os.environ.get("DROVER_MERMAID_JS") or ROOT / ".cache/docs/mermaid.min.js")
CHROMIUM = "/usr/bin/chromium"


def _missing(why: str) -> None:
    # CI (DROVER_REQUIRE_NODE=1, with npm) must build the site; elsewhere say why it did not.
    if os.environ.get("DROVER_REQUIRE_NODE") == "1":
        pytest.fail(f"{why} (DROVER_REQUIRE_NODE=1)", pytrace=False)
    pytest.skip(f"DOCUMENTATION SITE NOT BUILT: {why}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from the checkout by ``mkdocs build --strict``."""
    if not MERMAID.is_file():
        _missing(f"{MERMAID} is missing (scripts/ci-deps fetches it with npm)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return unescape(re.sub(r"<[^>]+>", "", html))


def _parsers() -> Iterator[argparse.ArgumentParser]:
    pending = [main.build_parser(), *(main.build_subparser(n) for n in main.SUBCOMMANDS)]
    while pending:
        parser = pending.pop()
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += action.choices.values()


def test_the_cli_reference_has_every_command_and_flag(site: Path) -> None:
    html = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    # The first cell of each argument's row: its invocation as --help shows it.
    rows = {unescape(cell) for cell in re.findall(r"<tr>\s*<td><code>(.*?)</code></td>", html)}
    text = _text(site, "reference/cli")
    for parser in _parsers():
        assert f"{parser.prog}" in text
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(
                action, argparse._HelpAction | argparse._SubParsersAction
            ):
                continue
            assert formatter._format_action_invocation(action) in rows, (parser.prog, action)
    assert "--version" in rows and "drover doctor" in text


def test_the_http_reference_has_every_route_and_the_schema(site: Path) -> None:
    text = _text(site, "reference/http")
    doc = schema()
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert f"{method.upper()} {path}" in text
            for status in op["responses"]:
                assert status in text
    for name in doc["components"]["schemas"]:
        assert name in text
    published = json.loads((site / "reference" / "openapi.json").read_text(encoding="utf-8"))
    assert published == json.loads(json.dumps(doc))
    # The contract and the event stream come from the server package's docstring.
    assert "misdirected_request" in text
    events = _text(site, "reference/events")
    for name in ("turn_started", "text_delta", "tool_state", "done", "incomplete", "reset"):
        assert name in events
    assert "Last-Event-ID" in events


def test_the_library_reference_documents_every_export(site: Path) -> None:
    html = (site / "reference" / "library" / "index.html").read_text(encoding="utf-8")
    for name in drover.__all__:
        assert f'id="{drover._ORIGINS[name]}.{name}"' in html, name


def test_the_configuration_page_names_every_key_and_variable(site: Path) -> None:
    text = _text(site, "configuration")
    for key in (*config._FILE_KEYS, *config._SANDBOX_KEYS):
        assert f"`{key}`" in (DOCS / "configuration.md").read_text(encoding="utf-8"), key
        assert key in text
    variables = set(
        re.findall(
            r"\b[A-Z][A-Z_]*_(?:API_KEY|BASE_URL)\b|\bDROVER_[A-Z_]+\b", config.__doc__ or ""
        )
    )
    assert variables
    for name in sorted(variables):
        assert name in text, name


def test_the_module_index_lists_every_module(site: Path) -> None:
    text = _text(site, "architecture")
    package = ROOT / "src" / "drover"
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        assert name in text, name


def test_the_site_renders_its_diagrams_offline(site: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the dev dependencies include it
        _missing("playwright is not installed")
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        _missing(f"chromium is not installed ({CHROMIUM}; scripts/ci-deps installs it)")
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    elsewhere: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page()
            # Nothing may come from another host: record it, and refuse it.
            page.route(
                re.compile(r"^(?!" + re.escape(base) + ")"),
                lambda route: (elsewhere.append(route.request.url), route.abort()),
            )
            for source in sorted(DOCS.rglob("*.md")):
                diagrams = (source.read_text(encoding="utf-8")).count("```mermaid")
                if not diagrams:
                    continue
                url = source.relative_to(DOCS).with_suffix("").as_posix()
                url = "" if url == "index" else f"{url.removesuffix('/index')}/"
                page.goto(f"{base}/{url}")
                # Material replaces each <pre class="mermaid"> by a rendered <div class="mermaid">.
                rendered = page.locator("div.mermaid")
                rendered.nth(diagrams - 1).wait_for(timeout=20_000)
                assert rendered.count() == diagrams, url
                heights = page.eval_on_selector_all(
                    "div.mermaid", "els => els.map(e => e.getBoundingClientRect().height)"
                )
                assert all(h > 50 for h in heights), (url, heights)
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert elsewhere == []


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
