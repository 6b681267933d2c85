"""The model API over TLS, directly and through an HTTPS proxy, on both SDK clients.

Real model APIs are https. Here the fake LLM server speaks HTTPS with a certificate from a
throwaway CA (``trustme``), and a user trusts that CA the way one trusts a corporate proxy's:
``SSL_CERT_FILE``. Both SDK clients build their TLS context from the environment when they are
built (httpx's default context; the aiohttp transport asks httpx for the same context), so:

* trusted, a streamed turn completes, whole;
* untrusted, the turn ends in a :class:`~drover.errors.ProviderConnectionError` that says the
  certificate could not be verified, after at most the retries allowed, and the server saw no
  request (the handshake failed before one was sent);
* with ``HTTPS_PROXY`` the client opens a ``CONNECT`` tunnel through the proxy and speaks TLS to
  the server inside it; credentials in the proxy's URL go to the proxy as
  ``Proxy-Authorization``.

Every test clears the TLS and proxy variables first, so the machine's environment cannot change
what it sees, and builds its provider only after setting them.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from drover.core.model_stream import BlockDelta, StreamEnd
from drover.errors import ProviderConnectionError
from drover.testing.server import FakeLLMServer

from .conftest import BOUND, ON_BOTH_CLIENTS, Outcome, drain, make_provider, request, turns
from .proxy import ForwardProxy, unset_proxy_vars

pytestmark = ON_BOTH_CLIENTS

#: The variables a TLS context takes its trusted CAs from, when set.
TLS_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR")

TEXT = "Over TLS, every word. " * 4


@dataclass(frozen=True)
class Certificates:
    """PEM files of a throwaway CA and of a server certificate it signed."""

    ca: Path
    cert: Path
    key: Path


#: The names the server's certificate is for, unless a test says otherwise.
SERVER_NAMES = ("127.0.0.1", "localhost")


@pytest.fixture
def certificates(request: pytest.FixtureRequest, tmp_path: Path) -> Certificates:
    """A new CA, and a certificate it signed for :data:`SERVER_NAMES` (or for the names an
    indirect parameter gives)."""
    names: tuple[str, ...] = getattr(request, "param", SERVER_NAMES)
    ca = trustme.CA()
    issued = ca.issue_cert(*names)
    files = Certificates(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key")
    ca.cert_pem.write_to_path(str(files.ca))
    # The server sends its certificate and the chain up to (not including) the CA.
    for i, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(files.cert), append=i > 0)
    issued.private_key_pem.write_to_path(str(files.key))
    return files


@pytest.fixture
def tls_llm(certificates: Certificates) -> Iterator[FakeLLMServer]:
    """The fake LLM server over HTTPS; like ``fake_llm``, a test fails on a request the real
    API would refuse or that found nothing scripted."""
    with FakeLLMServer(ssl_certfile=certificates.cert, ssl_keyfile=certificates.key) as server:
        yield server
    assert server.violations == [] and server.unexpected == []


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``monkeypatch`` with the TLS variables and every proxy variable unset."""
    unset_proxy_vars(monkeypatch)
    for name in TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _assert_whole(outcome: Outcome) -> None:
    """``outcome`` streamed :data:`TEXT` in several deltas and ended the turn."""
    deltas = [e for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "text"]
    assert len(deltas) > 1 and "".join(d.data for d in deltas) == TEXT
    assert isinstance(outcome.events[-1], StreamEnd)
    assert outcome.events[-1].stop_reason == "end_turn"
    assert outcome.message.text == TEXT


async def test_a_streamed_turn_completes_with_the_ca_trusted_through_ssl_cert_file(
    protocol: str,
    http_client: str,
    tls_llm: FakeLLMServer,
    certificates: Certificates,
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert tls_llm.base_url.startswith("https://")
    clean_env.setenv("SSL_CERT_FILE", str(certificates.ca))
    provider = make_provider(protocol, tls_llm, http_client=http_client)
    tls_llm.script({"text": TEXT}, {"text": "again"})
    first, second = await turns(provider, 2)
    _assert_whole(first)
    assert second.message.text == "again"
    assert len(tls_llm.requests) == 2


@pytest.mark.parametrize(
    ("certificates", "trust_ca"),
    [(SERVER_NAMES, False), (("localhost",), True)],
    indirect=["certificates"],
    ids=["unknown-ca", "cert-for-another-host"],
)
async def test_an_unverifiable_certificate_is_a_connection_error_that_says_so(
    protocol: str,
    http_client: str,
    tls_llm: FakeLLMServer,
    certificates: Certificates,
    trust_ca: bool,
    clean_env: pytest.MonkeyPatch,
) -> None:
    """The server's CA is unknown; or it is trusted, but the certificate names ``localhost``
    and the client asked for ``127.0.0.1``."""
    if trust_ca:
        clean_env.setenv("SSL_CERT_FILE", str(certificates.ca))
    provider = make_provider(protocol, tls_llm, max_retries=3, http_client=http_client)
    try:
        async with asyncio.timeout(BOUND):
            outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, ProviderConnectionError)
    # OpenSSL's words, which both clients pass on inside their own.
    assert "certificate verify failed" in str(error), error
    assert "\n" not in str(error)
    # A certificate to fix is not tried again: the error comes at once, alone.
    assert not error.retryable
    assert outcome.events == [] and outcome.retries == []
    assert tls_llm.requests == []


# The SDKs' aiohttp transport hands credentials to aiohttp as ``proxy_auth=BasicAuth(...)``,
# both of which aiohttp 3.14 deprecates (for aiohttp 4, which drops them); the header still
# goes out, and only a test's warnings-as-errors would stop it.
@pytest.mark.filterwarnings("ignore:BasicAuth is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The 'proxy_auth' parameter is deprecated:DeprecationWarning")
@pytest.mark.parametrize("credentials", ["", "user:s3cret"], ids=["anonymous", "credentials"])
async def test_https_proxy_tunnels_the_turn_through_connect(
    protocol: str,
    http_client: str,
    credentials: str,
    tls_llm: FakeLLMServer,
    certificates: Certificates,
    proxy: ForwardProxy,
    clean_env: pytest.MonkeyPatch,
) -> None:
    """Credentials in the proxy's URL go to the proxy as ``Proxy-Authorization``."""
    clean_env.setenv("SSL_CERT_FILE", str(certificates.ca))
    userinfo = f"{credentials}@" if credentials else ""
    clean_env.setenv("HTTPS_PROXY", proxy.url.replace("http://", f"http://{userinfo}"))
    provider = make_provider(protocol, tls_llm, http_client=http_client)
    tls_llm.script({"text": TEXT}, {"text": "again"})
    first, second = await turns(provider, 2)
    _assert_whole(first)
    assert second.message.text == "again"
    # A tunnel per connection (the second turn may reuse the first's); never a request in the
    # clear, which the proxy would see as its own request line.
    connect = f"CONNECT 127.0.0.1:{tls_llm.port} HTTP/1.1"
    assert proxy.request_lines in ([connect], [connect] * 2)
    # On each CONNECT, once: a proxy may refuse a request with the field twice.
    basic = [f"Basic {base64.b64encode(credentials.encode()).decode()}"] if credentials else []
    assert proxy.authorizations == [basic] * len(proxy.request_lines)
    assert len(tls_llm.requests) == 2
