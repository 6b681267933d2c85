"""The ASGI application: the guard, routes, JSON errors for every failure, optional CORS.

No ``BaseHTTPMiddleware`` (it breaks streaming): the guard (:mod:`.guard`) is a pure ASGI
middleware, outermost; errors are exception handlers; CORS is Starlette's pure ASGI middleware
and only there when origins are configured.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from drover.server import ai_sdk_routes, responses_routes, routes
from drover.server.config import ServerSettings
from drover.server.errors import ApiError
from drover.server.guard import Guard
from drover.server.service import Service

log = logging.getLogger(__name__)

_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODES.get(exc.status_code, "http_error")
    response = ApiError(exc.status_code, code, str(exc.detail)).response()
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return ApiError(500, "internal", "internal error").response()


def create_app(service: Service, settings: ServerSettings) -> Starlette:
    sid = "/v1/sessions/{session_id}"
    table = [
        Route("/", routes.index, methods=["GET"]),
        Route("/openapi.json", routes.openapi, methods=["GET"]),
        Route("/metrics", routes.metrics, methods=["GET"]),
        Route("/v1/sessions", routes.sessions, methods=["GET", "POST"]),
        Route(sid, routes.session, methods=["GET", "PATCH", "DELETE"]),
        Route(f"{sid}/messages", routes.post_message, methods=["POST"]),
        Route(f"{sid}/interrupt", routes.interrupt, methods=["POST"]),
        Route(f"{sid}/fork", routes.fork, methods=["POST"]),
        Route(f"{sid}/rewind", routes.rewind, methods=["POST"]),
        Route(f"{sid}/queue/{{message_id}}", routes.cancel_queued, methods=["DELETE"]),
        Route(f"{sid}/permissions", routes.permissions, methods=["GET", "DELETE"]),
        Route(f"{sid}/permissions/{{request_id}}", routes.decide, methods=["POST"]),
        Route(f"{sid}/events", routes.events, methods=["GET"]),
        # The AI SDK's UI message stream (useChat) and OpenAI-style responses.
        Route("/api/chat", ai_sdk_routes.post_chat, methods=["POST"]),
        Route("/api/chat/{chat_id}/stream", ai_sdk_routes.resume_chat, methods=["GET"]),
        Route("/v1/responses", responses_routes.create, methods=["POST"]),
        Route("/v1/responses/{response_id}", responses_routes.response, methods=["GET", "DELETE"]),
        Route(
            "/v1/responses/{response_id}/input_items",
            responses_routes.input_items,
            methods=["GET"],
        ),
        Route("/v1/responses/{response_id}/cancel", responses_routes.cancel, methods=["POST"]),
        # The web page's scripts and stylesheet (public files, like the page itself).
        Mount("/static", app=StaticFiles(directory=settings.static_dir), name="static"),
    ]
    middleware = [Middleware(Guard, settings=settings)]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            )
        )
    app = Starlette(
        routes=table,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
    )
    app.state.service = service
    app.state.settings = settings
    return app
