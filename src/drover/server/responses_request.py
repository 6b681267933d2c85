"""What a ``POST /v1/responses`` may hold, and the query strings of the other routes of the
Responses door: the models the routes validate with (:mod:`.wire`) and the schema is built
from.

The fields. drover takes ``model`` (any name: the server's agent runs the turn), ``input``,
``stream``, ``background``, ``store`` (true), ``stream_options`` and where the turn runs
(``previous_response_id``, ``conversation``). The other fields of the API are settings of a
model or a client's tools, which the server's agent decides: each is taken only with a value
that changes nothing — null for every one (the API's "not given"); the values the frameworks
send by default (``include: []``, ``tools: []``, ``tool_choice: "auto"``,
``parallel_tool_calls: true``); identifiers and hints that ask nothing of the agent (``user``,
``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``); and the values drover
keeps anyway (``truncation: "auto"`` — drover compacts a conversation that outgrows the
model's context —, ``text`` as plain text, ``reasoning`` with nothing set, ``metadata: {}``,
``service_tier`` ``auto``/``default``, ``top_logprobs: 0``, ``include`` of
``reasoning.encrypted_content``, since no reasoning item is sent). Any other value is refused
with a 422 naming the field (:class:`NoOp` says why); a field the API does not have is refused
as unknown.

The input: a string, or a list of items ending with the new user message (string content or
``input_text`` parts). The items before it are the history the client holds
(:mod:`.responses_input` reads it): user messages, the assistant messages and ``mcp_call``
items of drover's answers (their content is not read). System and developer messages, the
client's own tool calls and outputs, and other items are refused by type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

from drover.core.messages import NOT_BLANK, blank
from drover.server.api_models import whole_number, within_max
from drover.server.chat_request import ID_PATTERN
from drover.server.wire import Omittable, Says, Wire, refuse

_TAKES = "drover takes model, input, stream, background, store, conversation, previous_response_id"


@dataclass(frozen=True, slots=True)
class NoOp:
    """A field of the API drover takes only with a value that changes nothing (its type says
    which, null always): any other is refused saying ``why``."""

    why: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def _validate(self, value: Any, inner: Callable[[Any], Any]) -> Any:
        try:
            return inner(value)
        except ValidationError:
            why = f"{{field}} {_shown(value)} is not supported: {self.why} ({_TAKES})"
            raise refuse(why) from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _bool(value: Any) -> Any:
    """A boolean, not a number equal to one (``Literal[True]`` takes 1)."""
    if type(value) is not bool:
        raise ValueError("not a boolean")
    return value


def _number(value: Any) -> Any:
    """A number, not a boolean equal to one (``Literal[0]`` takes false)."""
    if type(value) not in (int, float):
        raise ValueError("not a number")
    return value


class _Strict(BaseModel):
    """An object of fixed fields whose refusal is its field's (:class:`Says`, :class:`NoOp`)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


class TextFormat(_Strict):
    type: Literal["text"]


class TextOptions(_Strict):
    format: Omittable[TextFormat] = None
    verbosity: None = None


class StreamOptions(_Strict):
    include_obfuscation: Omittable[bool] = None


class ConversationRef(_Strict):
    id: Annotated[str, Field(pattern=ID_PATTERN)]


_Text = Annotated[str, Field(pattern=NOT_BLANK)]


def _input_text(value: Any) -> Any:
    if not isinstance(value, dict) or value.get("type") != "input_text":
        kind = value.get("type") if isinstance(value, dict) else value
        raise refuse(f"{{where}}: only input_text content is taken, not {str(kind)[:40]!r}")
    return value


class InputTextPart(Wire):
    unknown = '{where}: an input_text part is {"type": "input_text", "text"}'

    type: Literal["input_text"]
    text: Annotated[str, Says('{where}: an input_text part is {"type": "input_text", "text"}')]


def _joined(parts: list[InputTextPart]) -> list[InputTextPart]:
    text = "\n".join(p.text for p in parts)
    if blank(text):
        raise ValueError("blank")
    within_max(text)
    return parts


def _text_or_parts(value: Any) -> str:
    return "parts" if isinstance(value, list) else "text"


class UserItem(Wire):
    """A user message of the input: the new one at its end, or one of its history."""

    unknown = "unsupported field in {where}: {field}"

    type: Literal["message"] = "message"
    role: Literal["user"]
    id: Annotated[Omittable[str], Says("{where}: a user message's id and status are strings")] = (
        None
    )
    status: Annotated[
        Omittable[str], Says("{where}: a user message's id and status are strings")
    ] = None
    content: Annotated[
        Annotated[_Text, AfterValidator(within_max), Tag("text")]
        | Annotated[
            list[Annotated[InputTextPart, BeforeValidator(_input_text)]],
            Field(
                min_length=1,
                json_schema_extra={
                    "contains": {"properties": {"text": {"type": "string", "pattern": NOT_BLANK}}}
                },
            ),
            AfterValidator(_joined),
            Tag("parts"),
        ],
        Discriminator(_text_or_parts),
        Says("{where} must be a non-empty string or a user message"),
    ]

    @property
    def text(self) -> str:
        """Its text (its parts', one per line)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content)


class AnswerItem(Wire, extra="ignore"):
    """An item of an answer of drover's sent back in a history (its id names the response;
    its content is not read: the journal's is the durable one)."""

    type: Literal["message"] = "message"
    role: Literal["assistant"]
    id: Any = None


class McpCallItem(Wire, extra="ignore"):
    """A tool call drover ran, sent back in a history (its id names the response)."""

    type: Literal["mcp_call"]
    id: Annotated[str, Says("{where}: an mcp_call item has its id")]


def _item(value: Any) -> Any:
    if not isinstance(value, dict):
        raise refuse("{where} is not an object")
    kind = value.get("type", "message")
    if kind == "mcp_call":
        return value
    if kind != "message":
        raise refuse(
            f"{{where}}: {str(kind)[:40]} items are not taken (drover runs its own tools and "
            "keeps its own history)"
        )
    role = value.get("role")
    if role in ("system", "developer"):
        raise refuse(f"{{where}}: {role} messages are not taken (the agent has its own)")
    if role not in ("user", "assistant"):
        raise refuse("{where}: role must be user or assistant")
    return value


def _item_kind(value: Any) -> str:
    return "mcp_call" if value.get("type") == "mcp_call" else str(value["role"])


InputItem = Annotated[
    Annotated[UserItem, Tag("user")]
    | Annotated[AnswerItem, Tag("assistant")]
    | Annotated[McpCallItem, Tag("mcp_call")],
    Discriminator(_item_kind),
    BeforeValidator(_item),
]


def _input_kind(value: Any) -> str:
    return "items" if value is None or isinstance(value, list) else "text"


def _input(text: str) -> str:
    return within_max(text, "input")


class ResponsesRequest(Wire):
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["previous_response_id", "conversation"],
                "properties": {
                    "previous_response_id": {"type": "string"},
                    "conversation": {"not": {"type": "null"}},
                },
            }
        }
    )
    positions: ClassVar[Mapping[str, str]] = {"input": "input item {n}"}

    model: Annotated[
        str,
        Field(min_length=1),
        Says(
            "model is required (any name: the server's agent runs the turn)",
            kind="model must be a string",
        ),
    ]
    input: Annotated[
        Annotated[
            _Text,
            AfterValidator(_input),
            Says(
                "input must be a non-empty string or a user message",
                kind="input must be a string or a list of items",
            ),
            Tag("text"),
        ]
        | Annotated[
            list[InputItem],
            Field(
                min_length=1,
                description="the history the client holds (the conversation's own) and, "
                "at its end, the new user message",
            ),
            Tag("items"),
        ],
        Discriminator(_input_kind),
        Says("input must be a non-empty string or a list of items"),
    ]
    background: Annotated[bool | None, Says("background must be true or false")] = None
    stream: Annotated[bool | None, Says("stream must be true or false")] = None
    store: Annotated[
        Annotated[Literal[True], BeforeValidator(_bool)] | None,
        Says(
            "store must be true: drover's journal keeps every response", kind="store must be true"
        ),
    ] = None
    previous_response_id: Annotated[
        str | None, Says("previous_response_id must be a response id")
    ] = None
    conversation: Annotated[
        Annotated[str, Field(pattern=ID_PATTERN)] | ConversationRef | None,
        Says(
            'conversation must be a session id (or {"id": ...})',
            kind='conversation must be a conversation id or {"id": ...}',
        ),
    ] = None
    stream_options: Annotated[
        StreamOptions | None,
        Says(
            "stream_options takes only include_obfuscation, true or false",
            kind="stream_options must be an object",
        ),
    ] = None
    # The fields taken only with a value that changes nothing.
    include: Annotated[
        list[Literal["reasoning.encrypted_content"]] | None,
        NoOp("drover sends no reasoning, logprobs or hosted tool results to include"),
    ] = None
    tools: Annotated[
        Annotated[list[Any], Field(max_length=0)] | None,
        NoOp("drover's agent runs its own tools; a client's are not taken"),
    ] = None
    tool_choice: Annotated[
        Literal["auto"] | None, NoOp("drover's agent decides which tools it calls")
    ] = None
    parallel_tool_calls: Annotated[
        Annotated[Literal[True], BeforeValidator(_bool)] | None,
        NoOp("drover runs a model's calls in parallel"),
    ] = None
    top_logprobs: Annotated[
        Annotated[Literal[0], BeforeValidator(_number)] | None, NoOp("drover sends no logprobs")
    ] = None
    reasoning: Annotated[
        dict[str, None] | None, NoOp("the server's agent sets its model's reasoning")
    ] = None
    text: Annotated[TextOptions | None, NoOp("drover answers in plain text")] = None
    truncation: Annotated[
        Literal["auto"] | None, NoOp("drover compacts a conversation that grows too long")
    ] = None
    metadata: Annotated[
        Annotated[dict[str, Any], Field(max_length=0)] | None,
        NoOp("drover does not keep a response's metadata"),
    ] = None
    service_tier: Annotated[
        Literal["auto", "default"] | None, NoOp("the server's agent picks its service")
    ] = None
    user: Annotated[str | None, NoOp("user is an end user's identifier")] = None
    safety_identifier: Annotated[
        str | None, NoOp("safety_identifier is an end user's identifier")
    ] = None
    prompt_cache_key: Annotated[str | None, NoOp("prompt_cache_key is a hint")] = None
    prompt_cache_retention: Annotated[str | None, NoOp("prompt_cache_retention is a hint")] = None
    # The fields taken only as null (not given): what each would change.
    max_tool_calls: Annotated[None, NoOp("the server's --max-turns limits a turn")] = None
    instructions: Annotated[None, NoOp("the server's agent has its own instructions")] = None
    max_output_tokens: Annotated[None, NoOp("the server's agent sets its model's limits")] = None
    temperature: Annotated[None, NoOp("the server's agent sets its model's sampling")] = None
    top_p: Annotated[None, NoOp("the server's agent sets its model's sampling")] = None
    prompt: Annotated[None, NoOp("the server's agent has its own prompt")] = None
    context_management: Annotated[None, NoOp("drover manages the conversation's context")] = None
    moderation: Annotated[None, NoOp("drover does not moderate")] = None
    background_options: Annotated[None, NoOp("drover runs every response in the background")] = None
    prompt_cache_options: Annotated[None, NoOp("the server's agent sets its model's caching")] = (
        None
    )
    access_programs: Annotated[None, NoOp("drover's agent runs its own tools")] = None
    image: Annotated[None, NoOp("drover takes text")] = None

    @model_validator(mode="after")
    def _one_place(self) -> ResponsesRequest:
        if self.previous_response_id is not None and self.conversation is not None:
            raise refuse("give previous_response_id or conversation, not both")
        return self

    @property
    def conversation_id(self) -> str | None:
        """The session ``conversation`` names (None: not given)."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation


# -- the query strings of the other routes ---------------------------------------------------------


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class RetrieveQuery(Wire, extra="ignore"):
    stream: Annotated[
        Literal["true", "false"], BeforeValidator(_lower), Says("stream must be true or false")
    ] = "false"
    starting_after: Omittable[
        Annotated[int, Field(ge=0), whole_number("starting_after must be a whole number ≥ 0")]
    ] = None


class ItemsQuery(Wire, extra="ignore"):
    limit: Annotated[
        int,
        Field(ge=1, le=100),
        whole_number("limit must be a whole number from 1 to 100"),
        Says("limit must be a whole number from 1 to 100"),
    ] = 20
    order: Annotated[Literal["asc", "desc"], Says("order must be asc or desc")] = "desc"
    after: Omittable[str] = None
