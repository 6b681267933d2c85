"""MCP tool results as drover's text output: each content type, errors, the output cap."""

from __future__ import annotations

import base64

import mcp_types as types

from drover.mcp.results import output_of
from drover.tools.workspace import MAX_OUTPUT_CHARS


def result(*content: types.ContentBlock, **fields: object) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), **fields)  # type: ignore[arg-type]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_blocks_in_order() -> None:
    output = output_of(result(types.TextContent(text="one"), types.TextContent(text="two")))
    assert (output.content, output.is_error) == ("one\ntwo", False)


def test_an_image_is_described_not_inlined() -> None:
    image = types.ImageContent(data=b64(b"\x89PNG" + bytes(96)), mime_type="image/png")
    output = output_of(result(types.TextContent(text="here:"), image))
    assert output.content == (
        "here:\n[image image/png, 100 bytes — not shown: tool results reach the model as text]"
    )


def test_embedded_resources() -> None:
    text = types.EmbeddedResource(
        resource=types.TextResourceContents(uri="file:///a.txt", mime_type="text/plain", text="hi")
    )
    textual_blob = types.EmbeddedResource(
        resource=types.BlobResourceContents(
            uri="demo://b", mime_type="application/json", blob=b64(b'{"k": 1}')
        )
    )
    binary = types.EmbeddedResource(
        resource=types.BlobResourceContents(
            uri="demo://z", mime_type="application/gzip", blob=b64(bytes(10))
        )
    )
    output = output_of(result(text, textual_blob, binary))
    assert output.content.split("\n") == [
        "[resource file:///a.txt (text/plain)]",
        "hi",
        "[resource demo://b (application/json)]",
        '{"k": 1}',
        "[resource demo://z: application/gzip, 10 bytes of binary data]",
    ]


def test_a_resource_link() -> None:
    link = types.ResourceLink(uri="demo://r/1", name="r1", description="the first")
    assert output_of(result(link)).content == "[resource link: demo://r/1 — r1: the first]"


def test_structured_content_alone_is_its_json() -> None:
    output = output_of(result(structured_content={"temperature": 21}))
    assert output.content == '{\n  "temperature": 21\n}'


def test_errors_stay_errors() -> None:
    output = output_of(result(types.TextContent(text="no such file"), is_error=True))
    assert (output.content, output.is_error) == ("no such file", True)
    assert output_of(result(is_error=True)).is_error


def test_long_output_is_capped_like_any_tool_output() -> None:
    output = output_of(result(types.TextContent(text="x" * (MAX_OUTPUT_CHARS * 2))))
    assert output.truncated and len(output.content) < MAX_OUTPUT_CHARS + 200
