"""A loopback port that nothing listens on: bound to find one free, then released.

The servers the tests start (PostgreSQL, Redis, nginx, MCP servers) listen on one; a test of
a refused connection points a client at one. Another process can take the port between its
release and its use, which on a test machine does not happen in practice."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
