"""``PROVIDER:MODEL`` → a :class:`~drover.providers.base.Provider`, keyed and aimed by the config.

The base URL is the ``base_url`` argument (``--base-url``), else the config's for that provider.
A missing API key is a one-line :class:`~drover.errors.ConfigError` naming the variable —
except when a base URL is set: local compatible servers (Ollama, vLLM, llama.cpp, LM Studio…)
usually need no key, so a placeholder is sent. Provider modules are imported on first use, so
choosing one protocol never loads the other SDK. Every provider gets the config's
``stall_timeout`` and ``[retries]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover.config import KEY_VARS, Config
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
    options: SdkOptions = {
        "stall_timeout": config.stall_timeout,
        "max_retries": config.retries_max,
        "backoff_base": config.retries_backoff,
        "backoff_max": config.retries_backoff_max,
    }
    if provider == "anthropic":
        from drover.providers.anthropic import AnthropicProvider

        return AnthropicProvider(model, api_key=key, base_url=url, **options)
    if provider == "openai":
        from drover.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(model, api_key=key, base_url=url, **options)
    from drover.providers.openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(model, api_key=key, base_url=url, **options)
