"""PROVIDER:MODEL → a provider: names, keys, base URLs."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from drover.config.settings import Config, parse_model_spec
from drover.errors import ConfigError
from drover.providers.anthropic import AnthropicProvider
from drover.providers.factory import PLACEHOLDER_KEY, create_provider
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider
from drover.testing.server import FakeLLMServer

from .conftest import collect, request

KEYS = {"anthropic": "a-key", "openai": "o-key", "openai-responses": "o-key"}


@pytest.mark.parametrize(
    ("spec", "kind", "name", "model"),
    [
        ("anthropic:claude-sonnet-4-5", AnthropicProvider, "anthropic", "claude-sonnet-4-5"),
        ("openai:gpt-4.1", OpenAIChatProvider, "openai", "gpt-4.1"),
        ("openai:llama3.1:8b", OpenAIChatProvider, "openai", "llama3.1:8b"),
        ("openai-responses:gpt-5", OpenAIResponsesProvider, "openai-responses", "gpt-5"),
        ("claude-haiku-4-5", AnthropicProvider, "anthropic", "claude-haiku-4-5"),
    ],
)
async def test_specs_pick_the_protocol(spec: str, kind: type, name: str, model: str) -> None:
    provider = create_provider(spec, Config(api_keys=KEYS))
    try:
        assert isinstance(provider, kind)
        assert (provider.name, provider.model) == (name, model)
    finally:
        await provider.aclose()


async def test_a_bare_model_uses_the_default_models_provider() -> None:
    provider = create_provider("gpt-4.1", Config(default_model="openai:gpt-4o", api_keys=KEYS))
    try:
        assert provider.name == "openai"
    finally:
        await provider.aclose()


async def test_aliases() -> None:
    config = Config(aliases={"fast": "openai-responses:gpt-5-mini"}, api_keys=KEYS)
    provider = create_provider("fast", config)
    try:
        assert (provider.name, provider.model) == ("openai-responses", "gpt-5-mini")
    finally:
        await provider.aclose()


def test_unknown_provider() -> None:
    with pytest.raises(ConfigError) as caught:
        create_provider("gemini:pro", Config(api_keys=KEYS))
    assert str(caught.value) == (
        "unknown provider 'gemini' (expected anthropic, openai or openai-responses)"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("anthropic:claude-x", "ANTHROPIC_API_KEY is not set (needed for anthropic:claude-x)"),
        ("openai:gpt-4.1", "OPENAI_API_KEY is not set (needed for openai:gpt-4.1)"),
        ("openai-responses:o3", "OPENAI_API_KEY is not set (needed for openai-responses:o3)"),
    ],
)
def test_a_missing_key_is_one_clear_line(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        create_provider(spec, Config())
    assert str(caught.value) == message


def _key_sent(headers: Mapping[str, str]) -> str:
    """The API key a request carried (``x-api-key`` or a bearer token, as the SDK chooses)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize("spec", ["anthropic:local", "openai:llama3", "openai-responses:local"])
async def test_a_base_url_needs_no_key(spec: str, fake_llm: FakeLLMServer) -> None:
    """No key in the environment: the request still goes to the given URL, with the
    placeholder key, and the model streams its answer."""
    base_url = fake_llm.anthropic_base_url if spec.startswith("anthropic:") else None
    base_url = base_url or fake_llm.openai_base_url
    fake_llm.script({"text": "local answer"}, {"text": "from the config"})
    by_flag = create_provider(spec, Config(), base_url=base_url)
    by_config = create_provider(spec, Config(base_urls={spec.split(":")[0]: base_url}))
    for provider in (by_flag, by_config):
        try:
            await collect(provider, request())
        finally:
            await provider.aclose()
    first, second = fake_llm.requests
    assert first.body["model"] == second.body["model"] == spec.split(":")[1]
    assert _key_sent(first.headers) == _key_sent(second.headers) == PLACEHOLDER_KEY


async def test_a_key_in_the_config_is_sent(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"text": "ok"})
    provider = create_provider(
        "anthropic:claude-x", Config(api_keys=KEYS), base_url=fake_llm.anthropic_base_url
    )
    try:
        await collect(provider, request())
    finally:
        await provider.aclose()
    assert _key_sent(fake_llm.requests[0].headers) == "a-key"


def test_parse_model_spec() -> None:
    assert parse_model_spec("anthropic:claude") == ("anthropic", "claude")
    assert parse_model_spec("openai:llama3.1:8b") == ("openai", "llama3.1:8b")
    with pytest.raises(ConfigError, match="no model name"):
        parse_model_spec("openai:")
    with pytest.raises(ConfigError, match="no model name"):
        parse_model_spec("openai:   ")
    with pytest.raises(ConfigError, match="unknown provider 'x'"):
        parse_model_spec("x:y")


@pytest.mark.parametrize("spec", [" openai:gpt ", "openai: gpt", "openai :gpt", "\topenai : gpt\n"])
def test_parse_model_spec_ignores_spaces_around_its_parts(spec: str) -> None:
    assert parse_model_spec(spec) == ("openai", "gpt")


def test_a_bare_model_is_stripped_too() -> None:
    assert parse_model_spec("  gpt-4o ", "openai") == ("openai", "gpt-4o")


@pytest.mark.parametrize(
    ("spec", "default", "expected"),
    [
        ("gpt-4.1", "anthropic", ("openai", "gpt-4.1")),
        ("gpt-4.1", "openai-responses", ("openai-responses", "gpt-4.1")),
        ("o1", "anthropic", ("openai", "o1")),
        ("o4-mini", "openai", ("openai", "o4-mini")),
        ("chatgpt-4o-latest", "anthropic", ("openai", "chatgpt-4o-latest")),
        ("claude-sonnet-4-5", "openai", ("anthropic", "claude-sonnet-4-5")),
    ],
)
def test_a_bare_model_of_a_known_family_finds_its_provider(
    spec: str, default: str, expected: tuple[str, str]
) -> None:
    assert parse_model_spec(spec, default) == expected


@pytest.mark.parametrize("spec", ["gpt4", "model-x", "o", "olmo-2", "llama3"])
def test_any_other_bare_model_is_refused_with_the_hint(spec: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown model '{spec}': .*PROVIDER:MODEL"):
        parse_model_spec(spec, "openai")
