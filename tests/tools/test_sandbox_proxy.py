"""drover's proxy for the sandbox, spoken to directly on its Unix socket (no bubblewrap), and the
parts of the sandbox's home view that are pure functions (the git config filter)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from drover.config.settings import domain_entry
from drover.errors import ConfigError
from drover.tools.sandbox_home import sanitized_gitconfig
from drover.tools.sandbox_proxy import (
    MAX_CONNECTIONS,
    DomainPolicy,
    Refused,
    is_local,
    parse_head,
    serving,
)

BOUND = 30.0


@pytest.mark.parametrize(
    ("entries", "host", "admitted"),
    [
        (["pypi.org"], "pypi.org", True),
        (["pypi.org"], "PyPI.org.", True),
        (["pypi.org"], "files.pypi.org", False),
        (["pypi.org"], "evilpypi.org", False),
        (["*.example.org"], "a.example.org", True),
        (["*.example.org"], "a.b.example.org", True),
        (["*.example.org"], "example.org", False),
        (["*.example.org"], "badexample.org", False),
        (["*.example.org"], "a.example.org.evil.com", False),
        (["*"], "anything.test", True),
        (["127.0.0.1"], "127.0.0.1", True),
        ([], "pypi.org", False),
    ],
)
def test_the_policy_admits_listed_names_and_subdomains_of_wildcards(
    entries: list[str], host: str, admitted: bool
) -> None:
    assert DomainPolicy.of(entries).admits(host) is admitted


def test_only_an_exact_entry_may_reach_this_machine() -> None:
    assert DomainPolicy.of(["localhost"]).names_exactly("localhost")
    assert not DomainPolicy.of(["*"]).names_exactly("localhost")
    assert not DomainPolicy.of(["*.localhost"]).names_exactly("x.localhost")
    assert is_local("127.0.0.1") and is_local("::1") and is_local("0.0.0.0")
    assert is_local("169.254.169.254")  # cloud metadata: link-local
    assert is_local("::ffff:127.0.0.1")
    assert not is_local("192.0.2.1")  # TEST-NET-1: never this machine's


@pytest.mark.parametrize(
    "text", ["http://pypi.org", "pypi.org/simple", "*pypi.org", "py pi.org", "", "a..b"]
)
def test_a_bad_entry_is_refused_with_its_reason(text: str) -> None:
    with pytest.raises(ConfigError, match="not a domain name for the sandbox's allow-list"):
        domain_entry(text)


def test_entries_are_normalised() -> None:
    assert domain_entry(" PyPI.org. ") == "pypi.org"
    assert domain_entry("[::1]") == "::1"
    assert domain_entry("*.Example.ORG") == "*.example.org"


def test_a_plain_request_is_passed_on_in_origin_form_for_one_request() -> None:
    # A Host naming another site behind the same address (a CDN) is replaced by the admitted one.
    head = (
        b"GET http://pypi.org:8080/simple/?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
        b"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
        b"Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    )
    request = parse_head(head)
    assert (request.connect, request.host, request.port) == (False, "pypi.org", 8080)
    assert request.head == (
        b"GET /simple/?q=1 HTTP/1.1\r\nHost: pypi.org:8080\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n"
    )
    tunnel = parse_head(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n")
    assert (tunnel.connect, tunnel.host, tunnel.port) == (True, "::1", 443)
    for bad in (b"GET /relative HTTP/1.1\r\n\r\n", b"CONNECT pypi.org HTTP/1.1\r\n\r\n", b"x\r\n"):
        with pytest.raises(Refused):
            parse_head(bad)


@contextlib.asynccontextmanager
async def origin() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A local server that records each request head and answers ``hi``."""
    heads: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()
        await server.wait_closed()


async def exchange(path: Path, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    async with asyncio.timeout(BOUND):
        got = await reader.read()
    writer.close()
    return got


async def test_the_proxy_tunnels_to_an_exact_name_and_refuses_the_rest(tmp_path: Path) -> None:
    sock = tmp_path / "proxy.sock"
    async with origin() as (port, heads), serving(sock, ["localhost"]):
        tunnel = f"CONNECT localhost:{port} HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n"
        got = await exchange(sock, tunnel.encode())
        assert got.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
        assert got.endswith(b"hi")
        plain = f"GET http://localhost:{port}/y HTTP/1.1\r\nHost: localhost\r\n\r\n"
        assert (await exchange(sock, plain.encode())).endswith(b"hi")
        assert heads[1].startswith(b"GET /y HTTP/1.1\r\n")
        # The address of the same service is not the name the list gives.
        refused = await exchange(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert b"127.0.0.1 is not an allowed domain" in refused
        assert (await exchange(sock, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        assert len(heads) == 2


async def test_any_name_never_reaches_this_machine(tmp_path: Path) -> None:
    sock = tmp_path / "proxy.sock"
    async with origin() as (port, heads), serving(sock, ["*"]):
        for host in ("localhost", "127.0.0.1", "[::1]"):
            got = await exchange(sock, f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            assert got.startswith(b"HTTP/1.1 403 Forbidden\r\n"), got
            assert b"resolves to an address of this machine" in got
        assert heads == []


async def test_a_command_cannot_hold_more_than_its_share_of_connections(tmp_path: Path) -> None:
    """Each connection holds drover's file descriptors: a flood of idle ones is cut off."""
    sock = tmp_path / "proxy.sock"
    async with serving(sock, ["pypi.org"]) as proxy:
        held = [await asyncio.open_unix_connection(str(sock)) for _ in range(MAX_CONNECTIONS)]
        async with asyncio.timeout(BOUND):
            # The server accepts them one by one: look again until it holds them all.
            while proxy.connections < MAX_CONNECTIONS:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        try:
            cut = await exchange(sock, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        except ConnectionResetError:
            cut = b""  # closed before it read what was sent
        assert cut == b""
        for _reader, writer in held:
            writer.close()
        async with asyncio.timeout(BOUND):
            while proxy.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        again = await exchange(sock, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        assert again.startswith(b"HTTP/1.1 403 Forbidden\r\n")


def test_git_config_keeps_identity_and_aliases_not_credentials() -> None:
    text = (
        "[user]\n\tname = Jo\n\temail = jo@example.com\n"
        "[credential]\n\thelper = store\n"
        '[credential "https://git.example.com"]\n\tusername = jo\n'
        "[include]\n\tpath = ~/.gitconfig.secret\n"
        '[includeIf "gitdir:~/work/"]\n\tpath = ~/.work.gitconfig\n'
        '[http "https://git.example.com/"]\n\textraHeader = Authorization: Bearer T\n'
        "\tsslVerify = true\n"
        '[url "https://jo:T@git.example.com/"]\n\tinsteadOf = https://git.example.com/\n'
        '[remote "origin"]\n\turl = https://jo:T@git.example.com/r.git\n'
        "[github]\n\tuser = jo\n\toauth-token = T\n\tToken = T\n"
        "[alias]\n\tst = status\n"
    )
    kept = sanitized_gitconfig(text)
    assert kept == (
        "[user]\n\tname = Jo\n\temail = jo@example.com\n"
        '[http "https://git.example.com/"]\n\tsslVerify = true\n'
        '[remote "origin"]\n'
        "[github]\n\tuser = jo\n"
        "[alias]\n\tst = status\n"
    )
