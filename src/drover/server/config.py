"""The server's settings (from ``drover serve`` flags), with the rules on tokens, addresses,
host names and origins checked once at start-up."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from drover.errors import ConfigError

STATIC_DIR = Path(__file__).parent / "static"

#: A DNS name as a Host header carries it: lowercase labels of letters, digits and hyphens.
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
#: Addresses that mean "every interface": they name no host a client could use.
_UNSPECIFIED = frozenset({"", "0.0.0.0", "::"})


def token_owner(token: str) -> str:
    """What a session records as its owner: a hash of the token, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``),
    lowercase and without brackets; None when the value is not of that form."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if not _is_ip(name):
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
        if not name or not (_NAME.fullmatch(name) or _is_ip(name)):
            return None
    if rest and not (rest[1:].isascii() and rest[1:].isdigit() and len(rest) <= 6):
        return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _allowed_name(value: str) -> str:
    """An ``--allowed-host`` value checked and normalised (a name or address, no port)."""
    name = host_name(value)
    bare = value.strip().lower().strip("[]")
    if name is None or name != bare:
        raise ConfigError(
            f"--allowed-host takes a host name or address, without scheme or port: {value!r}"
        )
    return name


def _origin(value: str) -> str:
    """A ``--cors-origin`` value checked and normalised as browsers send it."""
    scheme, sep, rest = value.strip().lower().partition("://")
    if sep and scheme in ("http", "https") and host_name(rest) is not None:
        return f"{scheme}://{rest}"
    raise ConfigError(
        f"--cors-origin takes an origin, http(s)://host[:port] with no path: {value!r}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Owner hashes of the accepted tokens; empty: no authentication (loopback only).
    owners: frozenset[str] = frozenset()
    #: Host names a request's ``Host`` may carry besides the loopback ones: the ``--host``
    #: address and the ``--allowed-host`` names, lowercase, IPv6 without brackets.
    allowed_hosts: frozenset[str] = frozenset()
    max_body: int = 1024 * 1024
    heartbeat: float = 15.0
    #: Origins of other web pages allowed to call the API (CORS), as browsers send them.
    cors_origins: tuple[str, ...] = ()
    static_dir: Path = field(default=STATIC_DIR)

    @classmethod
    def build(
        cls,
        *,
        host: str,
        port: int,
        tokens: list[str],
        allowed_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
        sandbox_network: bool = False,
        **rest: object,
    ) -> ServerSettings:
        """The settings, or a :class:`ConfigError` naming the flag to add or fix.

        Beyond loopback a server needs a token and a host name; so does a server whose
        sandboxed commands may use the network, since they could reach it on loopback and
        answer their own permission requests.
        """
        tokens = [t for t in (t.strip() for t in tokens) if t]
        loopback = is_loopback(host)
        if not tokens and not loopback:
            raise ConfigError(
                f"listening on {host} needs a token: pass --token or set DROVER_TOKEN"
            )
        if not tokens and sandbox_network:
            raise ConfigError(
                "--sandbox-network lets commands reach this server: pass --token or set "
                "DROVER_TOKEN"
            )
        names = {_allowed_name(name) for name in allowed_hosts}
        if not names and not loopback:
            raise ConfigError(
                f"listening on {host} needs the name clients reach it by: pass --allowed-host NAME"
            )
        bound = host.strip().lower().strip("[]")
        if bound not in _UNSPECIFIED:
            names.add(bound)
        if not 0 <= port <= 65535:
            raise ConfigError(f"not a port number: {port}")
        owners = frozenset(token_owner(t) for t in tokens)
        origins = tuple(dict.fromkeys(_origin(o) for o in cors_origins))
        return cls(
            host=host,
            port=port,
            owners=owners,
            allowed_hosts=frozenset(names),
            cors_origins=origins,
            **rest,  # type: ignore[arg-type]
        )

    def host_allowed(self, name: str) -> bool:
        """Whether a request naming ``name`` (from :func:`host_name`) is meant for this server."""
        return name in self.allowed_hosts or is_loopback(name)
