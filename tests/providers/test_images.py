"""An image in a user's message on all three protocols, through the official SDKs to the fake
server, whose validators check image blocks as each API does."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support.images import png_bytes

from drover.core.messages import ImageBlock, Message, TextBlock, assistant_message, user_message
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer
from drover.testing.validate import validate_anthropic, validate_chat, validate_responses

from .conftest import collect, request

PNG = base64.b64encode(png_bytes()).decode()


def image_message() -> Message:
    return user_message(
        "What is in this picture?", images=[ImageBlock(media_type="image/png", data=PNG)]
    )


def sent_images(protocol: str, body: dict[str, Any]) -> list[Any]:
    if protocol == "anthropic":
        [message] = body["messages"]
        return [b for b in message["content"] if b["type"] == "image"]
    if protocol == "openai":
        user = body["messages"][-1]
        return [p for p in user["content"] if p["type"] == "image_url"]
    [item] = body["input"]
    return [p for p in item["content"] if p["type"] == "input_image"]


async def test_an_image_goes_out_as_each_api_takes_it(
    protocol: str, provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": "A single pixel."})
    outcome = await collect(provider, request(image_message()))
    assert outcome.message.text == "A single pixel."
    body = fake_llm.requests[0].body
    [image] = sent_images(protocol, body)
    if protocol == "anthropic":
        assert image == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
        }
        assert body["messages"][0]["content"][0] == {
            "type": "text",
            "text": "What is in this picture?",
        }
    elif protocol == "openai":
        assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
        assert body["messages"][-1]["content"][0] == {
            "type": "text",
            "text": "What is in this picture?",
        }
    else:
        assert image == {
            "type": "input_image",
            "image_url": f"data:image/png;base64,{PNG}",
            "detail": "auto",
        }
        assert body["input"][0]["content"][0] == {
            "type": "input_text",
            "text": "What is in this picture?",
        }


def anthropic_body(block: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return {"messages": [{"role": role, "content": [{"type": "text", "text": "x"}, block]}]}


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"type": "base64", "media_type": "image/png", "data": PNG}, None),
        ({"type": "url", "url": "https://example.com/a.png"}, None),
        (
            {"type": "base64", "media_type": "image/bmp", "data": PNG},
            "Input should be 'image/jpeg'",
        ),
        ({"type": "base64", "media_type": "image/png", "data": "%%%"}, "invalid base64"),
        (
            {"type": "base64", "media_type": "image/jpeg", "data": PNG},
            "Image does not match the provided media type image/jpeg",
        ),
        ({"type": "file"}, "does not match any of the expected tags"),
    ],
)
def test_the_anthropic_validator_checks_images(source: dict[str, Any], problem: str | None) -> None:
    problems = validate_anthropic(anthropic_body({"type": "image", "source": source}))
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems


def test_the_chat_validator_takes_images_only_from_the_user() -> None:
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ok = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}]}
    assert validate_chat(ok) == []
    system = {"messages": [{"role": "system", "content": [part]}, {"role": "user", "content": "x"}]}
    assert "Image URLs are only allowed for messages with role 'user'" in validate_chat(system)[0]
    bad = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    wrong = {"messages": [{"role": "user", "content": [bad]}]}
    assert "Image does not match the provided media type image/png" in validate_chat(wrong)[0]


def test_the_responses_validator_requires_the_detail() -> None:
    part: dict[str, Any] = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
    body = {"input": [{"role": "user", "content": [part]}]}
    assert validate_responses(body, body["input"]) == [
        "Missing required parameter: 'input[0].content[0].detail'."
    ]
    part["detail"] = "auto"
    assert validate_responses(body, body["input"]) == []


async def test_an_image_in_an_earlier_turn_is_sent_again_as_history(
    protocol: str, fake_llm: FakeLLMServer, provider: Provider
) -> None:
    """A turn later, the image is part of the history every request carries."""
    fake_llm.script({"text": "Next."})
    history = [
        image_message(),
        assistant_message([TextBlock(text="A pixel.")]),
        user_message("and?"),
    ]
    await collect(provider, request(*history))
    body = fake_llm.requests[0].body
    text = str(body)
    assert PNG in text
