"""``PROVIDER:MODEL`` → a :class:`~drover.providers.base.Provider`, keyed and aimed by the config.

The base URL is the ``base_url`` argument (``--base-url``), else the config's for that provider.
A missing API key is a one-line :class:`~drover.errors.ConfigError` naming the variable —
except when a base URL is set: local compatible servers (Ollama, vLLM, llama.cpp, LM Studio…)
usually need no key, so a placeholder is sent. Provider modules are imported on first use, so
choosing one protocol never loads the other SDK. Every provider gets the config's
``stall_timeout``, ``[retries]``, ``http_client`` and the model's ``[providers]`` headers (with
``--header``); a Responses model its ``chain`` (``--no-chain``).

``http_client`` picks the HTTP client the SDK sends through: its default on httpx, or its own
``DefaultAioHttpClient`` (the SDKs' ``aiohttp`` extra; drover's is ``drover[server]``), whose
C parser reads a streamed answer with less CPU per event — what a server running many turns
at once spends most on. Left unset, ``drover serve`` takes aiohttp when it is installed
(:func:`server_config`) and everything else httpx: once aiohttp is installed the SDKs import
it with themselves (~0.1 s), which a one-shot ``drover -p`` would pay for nothing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import TYPE_CHECKING

from drover.config.settings import KEY_VARS, Config
from drover.errors import ConfigError
from drover.providers.base import Provider

if TYPE_CHECKING:  # (the SDK providers' module is imported with the provider chosen)
    from drover.providers.sdk_provider import SdkOptions

#: Sent as the key to servers that need none (the SDKs refuse to run without one).
PLACEHOLDER_KEY = "no-key-needed"


def create_provider(spec: str, config: Config, *, base_url: str | None = None) -> Provider:
    provider, model = config.resolve(spec)
    url = base_url or config.base_urls.get(provider)
    key = config.api_key(provider)
    if not key:
        if not url:
            raise ConfigError(f"{KEY_VARS[provider]} is not set (needed for {provider}:{model})")
        key = PLACEHOLDER_KEY
    http_client = config.http_client or "httpx"
    if http_client == "aiohttp" and not aiohttp_installed():
        raise ConfigError(
            "http_client = \"aiohttp\" needs the aiohttp package: pip install 'drover[server]'"
        )
    settings = config.provider_settings(provider, model)
    options: SdkOptions = {
        "headers": settings.headers,
        "stall_timeout": config.stall_timeout,
        "max_retries": config.retries_max,
        "backoff_base": config.retries_backoff,
        "backoff_max": config.retries_backoff_max,
        "http_client": http_client,
    }
    if provider == "anthropic":
        from drover.providers.anthropic import AnthropicProvider

        return AnthropicProvider(model, api_key=key, base_url=url, **options)
    if provider == "openai":
        from drover.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(model, api_key=key, base_url=url, **options)
    from drover.providers.openai_responses import OpenAIResponsesProvider

    chain = settings.chain is not False
    return OpenAIResponsesProvider(model, api_key=key, base_url=url, chain=chain, **options)


def aiohttp_installed() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


def server_config(config: Config) -> Config:
    """``config`` as ``drover serve`` uses it: the SDKs on aiohttp when it is installed and
    the config does not say otherwise."""
    if config.http_client is not None or not aiohttp_installed():
        return config
    return replace(config, http_client="aiohttp")
