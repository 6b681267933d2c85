"""What a ``POST /api/chat`` may hold (the ``ai`` package's ``DefaultChatTransport``): the
chat's id, its UI messages, the trigger — validated with these models (:mod:`.wire`), which
the schema is built from too.

A user message is taken by its text parts (``data-`` parts are left out; anything else is
refused: drover takes text), at least one of them not blank. An assistant message is one of
the chat's answers sent back: its parts are not read but for the approvals it answers
(:func:`drover.server.ai_sdk_routes.post_chat`). System messages are refused: the agent has
its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, Tag

from drover.core.messages import NOT_BLANK, blank
from drover.server.api_models import within_max
from drover.server.wire import Omittable, Says, Wire, refuse

#: What a door takes as a session's id, as a JSON Schema pattern.
ID_PATTERN = "^[A-Za-z0-9_-]{1,128}$"


class TextPart(Wire, extra="ignore"):
    type: Literal["text"]
    text: Annotated[str, Says("{where}: only text parts are taken, not 'text'")]


class DataPart(Wire, extra="ignore"):
    type: Annotated[str, Field(pattern="^data-")]


def _part(value: Any) -> Any:
    if not isinstance(value, dict):
        raise refuse("{where}: parts must be a list of objects")
    kind = value.get("type")
    if kind != "text" and not (isinstance(kind, str) and kind.startswith("data-")):
        raise refuse(f"{{where}}: only text parts are taken, not {str(kind)[:40]!r}")
    return value


def _part_kind(value: Any) -> str:
    return "text" if value.get("type") == "text" else "data"


Part = Annotated[
    Annotated[TextPart, Tag("text")] | Annotated[DataPart, Tag("data")],
    Discriminator(_part_kind),
    BeforeValidator(_part),
]


def _has_text(parts: list[TextPart | DataPart]) -> list[TextPart | DataPart]:
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    if blank(text):
        raise refuse("{where}: the user message has no text")
    within_max(text)
    return parts


class UserMessage(Wire, extra="ignore"):
    role: Literal["user"]
    parts: Annotated[
        list[Part],
        AfterValidator(_has_text),
        Says("{where}: parts must be a list of objects"),
    ] = Field(
        description="text parts (data- parts are left out), at least one not blank",
        json_schema_extra={
            "contains": {
                "type": "object",
                "required": ["type", "text"],
                "properties": {
                    "type": {"const": "text"},
                    "text": {"type": "string", "pattern": NOT_BLANK},
                },
            }
        },
    )
    id: Annotated[str, Says("{where}: id must be a string")]
    metadata: Any = None

    @property
    def text(self) -> str:
        """Its text parts, one per line."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


class AnswerMessage(Wire, extra="ignore"):
    role: Literal["assistant"]
    parts: Annotated[list[dict[str, Any]], Says("{where}: parts must be a list of objects")]
    id: Annotated[str, Says("{where}: id must be a string")]
    metadata: Any = None


def _message(value: Any) -> Any:
    if not isinstance(value, dict):
        raise refuse("{where} is not an object")
    role = value.get("role")
    if role == "system":
        raise refuse("{where}: system messages are not taken (the agent has its own)")
    if role not in ("user", "assistant"):
        raise refuse("{where}: role must be user or assistant")
    return value


def _role(value: Any) -> str:
    return str(value.get("role"))


ChatMessage = Annotated[
    Annotated[UserMessage, Tag("user")] | Annotated[AnswerMessage, Tag("assistant")],
    Discriminator(_role),
    BeforeValidator(_message),
]


def _no_regenerate(value: Any) -> Any:
    if value == "regenerate-message":
        raise refuse("regenerate-message is not supported: drover keeps every turn")
    return value


class ChatRequest(Wire):
    positions: ClassVar[Mapping[str, str]] = {"messages": "message {n}"}

    id: Annotated[
        str,
        Field(pattern=ID_PATTERN),
        Says(
            "id must be 1-128 letters, digits, - and _ (the chat's session id)",
            kind="id must be a str",
        ),
    ]
    trigger: Annotated[
        Literal["submit-message"],
        BeforeValidator(_no_regenerate),
        Says("trigger must be submit-message", kind="trigger must be a str"),
    ] = "submit-message"
    messages: Annotated[
        list[ChatMessage],
        Field(min_length=1),
        Says("messages must be a non-empty list of UI messages", kind="messages must be a list"),
    ]
    messageId: Omittable[str] = None
