"""The server-sent events decoder: every line ending, every split of a body into chunks."""

from __future__ import annotations

import pytest

from drover.providers.sse import SseDecoder, SseError, SseEvent

#: A recorded Anthropic stream (shortened), with what the spec lets a server vary: a byte order
#: mark, a comment, a ``ping``, ``\r\n`` and bare ``\r`` line ends, a field without the space
#: after its colon, a multi-line ``data``, a character of several bytes, and an ``error``.
RECORDED = (
    "\ufeff: keep-alive comment\r\n"
    "\r\n"
    "event: message_start\r\n"
    'data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}\r\n'
    "\r\n"
    "event: ping\n"
    'data: {"type": "ping"}\n'
    "\n"
    "event:content_block_delta\r"
    'data:{"type":"content_block_delta","index":0,\r'
    'data: "delta":{"type":"text_delta","text":"héllo → 世界"}}\r'
    "\r"
    "id: 7\n"
    "retry: 100\n"
    "unknown: field\n"
    "event: error\n"
    'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n'
    "\n"
).encode()

EXPECTED = [
    SseEvent(
        "message_start",
        '{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}',
    ),
    SseEvent("ping", '{"type": "ping"}'),
    SseEvent(
        "content_block_delta",
        '{"type":"content_block_delta","index":0,\n'
        '"delta":{"type":"text_delta","text":"héllo → 世界"}}',
    ),
    SseEvent(
        "error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    ),
]


def decode(*chunks: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events


def test_a_recorded_stream_whole() -> None:
    assert decode(RECORDED) == EXPECTED


def test_every_split_into_two_chunks_gives_the_same_events() -> None:
    for at in range(len(RECORDED) + 1):
        assert decode(RECORDED[:at], RECORDED[at:]) == EXPECTED, f"split at byte {at}"


def test_one_byte_at_a_time() -> None:
    assert decode(*(RECORDED[i : i + 1] for i in range(len(RECORDED)))) == EXPECTED


@pytest.mark.parametrize("end", ["\n", "\r", "\r\n"])
def test_each_line_end(end: str) -> None:
    body = f"event: a{end}data: 1{end}{end}data: 2{end}{end}".encode()
    assert decode(body) == [SseEvent("a", "1"), SseEvent("", "2")]


def test_crlf_split_between_its_two_bytes_is_one_line_end() -> None:
    # A \n right after a \r that ended the previous chunk is not a second (blank) line.
    assert decode(b"data: 1\r", b"\ndata: 2\r\n\r\n") == [SseEvent("", "1\n2")]


def test_an_event_the_body_leaves_unfinished_is_discarded() -> None:
    assert decode(b"data: 1\n\ndata: [DONE]\n") == [SseEvent("", "1")]
    assert decode(b"data: 1\n\ndata: 2") == [SseEvent("", "1")]


def test_the_last_done_of_openai_chat() -> None:
    assert decode(b'data: {"a":1}\n\ndata: [DONE]\n\n') == [
        SseEvent("", '{"a":1}'),
        SseEvent("", "[DONE]"),
    ]


def test_fields_and_blank_events() -> None:
    # Only one space after the colon is dropped; a line without a colon is a field with an
    # empty value; a named event with no data line is dispatched with empty data, as the
    # SDKs' decoders do (the spec drops it), an unnamed one is not; a name does not carry over
    # to the next event.
    body = b"data:  two spaces\n\nevent: bare\n\n: comment\n\ndata\n\nevent: named\ndata:\n\n"
    assert decode(body) == [
        SseEvent("", " two spaces"),
        SseEvent("bare", ""),
        SseEvent("", ""),
        SseEvent("named", ""),
    ]


def test_a_byte_order_mark_only_at_the_start() -> None:
    bom = "\ufeff".encode()
    assert decode(bom + b"data: 1\n\n") == [SseEvent("", "1")]
    # Elsewhere it is part of the line: "\ufeffdata" is an unknown field.
    assert decode(b"data: 1\n\n" + bom + b"data: 2\n\n") == [SseEvent("", "1")]


def test_a_long_line_in_many_chunks_is_one_event() -> None:
    # (as the Responses API's ``response.completed`` carries a whole answer: its line arrives
    # over many chunks, most of them holding no line end at all)
    data = "é" * 300_000  # a character of two bytes: some chunks split one
    body = f"event: response.completed\r\ndata: {data}\r\n\r\n".encode()
    for size in (1_000, 4_096, 4_097):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert decode(*chunks) == [SseEvent("response.completed", data)]


def test_a_line_longer_than_allowed_is_refused() -> None:
    decoder = SseDecoder(max_line=100)
    assert decoder.feed(b"data: " + b"x" * 60) == []
    with pytest.raises(SseError, match="longer than 100 bytes"):
        decoder.feed(b"x" * 60)  # no line end yet: 126 bytes held


def test_the_unfinished_end_of_a_chunk_counts_towards_the_limit() -> None:
    decoder = SseDecoder(max_line=100)
    assert decoder.feed(b"data: 1\n\n" + b"data: " + b"y" * 90) == [SseEvent("", "1")]
    with pytest.raises(SseError):
        decoder.feed(b"\n\ndata: z\n" + b"y" * 101)


def test_a_line_within_the_limit_is_read_whole() -> None:
    decoder = SseDecoder(max_line=100)
    line = b"data: " + b"x" * 92  # 98 bytes, then its line end
    events = [e for piece in (line[:50], line[50:], b"\n\n") for e in decoder.feed(piece)]
    assert events == [SseEvent("", "x" * 92)]
