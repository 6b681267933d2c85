"""The guard on a WebSocket handshake: the server has no WebSocket route yet, so the guard is
driven as the ASGI callable it is, around a tiny app that would accept the connection."""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Receive, Scope, Send

from drover.server.config import ServerSettings
from drover.server.guard import Guard


async def _accepting(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    await send({"type": "websocket.accept"})


async def _handshake(host: str, origin: str | None) -> list[Message]:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    scope: dict[str, Any] = {"type": "websocket", "path": "/v1/live", "headers": headers}
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    guard = Guard(_accepting, settings=ServerSettings.build(host="127.0.0.1", port=0, tokens=[]))
    await guard(scope, receive, send)
    return sent


async def test_a_websocket_handshake_is_guarded_like_a_request() -> None:
    assert await _handshake("127.0.0.1:8000", None) == [{"type": "websocket.accept"}]
    own = await _handshake("127.0.0.1:8000", "http://127.0.0.1:8000")
    assert own == [{"type": "websocket.accept"}]
    for host, origin, code in [
        ("rebind.example:8000", "http://rebind.example:8000", "misdirected_request"),
        ("127.0.0.1:8000", "http://127.0.0.1:9000", "forbidden_origin"),
    ]:
        closed = await _handshake(host, origin)
        assert closed == [{"type": "websocket.close", "code": 1008, "reason": code}]
