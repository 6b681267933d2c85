"""History clean-up every request conversion starts with, on neutral messages.

Each API refuses a history where a tool call has no result or a result answers no call, and
the Anthropic and Chat APIs want a call's results right after it. drover's loop keeps its
histories that way, but a history can still arrive bent — blocks another protocol cannot take
(unsigned thinking), a message left empty by that, two assistant messages in a row after a
provider switch. :func:`normalise_history` straightens it so that:

* blocks the target cannot take are dropped (``keep``), and messages left empty with them;
* consecutive messages of one role are merged (``merge``; the Responses API, whose input is a
  flat item list, does not need it);
* every ``tool_use`` of an assistant message has a result at the start of the next user
  message — a missing one becomes an error result saying the call never finished;
* a ``tool_result`` that answers no call of the message before becomes plain text, so its
  content is not lost, and a repeated result is dropped.

The result is deterministic: the same history always gives the same request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from drover.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    answers_in_order,
)

#: The result given to a tool call whose result is missing from the history.
MISSING_RESULT_TEXT = "The tool call was interrupted before it produced a result."

KeepBlock = Callable[[ContentBlock], bool]


def has_text(block: TextBlock) -> bool:
    return bool(block.text) and not block.text.isspace()  # as ``text.strip()``, copying nothing


def user_parts(message: Message) -> tuple[list[ToolResultBlock], list[TextBlock | ImageBlock]]:
    """A user message's tool results, and its text and image blocks, each in order."""
    results: list[ToolResultBlock] = []
    parts: list[TextBlock | ImageBlock] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            results.append(block)
        elif isinstance(block, TextBlock | ImageBlock):
            parts.append(block)
    return results, parts


def data_url(image: ImageBlock) -> str:
    """An image as the OpenAI APIs take it inline: a ``data:`` URL of its base64."""
    return f"data:{image.media_type};base64,{image.data}"


def normalise_history(
    messages: Iterable[Message], *, keep: KeepBlock, merge: bool = True
) -> list[Message]:
    kept: list[Message] = []
    for message in messages:
        blocks = message.content
        for block in blocks:
            if not keep(block):
                blocks = tuple(b for b in blocks if keep(b))
                break
        if not blocks:
            continue
        if merge and kept and kept[-1].role == message.role:
            last = kept[-1]
            kept[-1] = Message(role=last.role, content=last.content + blocks, meta=last.meta)
        else:
            kept.append(
                message
                if blocks is message.content
                else Message(role=message.role, content=blocks, meta=message.meta)
            )
    return _pair_tool_calls(kept)


def _pair_tool_calls(messages: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    pending: tuple[ToolUseBlock, ...] = ()
    for message in messages:
        if message.role == "assistant":
            if pending:
                out.append(_results_message(pending, ()))
            out.append(message)
            pending = message.tool_uses
            continue
        out.append(_results_message(pending, message.content, message))
        pending = ()
    if pending:
        out.append(_results_message(pending, ()))
    return out


def _results_message(
    calls: Sequence[ToolUseBlock],
    content: Sequence[ContentBlock],
    original: Message | None = None,
) -> Message:
    """A user message with one result per call first (in call order), then the rest."""
    if original is not None and answers_in_order(calls, content):
        return original
    wanted = {call.id for call in calls}
    found: dict[str, ToolResultBlock] = {}
    rest: list[ContentBlock] = []
    for block in content:
        if not isinstance(block, ToolResultBlock):
            rest.append(block)
        elif block.tool_use_id in wanted:
            found.setdefault(block.tool_use_id, block)
        else:
            rest.append(_orphan_text(block))
    results: list[ContentBlock] = [
        found.get(call.id)
        or ToolResultBlock(tool_use_id=call.id, content=MISSING_RESULT_TEXT, is_error=True)
        for call in {call.id: call for call in calls}.values()
    ]
    blocks = (*results, *rest)
    if original is not None and blocks == original.content:
        return original
    meta = original.meta if original is not None else {}
    return Message(role="user", content=blocks, meta=meta)


def _orphan_text(block: ToolResultBlock) -> TextBlock:
    status = "error" if block.is_error else "result"
    return TextBlock(text=f"[tool {status} for call {block.tool_use_id}]\n{block.content}")
