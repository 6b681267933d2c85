"""The models of what drover's own routes (``/v1/sessions…``) take: their bodies, query
strings and headers, validated with these models (:mod:`.wire`) — and described by them in the
schema (:mod:`.openapi`; what they answer is :mod:`.answers`')."""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from drover.core.events import Decision
from drover.core.messages import NOT_BLANK
from drover.journal.rules import MAX_TITLE_CHARS, user_title
from drover.runtime.queue import IfBusy
from drover.server.wire import Omittable, Says, Wire, refuse

#: Most characters one message may hold.
MAX_CONTENT = 200_000
#: Most sessions one listing gives.
MAX_LIST = 200
#: A pattern a text matches when it holds a character that is not white space to Python's
#: ``str.isspace`` (what ``str.split`` and ``str.strip`` take away), written out so that every
#: regex engine reads the same class (a client validating with the schema, pydantic here).
NOT_SPACE = (
    r"[^\t\n\v\f\r \u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f"
    r"\u205f\u3000]"
)


def within_max(text: str, where: str = "{where}") -> str:
    """``text`` if the server takes that much of it (413 otherwise)."""
    if len(text) > MAX_CONTENT:
        raise refuse(f"{where} is over {MAX_CONTENT} characters", too_large=True)
    return text


def _title(value: Any, checked: ValidatorFunctionWrapHandler) -> str:
    """A title as the journal keeps it (on one line), once the schema's checks took it; the
    journal's rule says why it does not."""
    try:
        text = checked(value)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "string_type":
            raise
        try:
            user_title(value)
        except ValueError as why:
            raise refuse(str(why)) from None
        raise refuse(
            f"a title is at most {MAX_TITLE_CHARS} characters ({len(value)} given)"
        ) from None
    return user_title(text)


def _content(text: str) -> str:
    return within_max(text, "content")


def whole_number(says: str) -> BeforeValidator:
    """A query string's whole number (``?limit=20``): digits only (no sign, no space), at most
    18 of them; anything else is refused with ``says``."""

    def read(text: Any) -> int:
        if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 18:
            return int(text)
        raise refuse(says)

    return BeforeValidator(read)


# -- bodies ---------------------------------------------------------------------------------------


class Empty(Wire):
    """No field: an empty object."""


class Rename(Wire):
    title: Annotated[
        str,
        Field(min_length=1, max_length=MAX_TITLE_CHARS, pattern=NOT_SPACE),
        WrapValidator(_title),
    ]


class PostMessage(Wire):
    content: Annotated[
        str,
        Field(min_length=1, pattern=NOT_BLANK),
        AfterValidator(_content),
        Says("content must be a non-empty string", kind="content must be a str"),
    ]
    webhook: Omittable[str] = Field(
        default=None,
        description="http(s) URL told of this turn's end (signed, retried; its origin must be "
        "allowed by the server's operator)",
    )
    if_busy: IfBusy = "reject"


_DECISIONS: tuple[str, ...] = get_args(Decision)


class Decide(Wire):
    decision: Annotated[
        Decision,
        Says(f"decision must be one of {', '.join(_DECISIONS)}", kind="decision must be a str"),
    ]


class Fork(Wire):
    turn_id: Omittable[str] = None


class Rewind(Wire):
    turn_id: str
    files: bool = True
    force: bool = False
    dry_run: bool = False


# -- query strings and headers -------------------------------------------------------------------


class ListQuery(Wire, extra="ignore"):
    limit: Annotated[
        int,
        Field(ge=1, le=MAX_LIST),
        whole_number("limit must be a whole number ≥ 0"),
        Says(f"limit must be between 1 and {MAX_LIST}"),
    ] = MAX_LIST


class EventsQuery(Wire, extra="ignore"):
    after: Annotated[int, Field(ge=0), whole_number("after must be a whole number ≥ 0")] = 0
    token: Omittable[str] = Field(
        default=None, description="the bearer token, for a client that cannot send headers"
    )


def _blank_or_whole(text: str) -> str:
    """The header's number, or nothing (blank: as if left out)."""
    text = text.strip()
    if text and not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise refuse("Last-Event-ID must be a whole number ≥ 0")
    return text


class EventsHeaders(Wire, extra="ignore"):
    last_event_id: Annotated[Omittable[str], AfterValidator(_blank_or_whole)] = Field(
        default=None,
        alias="Last-Event-ID",
        description="the id of the last event received: the stream goes on after it (before "
        "?after=); blank is as if left out",
    )


class MessageHeaders(Wire, extra="ignore"):
    traceparent: Omittable[str] = Field(
        default=None,
        description="W3C trace context: the parent of the turn's span when the server exports "
        "traces",
    )


class RevokeQuery(Wire, extra="ignore"):
    rule: Annotated[
        Omittable[Annotated[str, Field(pattern=NOT_SPACE)]], Says("rule must not be empty")
    ] = Field(default=None, description="the rule to withdraw (default: every grant)")
