"""What a gateway in front of the model needs from the providers, from the config file through
the real SDKs to the fake server's recorded requests: extra headers (a ``${VAR}`` arriving
expanded, a gateway's ``Authorization`` replacing the API key's), a header value a server echoes
into an error never shown, and Responses requests that carry the whole history when
``chain = false``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drover.config.provider_tables import header_flag
from drover.config.settings import Config, load_config
from drover.core.messages import user_message
from drover.core.model_stream import RetryNotice
from drover.errors import ProviderHTTPError
from drover.providers.factory import create_provider
from drover.testing.server import FakeLLMServer

from .conftest import Outcome, collect, drain, request

SECRET = "gw-secret-2b7d91c4e0"


def gateway_config(tmp_path: Path, text: str, **env: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    keys = {"ANTHROPIC_API_KEY": "ak", "OPENAI_API_KEY": "ok"}
    return load_config(path, env={"GW_KEY": SECRET, **keys, **env})


def url(server: FakeLLMServer, protocol: str) -> str:
    return server.anthropic_base_url if protocol == "anthropic" else server.openai_base_url


async def test_configured_headers_reach_the_server_on_every_protocol(
    fake_llm: FakeLLMServer, protocol: str, tmp_path: Path
) -> None:
    config = gateway_config(
        tmp_path,
        f'[providers.{protocol}]\nheaders = {{ "x-gw-key" = "${{GW_KEY}}", "x-route" = "a" }}\n'
        f'[providers."{protocol}:m"]\nheaders = {{ "X-Route" = "b" }}\n',
    )
    config = config.with_overrides(every_model=header_flag("x-flag:on", {}))
    fake_llm.script({"text": "hi"})
    provider = create_provider(f"{protocol}:m", config, base_url=url(fake_llm, protocol))
    try:
        await collect(provider, request())
    finally:
        await provider.aclose()
    headers = fake_llm.requests[0].headers
    assert headers["x-gw-key"] == SECRET
    assert headers["x-route"] == "b" and headers["x-flag"] == "on"
    # The API key is still sent in its own header.
    key = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert key in ("ak", "ok")


@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
async def test_a_gateways_authorization_replaces_the_api_keys(
    fake_llm: FakeLLMServer, protocol: str, tmp_path: Path
) -> None:
    text = f'[providers.{protocol}]\nheaders = {{ "Authorization" = "Bearer ${{GW_KEY}}" }}'
    config = gateway_config(tmp_path, text)
    fake_llm.script({"text": "hi"})
    provider = create_provider(f"{protocol}:m", config, base_url=fake_llm.openai_base_url)
    try:
        await collect(provider, request())
    finally:
        await provider.aclose()
    assert fake_llm.requests[0].headers["authorization"] == f"Bearer {SECRET}"


async def test_a_header_a_server_echoes_into_an_error_is_never_shown(
    fake_llm: FakeLLMServer, protocol: str, tmp_path: Path
) -> None:
    text = f'[providers.{protocol}]\nheaders = {{ "cf-aig-authorization" = "Bearer ${{GW_KEY}}" }}'
    config = gateway_config(tmp_path, text)
    echo = f"bad gateway token {SECRET} (from 'Bearer {SECRET}')"
    fake_llm.script(
        {"http_error": {"status": 503, "message": echo}},
        {"http_error": {"status": 401, "message": echo}},
    )
    provider = create_provider(f"{protocol}:m", config, base_url=url(fake_llm, protocol))
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, ProviderHTTPError) and outcome.error.status == 401
    notices = [e for e in outcome.events if isinstance(e, RetryNotice)]
    shown = [str(outcome.error), *(n.error for n in notices)]
    assert len(shown) == 2 and all("[REDACTED]" in text for text in shown), shown
    assert not any(SECRET in text for text in shown), shown


async def two_turns(config: Config, server: FakeLLMServer) -> tuple[Outcome, dict[str, Any]]:
    """Two turns of ``openai-responses:m`` under ``config``: the first's outcome, and the body
    of the second's request."""
    server.script({"text": "First answer."}, {"text": "Second answer."})
    provider = create_provider("openai-responses:m", config, base_url=server.openai_base_url)
    try:
        first = user_message("turn one")
        one = await collect(provider, request(first))
        await collect(provider, request(first, one.message, user_message("turn two")))
    finally:
        await provider.aclose()
    return one, server.requests[1].body


async def test_chain_false_sends_the_whole_history_and_no_previous_response_id(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config = gateway_config(tmp_path, "[providers.openai-responses]\nchain = false\n")
    _one, body = await two_turns(config, fake_llm)
    assert "previous_response_id" not in body
    texts = [str(item.get("content")) for item in body["input"]]
    assert "turn one" in texts[0] and "First answer." in texts[1] and "turn two" in texts[2]
    assert "store" not in body  # left to the server
    assert not any("id" in item for item in body["input"])  # no stored item ids either


async def test_without_chain_false_the_second_request_is_chained(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """The counterpart: the same two turns, chained (what a gateway that loses stored
    responses gets wrong)."""
    one, body = await two_turns(gateway_config(tmp_path, ""), fake_llm)
    assert body["previous_response_id"] == one.message.meta["response_id"]
    assert body["input"] == [{"role": "user", "content": "turn two"}]
