"""The server's settings (from ``drover serve`` flags), with the rule on tokens and addresses."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from drover.errors import ConfigError

STATIC_DIR = Path(__file__).parent / "static"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Owner hashes of the accepted tokens; empty: no authentication (loopback only).
    owners: frozenset[str] = frozenset()
    max_body: int = 1024 * 1024
    heartbeat: float = 15.0
    cors_origins: tuple[str, ...] = ()
    static_dir: Path = field(default=STATIC_DIR)

    @classmethod
    def build(cls, *, host: str, port: int, tokens: list[str], **rest: object) -> ServerSettings:
        tokens = [t for t in (t.strip() for t in tokens) if t]
        if not tokens and not is_loopback(host):
            raise ConfigError(
                f"listening on {host} needs a token: pass --token or set DROVER_TOKEN"
            )
        if not 0 <= port <= 65535:
            raise ConfigError(f"not a port number: {port}")
        owners = frozenset(token_owner(t) for t in tokens)
        return cls(host=host, port=port, owners=owners, **rest)  # type: ignore[arg-type]
