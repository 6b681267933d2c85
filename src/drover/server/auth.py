"""Bearer tokens: who is asking. A session belongs to the token that created it.

The browser's ``EventSource`` cannot set headers, so the events route also takes the token as
``?token=``. Tokens are compared by their SHA-256 (the owner id a session records) in constant
time, against every accepted token with no early exit.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from drover.server.config import ServerSettings, token_owner
from drover.server.errors import ApiError


def principal(request: Request) -> str | None:
    """The owner id of the request's token; None when the server runs without tokens."""
    settings: ServerSettings = request.app.state.settings
    if not settings.owners:
        return None
    token = None
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        token = value.strip()
    elif request.url.path.endswith("/events"):
        token = request.query_params.get("token")
    if token:
        owner = token_owner(token)
        if known_owner(owner, settings.owners):
            return owner
    raise ApiError(401, "unauthorized", "a valid bearer token is required")


def known_owner(owner: str, owners: frozenset[str]) -> bool:
    """Whether ``owner`` is one of ``owners``, in a time that does not depend on which one
    nor on how much of it matches: every known owner is compared, in constant time."""
    found = False
    for known in owners:
        found |= hmac.compare_digest(owner.encode(), known.encode())
    return found
