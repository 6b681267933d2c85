"""A stored session written out (``drover export``, the REPL's ``/export``): Markdown for
people, JSON Lines for programs. Both are made from the report ``drover show --json`` prints
(:func:`drover.cli.admin.session_report`), so the three say the same thing.

JSON Lines: one object a line, each with a ``type`` — first ``session`` (``id``, ``title``,
``model``, ``workdir``, ``created_at``, ``updated_at``), then for each turn a ``turn`` line
(``id``, ``seq``, ``status``, ``reason``, ``error``, ``discarded``, ``usage``,
``user_message``) followed by its ``message`` lines (``turn_id``, ``role``, ``content``,
``partial``) and its ``tool_call`` lines (``turn_id``, ``call_id``, ``name``, ``state``,
``input``, ``output``, ``is_error``, ``outcome_unknown``, ``workers``). An image of a user's
message is named, not included: ``{"type": "image", "media_type", "bytes", "sha256"}``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Literal

Format = Literal["markdown", "jsonl"]
FORMATS: tuple[Format, ...] = ("markdown", "jsonl")

_TURN_FIELDS = ("id", "seq", "status", "reason", "error", "discarded", "usage", "user_message")
_SESSION_FIELDS = ("id", "title", "model", "workdir", "created_at", "updated_at")


def export_session(report: dict[str, Any], fmt: Format) -> str:
    return export_jsonl(report) if fmt == "jsonl" else export_markdown(report)


def export_jsonl(report: dict[str, Any]) -> str:
    lines = [{"type": "session", **{k: report[k] for k in _SESSION_FIELDS}}]
    for turn in report["turns"]:
        lines.append({"type": "turn", **{k: turn[k] for k in _TURN_FIELDS}})
        lines += [{"type": "message", "turn_id": turn["id"], **m} for m in turn["messages"]]
        lines += [{"type": "tool_call", "turn_id": turn["id"], **c} for c in turn["tool_calls"]]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def fenced(text: str, lang: str = "") -> str:
    """``text`` as a code block whose fence no run of backticks inside it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"


def _text(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")


def _call(call: dict[str, Any]) -> list[str]:
    note = " (outcome unknown)" if call["outcome_unknown"] else ""
    out = [f"**Tool `{call['name']}`** · {call['state']}{note}", ""]
    if call["input"] is not None:
        out += [fenced(json.dumps(call["input"], ensure_ascii=False, indent=2), "json"), ""]
    if call["output"] is not None:
        out += ["Output:", "", fenced(call["output"]), ""]
    for worker in call.get("workers", ()):
        out += [f"Worker {worker['worker']} · {worker['status']}", ""]
        for inner in worker["tool_calls"]:
            out += _call(inner)
        if worker["answer"]:
            out += [worker["answer"], ""]
    return out


def _usage(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    so_far = " (so far)" if usage.get("partial") else ""
    return f"{usage['input_tokens']} in · {usage['output_tokens']} out tokens{so_far}"


def export_markdown(report: dict[str, Any]) -> str:
    title = report["title"] or f"Session {report['id']}"
    out = [
        f"# {title}",
        "",
        f"- session: `{report['id']}`",
        f"- model: `{report['model']}`",
        f"- workdir: `{report['workdir']}`",
        f"- created {_when(report['created_at'])}, updated {_when(report['updated_at'])}",
        "",
    ]
    for turn in report["turns"]:
        flag = " (discarded)" if turn["discarded"] else ""
        # A turn whose process is gone is not running (see drover.cli.admin.abandoned).
        status = "abandoned" if turn.get("abandoned") else turn["status"]
        out += [f"## Turn {turn['seq']} · {status}{flag}", ""]
        if turn["error"]:
            out += [f"> ended: {turn['reason']}: {turn['error']}", ""]
        if turn["user_message"]:
            out += ["### User", "", _text(turn["user_message"]), ""]
            out += [
                f"_[image: {b['media_type']}, {b.get('bytes', 0):,} bytes, "
                f"sha256 {b.get('sha256')}]_"
                for b in turn["user_message"]["content"]
                if b.get("type") == "image"
            ]
        calls = {call["call_id"]: call for call in turn["tool_calls"]}
        for message in turn["messages"]:
            if message["role"] != "assistant":
                continue  # tool results: shown with their calls
            partial = " (cut off)" if message["partial"] else ""
            text = _text(message)
            out += [f"### Assistant{partial}", ""]
            if text:
                out += [text, ""]
            for block in message["content"]:
                if block.get("type") == "tool_use" and block.get("id") in calls:
                    out += _call(calls.pop(block["id"]))
        # Calls cut off before their message was complete appear in no message.
        for call in calls.values():
            out += _call(call)
        usage = _usage(turn["usage"])
        if usage:
            out += [f"_{usage}_", ""]
    return "\n".join(out).rstrip("\n") + "\n"
