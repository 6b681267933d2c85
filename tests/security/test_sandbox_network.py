"""The sandbox's network (issue 43, items 5 and 6), attacked by a prompt-injected model.

Item 5: with ``--sandbox-network`` a command shared the host's network namespace and reached
Redis on loopback (and from there approved its own permission request). Now the sandbox always
has a namespace of its own; its one way out is drover's HTTP proxy, which never connects to an
address of this machine unless the allow-list names it exactly. The attacker tries Redis
directly, through the proxy by address and by names that resolve home.

Item 6: ``--sandbox-allow-domain`` from a real ``drover -p``: a local HTTP server stands for an
allowed site (the name ``localhost``, listed, which the proxy resolves to 127.0.0.1), reached
by curl (plain and through a CONNECT tunnel) and by Python's urllib; a name not listed gets the
proxy's 403, which drover logs.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.redis import server as redis_server

from drover.testing.server import FakeLLMServer

from .hostile import headless, hostile_turn

GREETING = "hello from the allowed host"


class Site(http.server.ThreadingHTTPServer):
    """A local HTTP server that records the requests it answers."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Host", "")))
        body = GREETING.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()
        thread.join(30)


def own_address() -> str | None:
    """An address of this machine other than loopback (None when it has no route out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


async def test_with_the_network_on_no_service_of_this_machine_is_reachable(
    tmp_path: Path, site: Site
) -> None:
    home = own_address()
    with redis_server() as redis:
        commands = [
            # Redis on loopback, directly: the attack of issue 43.
            f"exec 3<>/dev/tcp/127.0.0.1/{redis.port} && printf 'PING\\r\\n' >&3 && head -c 5 <&3",
            # The same through the proxy's tunnel, and the HTTP service by address and by name.
            f"curl -sS --noproxy '' -p http://127.0.0.1:{redis.port}/",
            f"curl -sS --noproxy '' http://127.0.0.1:{site.port}/",
            f"curl -sS --noproxy '' http://localhost:{site.port}/",
            f"curl -sS --noproxy '' http://{socket.gethostname()}:{site.port}/",
        ]
        if home is not None:
            commands.append(f"curl -sS --noproxy '' http://{home}:{site.port}/")
        outcome = await hostile_turn(
            tmp_path, commands, permission_mode="allow", sandbox_network=True
        )
        direct, tunnel, *http = outcome.texts
        assert "+PONG" not in direct and "Connection refused" in direct, direct
        assert "CONNECT tunnel failed, response 403" in tunnel, tunnel
        for text in http:
            assert GREETING not in text
            assert "resolves to an address of this machine" in text, text
        assert site.seen == []
        # Redis saw no client but the test's own probes.
        assert b"+PONG" in redis.command("PING")


def drover_p(
    fake_llm: FakeLLMServer, tmp_path: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    args = ["-p", "fetch the docs", "--model", "anthropic:test", "--base-url", fake_llm.base_url]
    args += ["--db", str(tmp_path / "journal.db"), "--workdir", str(work)]
    args += ["--output-format", "json", *flags]
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "DROVER_CONFIG": str(tmp_path / "none")}
    return headless(args, env)


def results_of(fake_llm: FakeLLMServer) -> list[str]:
    return [
        json.dumps(block["content"])
        for message in fake_llm.requests[-1].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_through_drover_p_an_allowed_name_is_reached_and_another_gets_403(
    fake_llm: FakeLLMServer, tmp_path: Path, site: Site
) -> None:
    url = f"http://localhost:{site.port}/greeting"
    commands = [
        f"curl -sS {url}",
        f"curl -sS -p {url}",  # through a CONNECT tunnel, as HTTPS goes
        f"/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen(\"{url}\").read())'",
        "curl -sS http://refused.example/",
        "curl -sS https://refused.example/",
        f"curl -sS --noproxy '*' {url}",  # around the proxy: the sandbox's own loopback
    ]
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": c}} for c in commands]},
        {"text": "Done."},
    )
    done = drover_p(
        fake_llm,
        tmp_path,
        "--sandbox-allow-domain",
        "localhost",
        "--sandbox-allow-domain",
        "*.example.org",
        "--permission-mode",
        "allow",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    plain, tunnel, urllib, refused, refused_tls, direct = results_of(fake_llm)
    assert GREETING in plain and GREETING in tunnel and GREETING in urllib
    assert site.seen == [("/greeting", f"localhost:{site.port}")] * 3
    assert "drover sandbox: refused.example is not an allowed domain" in refused, refused
    assert "localhost, *.example.org" in refused
    assert "CONNECT tunnel failed, response 403" in refused_tls, refused_tls
    assert "--sandbox-allow-domain" in refused_tls  # the model is told what to ask for
    assert "Connection refused" in direct or "Failed to connect" in direct, direct
    # drover logs each refusal.
    assert "sandbox proxy refused refused.example:80: not an allowed domain" in done.stderr
    assert "sandbox proxy refused refused.example:443: not an allowed domain" in done.stderr


def test_a_bad_domain_is_a_one_line_error(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    with contextlib.suppress(OSError):
        (tmp_path / "journal.db").unlink()
    done = drover_p(fake_llm, tmp_path, "--sandbox-allow-domain", "http://pypi.org/simple")
    assert done.returncode != 0
    assert "not a domain name for the sandbox's allow-list: 'http://pypi.org/simple'" in done.stderr
    assert "Traceback" not in done.stderr
