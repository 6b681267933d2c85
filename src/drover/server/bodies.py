"""Request bodies and query strings: a body read with a size limit before it is parsed, as a
JSON object its route's model validates (:mod:`.wire`: known fields only — a typo is an error,
not a silent default — of the types the schema says); a query string validated alike. Every
route that takes a body reads it here, before it acts."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request

from drover.core.messages import mend_json
from drover.server.api_models import Empty
from drover.server.config import ServerSettings
from drover.server.errors import ApiError
from drover.server.wire import Wire, api_error

_M = TypeVar("_M", bound=Wire)

#: A ``\\u`` escape of a UTF-16 surrogate in JSON text (the body's bytes).
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def json_body(request: Request, model: type[_M]) -> _M:
    """The JSON object of the body, as ``model`` takes it (422 saying what is wrong with it);
    an empty body is ``{}``. Every route that takes a body reads it here, before it acts.

    The body must come as ``Content-Type: application/json``, even when it is empty: the
    requests a web page may send to another origin without asking it first (a form, a
    ``no-cors`` fetch) can only be ``text/plain``, form-encoded or untyped, so none of them
    gets past this.
    """
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415, "unsupported_media_type", "the body must be sent as Content-Type: application/json"
        )
    limit = _max_body(request)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:  # only a body of no bytes: one of white space is not JSON
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # (nested past the stack)
            raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
        # ``json`` joins a pair written as two escapes and keeps a lone half, which no
        # journal can write: mending changes the value only where such a half is.
        if _ESCAPED_SURROGATE.search(raw) and mend_json(data) != data:
            raise ApiError(
                400,
                "invalid_json",
                "the body holds half of a UTF-16 surrogate pair (a \\ud800-\\udfff escape "
                "without its partner), which is not text",
            )
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object")
    return valid(model, data)


def valid(model: type[_M], data: Mapping[str, Any], *, status: int = 422) -> _M:
    """``data`` as ``model`` takes it; ``status`` the answer's when it does not (422 for a
    body, 400 for a query string or headers)."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise api_error(exc, status=status) from None


def query_of(request: Request, model: type[_M]) -> _M:
    """The query string as ``model`` takes it (400 otherwise; names it does not have are
    left alone)."""
    return valid(model, request.query_params, status=400)


def headers_of(request: Request, model: type[_M]) -> _M:
    """The headers ``model`` names, as it takes them (400 otherwise)."""
    names = {field.alias or name for name, field in model.model_fields.items()}
    given = {name: request.headers[name] for name in names if name in request.headers}
    return valid(model, given, status=400)


async def empty_body(request: Request) -> None:
    """The body of a route that takes none: ``{}`` as JSON (:func:`json_body`), or nothing
    at all — no ``Content-Type``, no byte — as clients send a POST with no body (the ``openai``
    npm SDK's ``responses.cancel``). A web page can send such a request anywhere, but not
    with another origin's ``Origin`` or ``Sec-Fetch-Site`` left out: the guard refuses it."""
    if "content-type" in request.headers:
        await json_body(request, Empty)
        return
    declared = request.headers.get("content-length", "0")
    if declared != "0" or "transfer-encoding" in request.headers:
        raise ApiError(
            415, "unsupported_media_type", "the body must be sent as Content-Type: application/json"
        )


def _max_body(request: Request) -> int:
    settings: ServerSettings = request.app.state.settings
    return settings.max_body
