"""The start-up rules of ``drover serve``: a token and a host name beyond loopback, a token
with a sandbox that has the network, well-formed ``--allowed-host`` and ``--cors-origin``
values; each refusal is one line and exit status 1. ``--workers`` hands the flags on."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
from pathlib import Path

import pytest
from server.support import BOUND, DROVER, clean_env

from drover.cli import serve_pool
from drover.errors import ConfigError
from drover.server.auth import known_owner
from drover.server.config import ServerSettings


def _refused(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    argv = [*DROVER, "serve", "--port", "0", "--db", str(tmp_path / "j.db"), *flags]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env or clean_env(), timeout=BOUND, check=False
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "j.db").exists()  # refused before anything was opened
    return lines[0]


def test_beyond_loopback_needs_a_token_then_a_name(tmp_path: Path) -> None:
    assert _refused(tmp_path, "--host", "0.0.0.0") == (
        "drover: error: listening on 0.0.0.0 needs a token: pass --token or set DROVER_TOKEN"
    )
    assert _refused(tmp_path, "--host", "0.0.0.0", "--token", "t") == (
        "drover: error: listening on 0.0.0.0 needs the name clients reach it by: "
        "pass --allowed-host NAME"
    )


def test_a_sandbox_with_the_network_needs_a_token(tmp_path: Path) -> None:
    expected = (
        "drover: error: --sandbox-network lets commands reach this server: pass --token or "
        "set DROVER_TOKEN"
    )
    assert _refused(tmp_path, "--sandbox-network") == expected
    config = tmp_path / "config.toml"
    config.write_text("[sandbox]\nnetwork = true\n")
    assert _refused(tmp_path, env=clean_env(DROVER_CONFIG=str(config))) == expected


def test_an_allowed_domain_of_this_machine_needs_a_token(tmp_path: Path) -> None:
    """The sandbox's proxy reaches a name the allow-list gives exactly: ``localhost`` would
    let commands reach this server; ``*.example.org`` and ``*`` never do."""
    assert _refused(tmp_path, "--sandbox-allow-domain", "localhost") == (
        "drover: error: the sandbox's allowed domain localhost lets commands reach this "
        "server: pass --token or set DROVER_TOKEN"
    )
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nallow_domains = ["127.0.0.1"]\n')
    assert "allowed domain 127.0.0.1 lets commands" in _refused(
        tmp_path, env=clean_env(DROVER_CONFIG=str(config))
    )
    assert _refused(tmp_path, "--sandbox-allow-domain", "http://x") == (
        "drover: error: not a domain name for the sandbox's allow-list: 'http://x' (expected "
        "a name such as pypi.org, *.example.org for its subdomains, or an IP address)"
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--allowed-host", "http://drover.test"),
        ("--allowed-host", "drover.test:8000"),
        ("--allowed-host", "*.drover.test"),
        ("--allowed-host", ""),
        ("--cors-origin", "*"),
        ("--cors-origin", "page.test"),
        ("--cors-origin", "http://page.test/"),
        ("--cors-origin", "ftp://page.test"),
    ],
)
def test_malformed_names_and_origins_are_refused(tmp_path: Path, flag: str, value: str) -> None:
    line = _refused(tmp_path, flag, value)
    assert line.startswith(f"drover: error: {flag} takes "), line
    assert repr(value) in line


def test_the_settings_accept_what_each_rule_asks_for() -> None:
    public = ServerSettings.build(
        host="0.0.0.0",
        port=80,
        tokens=["t"],
        allowed_hosts=["Drover.Test", "[2001:db8::1]", "192.0.2.7"],
        cors_origins=["HTTP://Page.Test:3000", "https://page.test"],
    )
    assert public.allowed_hosts == {"drover.test", "2001:db8::1", "192.0.2.7"}
    assert public.cors_origins == ("http://page.test:3000", "https://page.test")
    assert public.host_allowed("localhost") and public.host_allowed("127.0.0.9")
    assert not public.host_allowed("0.0.0.0") and not public.host_allowed("other.test")
    bound = ServerSettings.build(host="192.0.2.1", port=80, tokens=["t"], allowed_hosts=["a"])
    assert bound.host_allowed("192.0.2.1")  # the bound address
    sandboxed = ServerSettings.build(host="127.0.0.1", port=80, tokens=["t"], sandbox_network=True)
    assert sandboxed.owners
    with pytest.raises(ConfigError):
        ServerSettings.build(host="127.0.0.1", port=80, tokens=[" "], sandbox_network=True)


def test_workers_get_the_same_flags() -> None:
    argv = ["serve", "--workers", "2", "--allowed-host", "a.test", "--cors-origin", "http://p"]
    worker = serve_pool._worker_argv(argv, 8123)
    assert worker[worker.index("serve") :] == [
        "serve",
        "--allowed-host",
        "a.test",
        "--cors-origin",
        "http://p",
        "--port",
        "8123",
        "--reuse-port",
    ]


def test_a_token_is_compared_with_every_accepted_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which accepted token matched, or how early, must not show in the time taken: every
    owner is compared (a timing measurement would be flaky; the comparisons are counted)."""
    owners = frozenset(hashlib.sha256(t.encode()).hexdigest() for t in "abcdefgh")
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for owner in [*owners, hashlib.sha256(b"z").hexdigest()]:
        compared.clear()
        assert known_owner(owner, owners) == (owner in owners)
        assert sorted(compared) == sorted(o.encode() for o in owners)
