"""An MCP tool result as drover's tool output: the text a tool result block carries.

drover hands tool results to every provider as text (:class:`~drover.tools.base.ToolOutput`),
so each MCP content block becomes text, in order, one after the other:

======================  ========================================================================
text                    as it is
embedded resource       ``[resource URI (MIME)]`` and its text; a binary one of a textual MIME
                        type (``text/*``, JSON, XML, YAML) decoded as UTF-8, any other one
                        described by its type and size
resource link           ``[resource link: URI — NAME: DESCRIPTION]``
image, audio            described by type and size: the bytes cannot reach the model as text
======================  ========================================================================

A result with no content but ``structuredContent`` gives that JSON. ``isError`` makes an error
output; the whole text is capped like any tool's output.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types as types

from drover.tools.base import ToolOutput
from drover.tools.workspace import cap_output

_TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/x-yaml")


def output_of(result: types.CallToolResult) -> ToolOutput:
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, indent=2)]
    text = "\n".join(parts)
    if not text and result.is_error:
        text = "The tool reported an error without a message."
    return cap_output(text, is_error=bool(result.is_error))


def _block_text(block: types.ContentBlock) -> str:
    match block:
        case types.TextContent():
            return block.text
        case types.ImageContent() | types.AudioContent():
            return (
                f"[{block.type} {block.mime_type}, {_size(block.data)} — not shown: "
                "tool results reach the model as text]"
            )
        case types.EmbeddedResource():
            return _resource_text(block.resource)
        case types.ResourceLink():
            what = block.name + (f": {block.description}" if block.description else "")
            return f"[resource link: {block.uri} — {what}]"
        case _:  # a content type of a newer protocol version
            return f"[{getattr(block, 'type', 'unknown')} content]"


def _resource_text(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    mime = resource.mime_type or "unknown type"
    head = f"[resource {resource.uri} ({mime})]"
    if isinstance(resource, types.TextResourceContents):
        return f"{head}\n{resource.text}"
    if _is_textual(resource.mime_type):
        try:
            return f"{head}\n{base64.b64decode(resource.blob).decode('utf-8')}"
        except (binascii.Error, ValueError):
            pass  # not base64 of UTF-8 after all: described below
    return f"[resource {resource.uri}: {mime}, {_size(resource.blob)} of binary data]"


def _is_textual(mime: str | None) -> bool:
    if not mime:
        return False
    mime = mime.split(";")[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _size(data: str) -> str:
    """The size of base64 ``data`` once decoded."""
    count = max(len(data.rstrip("=")) * 3 // 4, 0)
    return f"{count:,} bytes"
