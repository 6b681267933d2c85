"""drover's events as OpenAI Responses streaming events and Response objects.

:class:`ResponseStream` is pure: it turns the events of one response (:mod:`.doors`), in their
order, into the events the official ``openai`` SDK parses (``ResponseStreamEvent``) and keeps
the ``Response`` object they build, which a poll returns. The HTTP side is
:mod:`.responses_routes`.

Ids and numbers. A response is the drover turn its message started (with the turns that
resumed it after its process died): its id is ``resp_`` and that turn's id, and
``conversation.id`` is the session's. Each event's ``sequence_number`` is the number of the
drover event it comes from times :data:`SEQ_STRIDE`, plus its position among the events that
one became — so a number means the same event in every replay, live or from the log, in any
process and across a restart, and ``starting_after`` needs no state but the journal's.
Numbers increase; they are not consecutive.

Output items, in the order they begin:

* ``message`` (``msg_TURN_STEP``): the text of one model call, one ``output_text`` part per
  text block, streamed as ``response.output_text.delta``; ``response.output_text.done`` and
  ``response.output_item.done`` carry the durable text (redacted where the live deltas were
  not, only what was kept when a crash cut the call off — then the item is ``incomplete``).
* ``mcp_call`` (id ``mcp_TURN_CALL``, ``server_label`` ``drover``, ``name`` the tool's): a tool
  call drover ran, in the API's shape for a call the server runs (a hosted MCP tool), so that
  a client shows it and runs nothing — the Agents SDKs, pydantic-ai and ``@ai-sdk/openai`` all
  take it as done by the server, where a ``function_call`` would be theirs to run. Its
  ``arguments`` come in one ``response.mcp_call_arguments.delta`` once known, then
  ``response.mcp_call.in_progress``; at its end ``response.mcp_call.completed`` with
  ``output`` the text the model was sent, or ``response.mcp_call.failed`` with ``error`` an
  ``mcp_tool_execution_error`` whose content is that text (an error, a refusal — status
  ``failed`` — or a call cut off — status ``incomplete``, the text says whether it ran).

Thinking is not sent. Permission questions are not output items: the turn waits for an answer
on the server's permission route (``/v1/sessions/{conversation.id}/permissions/…``).

The end: ``response.completed``; ``response.incomplete`` for an ``incomplete`` turn — status
``cancelled`` when it was interrupted (a cancel), ``incomplete`` otherwise (also for a turn
whose process died and that nothing resumed); ``response.failed`` (``error.code``
``server_error``) for a turn that failed before any work. drover's reason (``max_turns``,
``error``, ``empty_response``, ``invalid_output``, ``interrupted``) is the Response's
``drover_reason`` (null while it runs and once it completed); ``incomplete_details`` keeps the
API's values: ``{"reason": "max_output_tokens"}`` for ``max_turns``, null for the others,
which the API has no name for.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from drover.server.doors import TERMINAL, orphan_end

#: ``sequence_number`` = drover event number × this + position among that event's events.
SEQ_STRIDE = 1_000_000
RESPONSE_PREFIX = "resp_"
#: Output item ids: ``msg_TURN_STEP`` for a message, ``mcp_TURN_CALL`` for a tool call (a
#: history sent back names its responses by them).
MESSAGE_PREFIX = "msg_"
MCP_PREFIX = "mcp_"
#: The ``server_label`` of the calls drover ran.
SERVER_LABEL = "drover"
#: drover's reasons that have an equivalent among the API's ``incomplete_details.reason``s
#: (``max_output_tokens``, ``content_filter``): a turn limit is a limit on the output.
_API_REASONS = {"max_turns": "max_output_tokens"}
_CALL_ENDS = frozenset({"output-available", "output-error", "denied", "interrupted"})

_OUTPUT_DEFAULTS = {
    "denied": "The tool call was denied.",
    "interrupted": "The tool call was interrupted.",
    "output-error": "The tool call failed.",
}


@dataclass(slots=True)
class _Message:
    index: int
    item: dict[str, Any]
    #: drover block index → content index
    parts: dict[int, int] = field(default_factory=dict)
    done: bool = False


@dataclass(slots=True)
class _Call:
    index: int
    item: dict[str, Any]
    #: Its arguments were sent (the call is under way).
    done: bool = False
    #: Its output (or error) was sent (the item is done).
    answered: bool = False


class ResponseStream:
    """The events and the ``Response`` object of one response, one drover event at a time.
    ``base`` holds the object's fixed fields (``id``, ``created_at``, ``model``,
    ``conversation``, ``previous_response_id``)."""

    def __init__(self, base: dict[str, Any]) -> None:
        self._base = base
        self.status = "in_progress"
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._reason: str | None = None
        self._output: list[dict[str, Any]] = []
        self._messages: dict[tuple[str, int], _Message] = {}
        self._calls: dict[str, _Call] = {}
        self._usage: dict[str, dict[str, int]] = {}
        #: The model call each turn is at (an ``assistant_message`` is that call's).
        self._steps: dict[str, int] = {}
        self._started = False
        self._seq = 0
        self._sub = 0

    # -- the object ----------------------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        """The ``Response`` object as it stands (a deep copy)."""
        usage = None
        if self._usage:
            totals = {k: sum(u[k] for u in self._usage.values()) for k in _USAGE_KEYS}
            usage = {
                "input_tokens": totals["input"],
                "input_tokens_details": {
                    "cached_tokens": totals["cached"],
                    "cache_write_tokens": totals["written"],
                },
                "output_tokens": totals["output"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": totals["input"] + totals["output"],
            }
        return copy.deepcopy(
            {
                **self._base,
                "object": "response",
                "status": self.status,
                "background": True,  # (every turn runs in the background, whatever was asked)
                "output": self._output,
                "error": self._error,
                "incomplete_details": self._incomplete,
                "drover_reason": self._reason,
                "usage": usage,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "metadata": {},
                "instructions": None,
            }
        )

    # -- numbering -----------------------------------------------------------------------------

    def _at(self, seq: int) -> None:
        if seq != self._seq:
            self._seq, self._sub = seq, 0

    def _emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        number = self._seq * SEQ_STRIDE + self._sub
        self._sub += 1
        return {"type": kind, **fields, "sequence_number": number}

    # -- events --------------------------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events ``event`` (one of the response's, in order) becomes."""
        self._at(int(event.get("seq", 0)))
        kind = event.get("type")
        turn = str(event.get("turn_id"))
        if kind == "turn_started":
            if self._started:
                return []
            self._started = True
            return [
                self._emit("response.created", response=self.response()),
                self._emit("response.in_progress", response=self.response()),
            ]
        if kind == "step_started":
            self._steps[turn] = int(event.get("step", 0))
            return []
        if kind == "text_delta":
            key = (turn, int(event.get("step", 0)))
            out, message = self._message(key)
            index = int(event.get("index", 0))
            out += self._part(message, index)
            part = message.parts[index]
            delta = str(event.get("text", ""))
            message.item["content"][part]["text"] += delta
            out.append(self._text_event("response.output_text.delta", message, part, delta=delta))
            return out
        if kind == "assistant_message":
            return self._settle(turn, event)
        if kind == "tool_state":
            return self._tool_state(event)
        if kind == "usage":
            self._count(turn, event.get("usage"), event)
            return []
        if kind in TERMINAL:
            self._count(turn, event.get("usage"), None)
            return self._close_all()
        return []

    def end(self, terminal: dict[str, Any]) -> list[dict[str, Any]]:
        """The last events, for the terminal event that ended the response."""
        self._at(int(terminal.get("seq", 0)))
        self._count(str(terminal.get("turn_id")), terminal.get("usage"), None)
        out = self._close_all()
        reason = str(terminal.get("reason"))
        if terminal.get("type") == "done":
            self.status, kind = "completed", "response.completed"
        elif reason == "interrupted" or terminal.get("type") == "incomplete":
            cancelled = reason == "interrupted" and not orphan_end(terminal)
            self.status = "cancelled" if cancelled else "incomplete"
            self._reason, kind = reason, "response.incomplete"
            if reason in _API_REASONS:
                self._incomplete = {"reason": _API_REASONS[reason]}
        else:
            self.status, kind = "failed", "response.failed"
            self._reason = reason
            message = str(terminal.get("error") or reason)
            self._error = {"code": "server_error", "message": message}
        out.append(self._emit(kind, response=self.response()))
        return out

    # -- messages ------------------------------------------------------------------------------

    def _add(self, item: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self._output.append(item)
        index = len(self._output) - 1
        added = copy.deepcopy(item)
        return index, self._emit("response.output_item.added", output_index=index, item=added)

    def _message(self, key: tuple[str, int]) -> tuple[list[dict[str, Any]], _Message]:
        message = self._messages.get(key)
        if message is not None:
            return [], message
        item = {
            "id": f"{MESSAGE_PREFIX}{key[0]}_{key[1]}",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        index, added = self._add(item)
        message = self._messages[key] = _Message(index, item)
        return [added], message

    def _part(self, message: _Message, block: int) -> list[dict[str, Any]]:
        if block in message.parts:
            return []
        content = message.item["content"]
        content.append({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        message.parts[block] = len(content) - 1
        return [self._part_event("response.content_part.added", message, len(content) - 1)]

    def _text_event(self, kind: str, message: _Message, part: int, **fields: Any) -> dict[str, Any]:
        return self._emit(
            kind,
            item_id=message.item["id"],
            output_index=message.index,
            content_index=part,
            **fields,
            logprobs=[],
        )

    def _part_event(self, kind: str, message: _Message, part: int) -> dict[str, Any]:
        return self._emit(
            kind,
            item_id=message.item["id"],
            output_index=message.index,
            content_index=part,
            part=copy.deepcopy(message.item["content"][part]),
        )

    def _finish(self, message: _Message, status: str) -> list[dict[str, Any]]:
        message.done = True
        message.item["status"] = status
        out = []
        for part, content in enumerate(message.item["content"]):
            out.append(
                self._text_event("response.output_text.done", message, part, text=content["text"])
            )
            out.append(self._part_event("response.content_part.done", message, part))
        item = copy.deepcopy(message.item)
        out.append(self._emit("response.output_item.done", output_index=message.index, item=item))
        return out

    def _settle(self, turn: str, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The step's message is final: its text blocks are the durable text."""
        body = event.get("message")
        blocks = body.get("content", []) if isinstance(body, dict) else []
        texts = {
            i: str(b.get("text"))
            for i, b in enumerate(blocks)
            if isinstance(b, dict) and b.get("type") == "text" and b.get("text")
        }
        key = (turn, self._steps.get(turn, 0))
        if not texts and key not in self._messages:
            return []
        out, message = self._message(key)
        for block, text in texts.items():
            out += self._part(message, block)
            message.item["content"][message.parts[block]]["text"] = text
        status = "incomplete" if event.get("partial") else "completed"
        return out + self._finish(message, status)

    # -- tool calls ----------------------------------------------------------------------------

    def _tool_state(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call_id, state = str(event.get("call_id")), str(event.get("state"))
        out: list[dict[str, Any]] = []
        call = self._calls.get(call_id)
        if call is None:
            item = {
                "id": f"{MCP_PREFIX}{event.get('turn_id')}_{call_id}",
                "type": "mcp_call",
                "server_label": SERVER_LABEL,
                "name": str(event.get("name", "")),
                "arguments": "",
                "output": None,
                "error": None,
                "status": "in_progress",
            }
            index, added = self._add(item)
            call = self._calls[call_id] = _Call(index, item)
            out.append(added)
        if state == "input-streaming":
            return out
        if not call.done:
            out += self._arguments(call, event.get("input"))
        if state in _CALL_ENDS and not call.answered:
            text = str(event.get("output") or _OUTPUT_DEFAULTS.get(state, ""))
            out += self._answer(call, state, text)
        return out

    def _arguments(self, call: _Call, tool_input: Any) -> list[dict[str, Any]]:
        """The call's arguments, known now (in one delta), and the call under way."""
        call.done = True
        arguments = json.dumps(tool_input if isinstance(tool_input, dict) else {})
        call.item["arguments"] = arguments
        base = {"item_id": call.item["id"], "output_index": call.index}
        return [
            self._emit("response.mcp_call_arguments.delta", **base, delta=arguments),
            self._emit("response.mcp_call_arguments.done", **base, arguments=arguments),
            self._emit("response.mcp_call.in_progress", **base),
        ]

    def _answer(self, call: _Call, state: str, text: str) -> list[dict[str, Any]]:
        """The call ended in ``state`` with ``text`` (what the model was sent): its output, or
        for a call that failed, was refused or cut off, its error."""
        call.answered = True
        if state == "output-available":
            call.item.update(output=text, status="completed")
        else:
            error = {
                "type": "mcp_tool_execution_error",
                "content": [{"type": "text", "text": text}],
            }
            status = "incomplete" if state == "interrupted" else "failed"
            call.item.update(error=error, status=status)
        kind = "completed" if state == "output-available" else "failed"
        base = {"item_id": call.item["id"], "output_index": call.index}
        item = copy.deepcopy(call.item)
        return [
            self._emit(f"response.mcp_call.{kind}", **base),
            self._emit("response.output_item.done", output_index=call.index, item=item),
        ]

    def _close_all(self) -> list[dict[str, Any]]:
        """End every item still open (a turn that ended, or whose process died)."""
        out: list[dict[str, Any]] = []
        for message in self._messages.values():
            if not message.done:
                out += self._finish(message, "incomplete")
        for call in self._calls.values():
            if not call.done:
                out += self._arguments(call, None)
            if not call.answered:
                out += self._answer(call, "interrupted", _OUTPUT_DEFAULTS["interrupted"])
        return out

    def _count(self, turn: str, usage: Any, totals: dict[str, Any] | None) -> None:
        """A turn's usage so far (``totals``: a ``usage`` event's running totals) or in all."""
        if not isinstance(usage, dict):
            return
        kept = self._usage.setdefault(turn, dict.fromkeys(_USAGE_KEYS, 0))
        if totals is not None:
            kept["input"] = int(totals.get("total_input") or 0)
            kept["output"] = int(totals.get("total_output") or 0)
            if usage.get("partial"):
                return  # the use as the answer began: the report at its end has it again
            kept["cached"] += int(usage.get("cache_read_tokens") or 0)
            kept["written"] += int(usage.get("cache_write_tokens") or 0)
        else:
            kept["input"] = int(usage.get("input_tokens") or 0)
            kept["output"] = int(usage.get("output_tokens") or 0)
            kept["cached"] = int(usage.get("cache_read_tokens") or 0)
            kept["written"] = int(usage.get("cache_write_tokens") or 0)


_USAGE_KEYS = ("input", "output", "cached", "written")
