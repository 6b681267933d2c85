"""What the SDKs' HTTP clients read from the environment, checked before one is built.

Both clients (httpx, and the SDKs' aiohttp client, which is an httpx client too) take a CA
bundle from ``SSL_CERT_FILE`` and proxies from ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``ALL_PROXY``
(either case) when they are built. A bundle that cannot be read, or a proxy URL they cannot
use, makes the SDK's constructor raise from deep inside httpx, and the half-built client then
complains again when it is collected. :func:`check_client_environment` makes the same checks
first, as the clients would take them, and says what is wrong in one line (a
:class:`ConfigError`).
``SSL_CERT_DIR`` needs no check: a directory that does not exist is simply searched in vain.
"""

from __future__ import annotations

import importlib.util
import os
from urllib.request import getproxies

import httpx2

from drover.errors import ConfigError

#: The variables a proxy comes from, as ``getproxies`` names their schemes.
_PROXY_VARIABLES = {"http": "HTTP_PROXY", "https": "HTTPS_PROXY", "all": "ALL_PROXY"}


def check_client_environment(http_client: str = "httpx") -> None:
    """Raise :class:`ConfigError` when ``SSL_CERT_FILE`` or a proxy variable would keep an
    SDK's HTTP client (``http_client``: ``httpx`` or ``aiohttp``) from being built or used."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        _check_ca_file(cafile)
    proxies = getproxies()
    if any(host.strip() == "*" for host in proxies.get("no", "").split(",")):
        return  # NO_PROXY=*: no proxy is used, whatever the others say
    for scheme, variable in _PROXY_VARIABLES.items():
        value = proxies.get(scheme)
        if not value:
            continue
        if variable.lower() in os.environ:
            variable = variable.lower()  # (the one getproxies reads when both are set)
        url = value if "://" in value else f"http://{value}"  # (as httpx reads it)
        try:
            proxy = httpx2.Proxy(url)
        except (ValueError, httpx2.InvalidURL) as exc:
            # (the value is not shown: a proxy's URL can hold its password)
            raise ConfigError(f"{variable} is not a proxy URL drover can use: {exc}") from None
        if proxy.url.scheme.startswith("socks"):
            _check_socks(variable, http_client)


def _check_ca_file(cafile: str) -> None:
    """The bundle is read, not loaded: OpenSSL's load of a whole bundle (~30 ms) is left to the
    client, which makes it anyway. What OpenSSL would still refuse in a file that has the
    look of one is said by the provider, from the client's error."""
    reason = None
    try:
        with open(cafile, "rb") as file:
            if b"-----BEGIN " not in file.read():
                reason = "it holds no PEM certificate"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if reason is not None:
        raise ConfigError(
            f"SSL_CERT_FILE names {cafile!r}, which is not a usable CA bundle: {reason}"
        )


def _check_socks(variable: str, http_client: str) -> None:
    if http_client == "aiohttp":
        raise ConfigError(
            f"{variable} names a SOCKS proxy, which the aiohttp client cannot use: "
            'set http_client = "httpx" in the config (with the socksio package installed)'
        )
    if importlib.util.find_spec("socksio") is None:
        raise ConfigError(
            f"{variable} names a SOCKS proxy, which needs the socksio package: pip install socksio"
        )


def proxy_variables() -> list[str]:
    """The proxy variables set (and ``NO_PROXY``), named as the environment spells them; their
    values are not given (a proxy's URL can hold its password)."""
    names = [*_PROXY_VARIABLES.values(), "NO_PROXY"]
    return [
        spelled
        for name in names
        for spelled in (name, name.lower())
        if os.environ.get(spelled, "").strip()
    ]
