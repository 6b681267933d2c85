"""What the SDKs' HTTP clients read from the environment — a CA bundle, proxies — checked as a
provider is built: each thing they could not use is one :class:`ConfigError` that names it,
never an exception from inside httpx (see ``drover.providers.client_env``)."""

from __future__ import annotations

import gc
import importlib.util
from pathlib import Path

import pytest
import trustme

from drover.errors import ConfigError
from drover.testing.server import FakeLLMServer

from .conftest import ON_BOTH_CLIENTS, make_provider
from .proxy import unset_proxy_vars

pytestmark = ON_BOTH_CLIENTS


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The machine's CA and proxy variables cleared: each test sets its own."""
    unset_proxy_vars(monkeypatch)
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def refused(protocol: str, server: FakeLLMServer, http_client: str) -> str:
    with pytest.raises(ConfigError) as caught:
        make_provider(protocol, server, http_client=http_client)
    return str(caught.value)


async def built(protocol: str, server: FakeLLMServer, http_client: str) -> None:
    provider = make_provider(protocol, server, http_client=http_client)
    await provider.aclose()


@pytest.mark.parametrize(
    ("contents", "reason"),
    [
        (None, "No such file or directory"),
        ("", "Is a directory"),
        ("not a certificate\n", "it holds no PEM certificate"),
    ],
    ids=["missing", "a-directory", "not-pem"],
)
def test_a_ca_bundle_that_cannot_be_used_is_named(
    protocol: str,
    http_client: str,
    fake_llm: FakeLLMServer,
    env: pytest.MonkeyPatch,
    tmp_path: Path,
    contents: str | None,
    reason: str,
) -> None:
    path = tmp_path / "ca.pem"
    if contents == "":
        path.mkdir()
    elif contents is not None:
        path.write_text(contents)
    env.setenv("SSL_CERT_FILE", str(path))
    said = refused(protocol, fake_llm, http_client)
    assert said.startswith(f"SSL_CERT_FILE names {str(path)!r}, which is not a usable CA bundle")
    assert reason in said


# The SDK's half-built httpx client then complains as it is collected (its ``__del__`` reads
# state its ``__init__`` never set): that line is the SDK's, and only this rare case reaches it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_bundle_openssl_refuses_is_the_clients_error_in_one_line(
    protocol: str,
    http_client: str,
    fake_llm: FakeLLMServer,
    env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # (it looks like PEM, so only OpenSSL can tell: the client's own error, as a ConfigError)
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    env.setenv("SSL_CERT_FILE", str(path))
    said = refused(protocol, fake_llm, http_client)
    gc.collect()  # (the half-built client is collected here, under this test's filter)
    assert said.startswith("cannot set up the HTTP client for the "), said
    assert "\n" not in said


async def test_a_usable_ca_bundle_builds_the_client(
    protocol: str,
    http_client: str,
    fake_llm: FakeLLMServer,
    env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    env.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    await built(protocol, fake_llm, http_client)


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("HTTPS_PROXY", "ftp://user:s3cret@proxy.example", "Unknown scheme for proxy URL"),
        ("https_proxy", "://proxy.example", "Unknown scheme for proxy URL"),
        ("ALL_PROXY", "http://[::1", "Invalid port"),
    ],
)
def test_a_proxy_url_that_cannot_be_used_is_named_without_its_password(
    protocol: str,
    http_client: str,
    fake_llm: FakeLLMServer,
    env: pytest.MonkeyPatch,
    variable: str,
    value: str,
    reason: str,
) -> None:
    env.setenv(variable, value)
    said = refused(protocol, fake_llm, http_client)
    assert said.startswith(f"{variable} is not a proxy URL drover can use: {reason}"), said
    assert "s3cret" not in said


async def test_no_proxy_star_leaves_the_proxy_variables_unread(
    protocol: str, http_client: str, fake_llm: FakeLLMServer, env: pytest.MonkeyPatch
) -> None:
    env.setenv("HTTPS_PROXY", "ftp://proxy.example")
    env.setenv("NO_PROXY", "*")
    await built(protocol, fake_llm, http_client)


def test_a_socks_proxy_says_what_it_needs(
    protocol: str, http_client: str, fake_llm: FakeLLMServer, env: pytest.MonkeyPatch
) -> None:
    assert importlib.util.find_spec("socksio") is None  # (not one of drover's dependencies)
    env.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    said = refused(protocol, fake_llm, http_client)
    if http_client == "aiohttp":
        assert said.startswith("HTTPS_PROXY names a SOCKS proxy, which the aiohttp client cannot")
    else:
        assert said == "HTTPS_PROXY names a SOCKS proxy, which needs the socksio package: " + (
            "pip install socksio"
        )
