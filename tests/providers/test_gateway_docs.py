"""The hosted-gateway and local-server configurations of ``docs/gateways.md``, read from the page
and run against the fake model, with only the gateway's address replaced by the fake server's:
each header arrives with its value (``${VAR}`` expanded), the key goes where the API takes it,
and a local server needs none. (The LiteLLM section runs against the real proxy:
``test_litellm.py``.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from support.litellm import documented_blocks

from drover.config.settings import load_config
from drover.providers.factory import PLACEHOLDER_KEY, create_provider
from drover.testing.server import FakeLLMServer

from .conftest import collect, request

#: The environment a reader of the page has set.
ENV = {
    "OPENAI_API_KEY": "sk-or-test-key",
    "ANTHROPIC_API_KEY": "sk-ant-test-key",
    "PORTKEY_API_KEY": "pk-test-0f9e8d7c",
    "CF_AIG_TOKEN": "cf-test-token-4b5a",
}
HOSTED = documented_blocks("OpenRouter-style hosted gateways", "toml")


def _gateway_url(text: str) -> str:
    """The one base URL a documented block names."""
    urls = tomllib.loads(text)["base_urls"]
    assert len(urls) == 1, urls
    return str(next(iter(urls.values())))


def test_the_section_documents_three_gateways() -> None:
    assert [_gateway_url(block).split("/")[2] for block in HOSTED] == [
        "openrouter.ai",
        "api.portkey.ai",
        "gateway.ai.cloudflare.com",
    ]


@pytest.mark.parametrize("block", HOSTED, ids=lambda b: _gateway_url(b).split("/")[2])
async def test_a_hosted_gateways_configuration_sends_its_headers(
    fake_llm: FakeLLMServer, block: str, tmp_path: Path
) -> None:
    url = _gateway_url(block)
    anthropic = "anthropic" in tomllib.loads(block)["base_urls"]
    fake_url = fake_llm.anthropic_base_url if anthropic else fake_llm.openai_base_url
    path = tmp_path / "config.toml"
    path.write_text(block.replace(url, fake_url), encoding="utf-8")
    config = load_config(path, env=ENV)
    fake_llm.script({"text": "hi"})
    provider = create_provider(config.default_model, config)
    try:
        await collect(provider, request())
    finally:
        await provider.aclose()
    sent = fake_llm.requests[0]
    assert sent.path == ("/v1/messages" if anthropic else "/v1/chat/completions")
    assert sent.body["model"] == config.default_model.split(":", 1)[1]
    tables = tomllib.loads(block)["providers"]
    (table,) = tables.values()
    for name, raw in table["headers"].items():
        value = re.sub(r"\$\{(\w+)\}", lambda m: ENV[m.group(1)], raw)
        assert sent.headers[name.lower()] == value, name
    key = ENV["ANTHROPIC_API_KEY" if anthropic else "OPENAI_API_KEY"]
    assert sent.headers.get("x-api-key", sent.headers.get("authorization")) in (
        key,
        f"Bearer {key}",
    )


async def test_a_local_servers_configuration_needs_no_key(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (block,) = documented_blocks("Ollama and other local servers", "toml")
    url = _gateway_url(block)
    assert url == "http://localhost:11434/v1"
    path = tmp_path / "config.toml"
    path.write_text(block.replace(url, fake_llm.openai_base_url), encoding="utf-8")
    config = load_config(path, env={})
    fake_llm.script({"text": "hi"})
    provider = create_provider(config.default_model, config)
    try:
        outcome = await collect(provider, request())
    finally:
        await provider.aclose()
    assert outcome.message.text == "hi"
    sent = fake_llm.requests[0]
    assert sent.body["model"] == "llama3.1:8b"
    assert sent.headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"


def test_the_retries_the_page_advises_are_the_litellm_configs() -> None:
    """The count the page derives (and ``test_litellm.py`` measures) is of this setting."""
    (advice,) = documented_blocks("Retries multiply", "toml")
    (litellm,) = documented_blocks("LiteLLM", "toml")
    assert tomllib.loads(advice)["retries"] == tomllib.loads(litellm)["retries"] == {"max": 1}
