"""Request bodies: read with a size limit before they are parsed, as JSON objects of known
fields only (a typo is an error, not a silent default), and the limits of what they hold.
Every route that takes a body reads it here, before it acts."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from drover.core.messages import mend_json
from drover.server.config import ServerSettings
from drover.server.errors import ApiError

#: Most characters one message may hold.
MAX_CONTENT = 200_000


#: A ``\\u`` escape of a UTF-16 surrogate in JSON text (the body's bytes).
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def json_body(request: Request, fields: dict[str, type]) -> dict[str, Any]:
    """The JSON object of the body, with only ``fields`` (checked for type); an empty body is
    ``{}``. Every route that takes a body reads it here, before it acts.

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
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field: {unknown[0]}")
    for name, kind in fields.items():
        if name in data and not isinstance(data[name], kind):
            raise ApiError(422, "invalid_request", f"{name} must be a {kind.__name__}")
    return data


async def empty_body(request: Request) -> None:
    """The body of a route that takes none: ``{}`` as JSON (:func:`json_body`), or nothing
    at all — no ``Content-Type``, no byte — as clients send a POST with no body (the ``openai``
    npm SDK's ``responses.cancel``). A web page can send such a request anywhere, but not
    with another origin's ``Origin`` or ``Sec-Fetch-Site`` left out: the guard refuses it."""
    if "content-type" in request.headers:
        await json_body(request, {})
        return
    declared = request.headers.get("content-length", "0")
    if declared != "0" or "transfer-encoding" in request.headers:
        raise ApiError(
            415, "unsupported_media_type", "the body must be sent as Content-Type: application/json"
        )


def _max_body(request: Request) -> int:
    settings: ServerSettings = request.app.state.settings
    return settings.max_body
