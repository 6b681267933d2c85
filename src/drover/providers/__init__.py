"""Model providers: one module per wire protocol, built on the official SDKs.

* :mod:`.base` — the seam: :class:`~drover.providers.base.Provider`, the request and the
  neutral stream events;
* :mod:`.anthropic` (``anthropic:``), :mod:`.openai_chat` (``openai:``, Chat Completions and
  compatible servers), :mod:`.openai_responses` (``openai-responses:``) — each streams the raw
  SDK events and maps them, with its ``convert_*`` module for the request;
* :mod:`.retry` — retries before content starts, and SDK-error helpers;
* :mod:`.ids` — tool-call ids every protocol accepts;
* :mod:`.factory` — ``PROVIDER:MODEL`` → a provider.

Nothing is imported here, so using :mod:`.base` never loads an SDK. SDK types stay inside this
package: callers see only neutral events and :mod:`drover.errors`.
"""
