"""What the server refuses before any route runs: requests a web page could make on someone
else's behalf.

A browser lets any page send requests to any address, the user's loopback included, and a
page can make its own name resolve to 127.0.0.1 (DNS rebinding) to read the answers. So, on
every request, in this order:

* the ``Host`` header must name this server — a loopback name or address, the ``--host``
  address or an ``--allowed-host`` name (any port) — else 421: a rebinding page can choose its
  port but not the name the browser puts in ``Host``;
* a request that may change something (any method but GET, HEAD and OPTIONS), and every
  request outside the public files (the page, ``/static``, ``/openapi.json``), is refused with
  403 when it carries an ``Origin`` that is neither the server's own (``http`` or ``https``
  and the ``Host`` it was reached by) nor a ``--cors-origin``; without an ``Origin``, a
  ``Sec-Fetch-Site`` of ``cross-site`` or ``same-site`` (another port is the same site) is
  refused the same way.

The third rule needs the route, so it is in the handlers' body reader
(:func:`drover.server.bodies.json_body`): a route that takes a body takes it only as
``Content-Type: application/json``, even when it is empty. A route that takes none (a cancel,
an interrupt) also takes a request with no body at all
(:func:`~drover.server.bodies.empty_body`), as HTTP clients send one; a page on another site
sending it is refused by the ``Origin`` and ``Sec-Fetch-Site`` rule above, which the browser
fills in itself.

A pure ASGI middleware, outermost, so that nothing — CORS preflights, errors, the event
stream — is answered before the checks.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from drover.server.config import ServerSettings, host_name
from drover.server.errors import ApiError

#: Methods that only read; every other one may change something.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: What a page may read from any origin: the web page, its files, the schema.
PUBLIC_PATHS = frozenset({"/", "/openapi.json"})
PUBLIC_PREFIX = "/static/"
_SHOWN = 100  # characters of a refused value put in the error message


def refusal(scope: Scope, settings: ServerSettings) -> ApiError | None:
    """Why the request of ``scope`` is refused; None when it may go on."""
    headers = Headers(scope=scope)
    host = headers.get("host", "")
    name = host_name(host)
    if name is None or not settings.host_allowed(name):
        return ApiError(
            421,
            "misdirected_request",
            f"this server does not answer to the host {host[:_SHOWN]!r} "
            "(start it with --allowed-host NAME to add a name)",
        )
    method = scope.get("method", "GET")  # a WebSocket handshake is a GET
    path = scope["path"]
    public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)
    if method not in SAFE_METHODS or not public:
        origin = headers.get("origin")
        if origin is not None:
            if not _same_origin(origin, host) and origin not in settings.cors_origins:
                return ApiError(
                    403,
                    "forbidden_origin",
                    f"requests from the origin {origin[:_SHOWN]!r} are refused "
                    "(start the server with --cors-origin ORIGIN to allow a web page)",
                )
        elif headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return ApiError(403, "forbidden_origin", "requests from other sites are refused")
    return None


def _same_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` is the server as the client reached it. Either scheme: a TLS proxy
    in front changes it, and another scheme on the same host and port is the same server."""
    scheme, sep, rest = origin.lower().partition("://")
    return bool(sep) and scheme in ("http", "https") and rest == host.strip().lower()


class Guard:
    """The ASGI middleware applying :func:`refusal` to every request; a refused WebSocket
    handshake is closed before it is accepted (the server answers it with a 403)."""

    def __init__(self, app: ASGIApp, *, settings: ServerSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        error = refusal(scope, self.settings) if kind in ("http", "websocket") else None
        if error is None:
            await self.app(scope, receive, send)
        elif kind == "http":
            await error.response()(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": error.code})
