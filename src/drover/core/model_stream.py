"""Neutral stream types: what a model is asked, and the events its answer streams as.

A provider (:mod:`drover.providers`) turns one :class:`ModelRequest` into a stream of the
:data:`StreamEvent` values below; :mod:`drover.core.accumulate` reduces them into content blocks.
They belong to the core so that the accumulator, the tool registry and the loop need nothing
from the provider layer but its :class:`~drover.providers.base.Provider` protocol.

Contract of a stream:

* Before the first event it may retry retryable failures (429, 5xx, 529, connection errors),
  yielding a :class:`RetryNotice` before each new attempt.
* Content blocks are announced with :class:`BlockStart`, filled with :class:`BlockDelta` and
  closed with :class:`BlockStop`, keyed by an integer ``index`` unique within one response.
  Indexes need not be contiguous.
* It ends with exactly one :class:`StreamEnd` on success. Any failure is raised as a
  :class:`drover.errors.ProviderError` (``StreamError`` once events were yielded); the consumer
  keeps whatever it accumulated until then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from drover.core.messages import Message, Meta, Usage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """The JSON the model's final answer must be (structured output): a name for the format
    and the JSON schema of a pydantic model, as pydantic writes it. Each provider adapts the
    schema to its protocol's native structured output."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    max_tokens: int = 8192
    #: Retries left for this model call, shared by the provider (failures before the stream
    #: starts) and the loop (failures after it started). None: the provider's own policy.
    retry_budget: RetryBudget | None = None
    #: When set, the answer's text must be JSON of this format (None: free text).
    output: OutputSpec | None = None


@dataclass(slots=True)
class RetryBudget:
    """The retries one model call may still make, whichever layer makes them."""

    limit: int
    used: int = 0

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def spend(self) -> bool:
        """Take one retry; False (and nothing taken) when none is left."""
        if self.used >= self.limit:
            return False
        self.used += 1
        return True


BlockKind: TypeAlias = Literal["text", "thinking", "tool_use"]
DeltaKind: TypeAlias = Literal["text", "thinking", "signature", "input_json"]

#: Normalised reasons a response stopped. Providers map their own vocabulary onto these.
StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal", "other"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryNotice:
    """A failed attempt will be retried after ``delay`` seconds (nothing was streamed yet)."""

    attempt: int
    delay: float
    error: str
    type: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockStart:
    index: int
    kind: BlockKind
    #: Tool-use id and name; both may be empty for text and thinking blocks.
    id: str = ""
    name: str = ""
    meta: Meta = field(default_factory=dict)
    type: Literal["block_start"] = "block_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockDelta:
    index: int
    kind: DeltaKind
    data: str
    type: Literal["block_delta"] = "block_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockStop:
    index: int
    #: Detail learnt only at the end of the block (e.g. a Responses item), merged into its meta.
    meta: Meta = field(default_factory=dict)
    #: For blocks delivered whole (e.g. redacted thinking), the final data of the block.
    data: str | None = None
    type: Literal["block_stop"] = "block_stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageUpdate:
    """Usage known so far (e.g. input tokens at message start); later updates supersede it."""

    usage: Usage
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    stop_reason: StopReason
    usage: Usage
    #: Message-level detail to keep on the assistant message (response id, model…).
    meta: Meta = field(default_factory=dict)
    type: Literal["end"] = "end"


StreamEvent: TypeAlias = RetryNotice | BlockStart | BlockDelta | BlockStop | UsageUpdate | StreamEnd
