"""drover's events as the AI SDK's UI message stream (protocol v1): one response, one
assistant UI message.

:class:`UiMessageStream` is pure: it turns the events of one response (:mod:`.doors`), in
their order, into the chunks the ``ai`` package's ``DefaultChatTransport`` parses and
``readUIMessageStream`` / ``useChat`` assemble into a message. The HTTP side is
:mod:`.ai_sdk_routes`.

The message and its parts:

* ``start`` carries the message id: the id of the response's first turn, the same in every
  replay, so a client's resume (which replays from the start) rebuilds the same message.
* Each model call of a turn is a step (``start-step`` … ``finish-step``). Text streams as
  ``text-start`` / ``text-delta`` / ``text-end`` (part id ``TURN:STEP:BLOCK``). When the step's
  message is final (drover's ``assistant_message``) and what streamed is not exactly it — the
  log holds text redacted where the live deltas were not, a crash lost the last deltas, the
  model's thinking is only known then — the step is sent again with ``reset-step``, in the
  message's own order, thinking as ``reasoning-*`` parts: the assembled message is the durable
  one, live as in any replay. A retry that discards the step's text is a ``reset-step`` too.
* Tool calls are ``dynamic`` and ``providerExecuted`` (drover ran them, the client must not):
  ``tool-input-start`` and ``tool-input-available`` as the model's call arrives, then
  ``tool-output-available`` (the output text), ``tool-output-error`` (a failure, or a call cut
  off by an interruption or a crash — the text says which), or ``tool-output-denied``.
* A permission question is ``tool-approval-request`` (``approvalId`` is the request id);
  the answer, whoever gave it, is ``tool-approval-response`` before the call's outcome.
* The end: ``finish`` with ``finishReason`` ``stop`` (completed), ``interrupted``, ``other``
  (the turn limit ran out) or ``error`` — the last one after an ``error`` chunk with the
  error's text. Usage is not sent (the protocol has no place for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from drover.server.doors import TERMINAL

Chunk = dict[str, Any]

#: The ``finishReason`` of a response that ended for each of drover's reasons (others: error).
_FINISH_REASONS = {"interrupted": "interrupted", "max_turns": "other"}
#: Reasons that are failures (an ``error`` chunk comes before ``finish``).
_FAILURES = frozenset({"error", "empty_response", "invalid_output"})


@dataclass(slots=True)
class _Call:
    """A tool call of the response and every chunk sent for it (sent again after a
    ``reset-step``)."""

    id: str
    name: str
    input: Any = None
    available: bool = False
    approval: str | None = None
    answered: bool = False
    chunks: list[Chunk] = field(default_factory=list)


@dataclass(slots=True)
class _Part:
    """A part of the current step as sent: text (by block index) or a tool call."""

    kind: Literal["text", "reasoning", "tool"]
    key: str
    text: list[str] = field(default_factory=list)
    open: bool = True


class UiMessageStream:
    """The chunks of one response's UI message, one event at a time."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self._started = False
        self._turn = ""
        self._step = 0
        self._step_open = False
        self._parts: list[_Part] = []
        self._calls: dict[str, _Call] = {}

    # -- events --------------------------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> list[Chunk]:
        """The chunks ``event`` (one of the response's, in order) adds."""
        kind = event.get("type")
        if kind == "turn_started":
            self._turn = str(event.get("turn_id"))
            if self._started:
                return []
            self._started = True
            return [{"type": "start", "messageId": self.message_id}]
        if kind == "step_started":
            out = self._close_step()
            self._step = int(event.get("step", 0))
            self._step_open = True
            return [*out, {"type": "start-step"}]
        if kind == "text_delta":
            return self._text(int(event.get("index", 0)), str(event.get("text", "")))
        if kind == "retry" and event.get("discard_partial"):
            for part in self._parts:
                if part.kind == "tool":
                    del self._calls[part.key]
            self._parts = []
            return [{"type": "reset-step"}]
        if kind == "tool_state":
            return self._tool_state(event)
        if kind == "permission_request":
            return self._approval_request(event)
        if kind == "assistant_message":
            message = event.get("message")
            return self._settle(message.get("content", []) if isinstance(message, dict) else [])
        if kind in TERMINAL:
            return self._close_step()  # (an orphan ending; the response goes on)
        return []

    def end(self, terminal: dict[str, Any]) -> list[Chunk]:
        """The last chunks, for the terminal event that ended the response."""
        out = self._close_step()
        reason = terminal.get("reason")
        if terminal.get("type") == "done":
            finish = "stop"
        else:
            finish = _FINISH_REASONS.get(str(reason), "error")
            if reason in _FAILURES:
                out.append({"type": "error", "errorText": str(terminal.get("error") or reason)})
        out.append({"type": "finish", "finishReason": finish})
        return out

    def pause(self) -> list[Chunk]:
        """The chunks that end a stream at a permission question waiting for its answer (the
        client answers with its approval, which continues the message)."""
        out = self._close_texts()
        if self._step_open:
            out.append({"type": "finish-step"})
        out.append({"type": "finish", "finishReason": "tool-calls"})
        return out

    # -- text ----------------------------------------------------------------------------------

    def _text_id(self, index: int | str) -> str:
        return f"{self._turn}:{self._step}:{index}"

    def _text(self, index: int, delta: str) -> list[Chunk]:
        key = str(index)
        part = next((p for p in self._parts if p.kind == "text" and p.key == key), None)
        out: list[Chunk] = []
        if part is None:
            part = _Part("text", key)
            self._parts.append(part)
            out.append({"type": "text-start", "id": self._text_id(key)})
        part.text.append(delta)
        out.append({"type": "text-delta", "id": self._text_id(key), "delta": delta})
        return out

    def _close_texts(self) -> list[Chunk]:
        out: list[Chunk] = []
        for part in self._parts:
            if part.kind != "tool" and part.open:
                part.open = False
                out.append({"type": f"{part.kind}-end", "id": self._part_id(part)})
        return out

    def _part_id(self, part: _Part) -> str:
        return self._text_id(part.key) if part.kind == "text" else f"r:{self._text_id(part.key)}"

    def _close_step(self) -> list[Chunk]:
        out = self._close_texts()
        if self._step_open:
            out.append({"type": "finish-step"})
            self._step_open = False
        self._parts = []
        return out

    def _settle(self, blocks: list[Any]) -> list[Chunk]:
        """The step's message is final: close its text, or send the step again as the
        message holds it when what streamed differs."""
        wanted: list[tuple[Literal["text", "reasoning", "tool"], str, str]] = []
        uses: dict[str, dict[str, Any]] = {}
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                wanted.append(("text", str(index), str(block["text"])))
            elif block.get("type") == "thinking" and block.get("thinking"):
                wanted.append(("reasoning", str(index), str(block["thinking"])))
            elif block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                wanted.append(("tool", block["id"], ""))
                uses[block["id"]] = block
        shown = [(p.kind, p.key, "".join(p.text) if p.kind != "tool" else "") for p in self._parts]
        if shown == wanted:
            return self._close_texts()
        # Tool parts the message does not hold (a call a crash cut off) stay, after it.
        extra = [p.key for p in self._parts if p.kind == "tool" and p.key not in uses]
        out: list[Chunk] = [{"type": "reset-step"}]
        self._parts = []
        for kind, key, text in wanted:
            if kind == "tool":
                out += self._resend_call(key, uses[key])
                continue
            part = _Part(kind, key, [text], open=False)
            self._parts.append(part)
            part_id = self._part_id(part)
            out += [
                {"type": f"{kind}-start", "id": part_id},
                {"type": f"{kind}-delta", "id": part_id, "delta": text},
                {"type": f"{kind}-end", "id": part_id},
            ]
        for key in extra:
            out += self._resend_call(key, None)
        return out

    def _resend_call(self, call_id: str, use: dict[str, Any] | None) -> list[Chunk]:
        call = self._calls.get(call_id)
        self._parts.append(_Part("tool", call_id, open=False))
        if call is None:
            assert use is not None
            call = self._calls[call_id] = _Call(call_id, str(use.get("name", "")))
            return self._announce(call, use.get("input") or {})
        return list(call.chunks)

    # -- tool calls ----------------------------------------------------------------------------

    def _send(self, call: _Call, chunk: Chunk) -> Chunk:
        call.chunks.append(chunk)
        return chunk

    def _ensure_call(self, call_id: str, name: str) -> tuple[_Call, list[Chunk]]:
        call = self._calls.get(call_id)
        if call is not None:
            return call, []
        call = self._calls[call_id] = _Call(call_id, name)
        self._parts.append(_Part("tool", call_id, open=False))
        start = {
            "type": "tool-input-start",
            "toolCallId": call_id,
            "toolName": name,
            "dynamic": True,
            "providerExecuted": True,
        }
        return call, [self._send(call, start)]

    def _announce(self, call: _Call, tool_input: Any) -> list[Chunk]:
        """The call's input, known: creates its part when it has none yet."""
        out: list[Chunk] = []
        if not call.chunks:
            out.append(
                self._send(
                    call,
                    {
                        "type": "tool-input-start",
                        "toolCallId": call.id,
                        "toolName": call.name,
                        "dynamic": True,
                        "providerExecuted": True,
                    },
                )
            )
        call.input, call.available = tool_input, True
        available = {
            "type": "tool-input-available",
            "toolCallId": call.id,
            "toolName": call.name,
            "input": tool_input,
            "dynamic": True,
            "providerExecuted": True,
        }
        out.append(self._send(call, available))
        return out

    def _answer(self, call: _Call, approved: bool) -> list[Chunk]:
        if call.approval is None or call.answered:
            return []
        call.answered = True
        response = {"type": "tool-approval-response", "approvalId": call.approval}
        return [self._send(call, {**response, "approved": approved})]

    def _tool_state(self, event: dict[str, Any]) -> list[Chunk]:
        call_id, state = str(event.get("call_id")), event.get("state")
        call, out = self._ensure_call(call_id, str(event.get("name", "")))
        if state == "input-streaming":
            return out
        if not call.available:
            out += self._announce(call, event.get("input", call.input or {}))
        output = event.get("output")
        base = {"toolCallId": call_id, "dynamic": True, "providerExecuted": True}
        if state == "running":
            out += self._answer(call, True)
        elif state == "output-available":
            out += self._answer(call, True)
            chunk = {"type": "tool-output-available", **base, "output": output or ""}
            out.append(self._send(call, chunk))
        elif state in ("output-error", "interrupted"):
            error = str(output or f"the tool call ended {state}")
            out.append(self._send(call, {"type": "tool-output-error", **base, "errorText": error}))
        elif state == "denied":
            out += self._answer(call, False)
            out.append(self._send(call, {"type": "tool-output-denied", "toolCallId": call_id}))
        return out

    def _approval_request(self, event: dict[str, Any]) -> list[Chunk]:
        call_id = str(event.get("call_id"))
        call, out = self._ensure_call(call_id, str(event.get("tool_name", "")))
        if not call.available:
            out += self._announce(call, event.get("input") or {})
        call.approval, call.answered = str(event.get("request_id")), False
        request = {"type": "tool-approval-request", "approvalId": call.approval}
        out.append(self._send(call, {**request, "toolCallId": call_id}))
        return out
