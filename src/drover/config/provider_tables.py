"""The ``[providers]`` table: what a model's requests carry besides the API's own — extra HTTP
headers, and whether Responses requests are chained — per provider or per model::

    [providers.openai]                          # every openai:… model
    headers = { "x-portkey-api-key" = "${PORTKEY_API_KEY}", "x-portkey-provider" = "openai" }

    [providers.openai-responses]
    chain = false                               # the whole history every time, never
                                                # previous_response_id

    [providers."openai:gpt-4.1"]                # one model: its table over its provider's
    headers = { "x-portkey-config" = "pc-gpt41" }

``headers`` are sent with every request of those models: what a gateway routes or
authenticates by (Portkey, Cloudflare AI Gateway, a corporate proxy). ``${VAR}`` (and
``${VAR:-default}``) in a value is expanded from the environment when the file is read; a
variable that is not set is an error naming it. A header whose name says it is a credential
(a word of it is ``key``, ``token``, ``authorization``, ``secret``, ``cookie``…) must take its
value from a variable, as API keys come from the environment only. A model's own table wins over its
provider's for a header of the same name (names compare without case).

``chain`` (``openai-responses`` only) ``false``: every request carries the whole history, with no
``previous_response_id`` and no stored item ids — for gateways that mishandle stored responses
(LiteLLM's Responses→Anthropic bridge drops the earlier turns).

On the command line, ``--header NAME:VALUE`` (repeatable; ``${VAR}`` expanded too, so a secret
need not appear in the process list) and ``--no-chain`` apply to every model, over the file.

Every header value, and whatever a variable put into one, is a secret: :class:`ProviderSettings`
never shows them in its ``repr``, errors name the header but never its value, and
:attr:`ProviderSettings.secrets` feeds the journal's redactor. A name must be an HTTP token and
a value printable ASCII; the headers the HTTP client owns (``Host``, ``Content-Length``,
``Transfer-Encoding``, ``Connection``) cannot be set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drover.config.expand import VARIABLE, Expander, kept_secrets
from drover.errors import ConfigError

#: The Responses API's protocol name: the only one whose requests chain.
CHAINING_PROVIDER = "openai-responses"
_KEYS = ("headers", "chain")
#: RFC 9110's ``token``: what a header's name may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: Printable ASCII and tab: what every HTTP client sends as a header value unchanged.
_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
#: Headers the HTTP client sets from the request itself.
_OWNED = frozenset({"host", "content-length", "transfer-encoding", "connection"})
#: Words of a header's name (between ``-`` and ``_``) that say its value is a credential.
_CREDENTIAL_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "signature",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSettings:
    """One ``[providers]`` table, or what the command line adds to every model's."""

    #: Extra request headers, name → value as sent (expanded: never shown).
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: ``False``: Responses requests carry the whole history (None: the provider's default).
    chain: bool | None = None
    #: The header values and what variables put into them, for the redactor (never shown).
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def over(self, base: ProviderSettings) -> ProviderSettings:
        """These settings over ``base``: a header of the same name (in any case) and a
        ``chain`` given here win."""
        names = {name.lower() for name in self.headers}
        headers = {k: v for k, v in base.headers.items() if k.lower() not in names}
        headers.update(self.headers)
        return ProviderSettings(
            headers=headers,
            chain=base.chain if self.chain is None else self.chain,
            secrets=kept_secrets((*base.secrets, *self.secrets)),
        )


def combined(parts: Iterable[ProviderSettings]) -> ProviderSettings:
    """``parts`` merged, each over the ones before it."""
    merged = ProviderSettings()
    for part in parts:
        merged = part.over(merged)
    return merged


def providers_table(
    value: object, where: str, env: Mapping[str, str], known: Sequence[str]
) -> dict[str, ProviderSettings]:
    """``[providers]`` as settings by key: a provider of ``known``, or a ``PROVIDER:MODEL``."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [providers] must be a table of [providers.NAME] tables")
    out: dict[str, ProviderSettings] = {}
    for key, table in value.items():
        provider, sep, model = str(key).partition(":")
        provider, model = provider.strip(), model.strip()
        if provider not in known or (sep and not model):
            raise ConfigError(
                f"{where}: [providers.{key}]: expected a provider ({', '.join(known)}) or a "
                "model as PROVIDER:MODEL"
            )
        name = f"{provider}:{model}" if sep else provider
        out[name] = _table(table, f"{where}: providers.{key}", env, provider)
    return out


def _table(value: object, where: str, env: Mapping[str, str], provider: str) -> ProviderSettings:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table ({', '.join(_KEYS)})")
    for key in value:
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown setting '{key}' (expected {', '.join(_KEYS)})")
    chain = value.get("chain")
    if chain is not None:
        if not isinstance(chain, bool):
            raise ConfigError(f"{where}.chain: must be true or false")
        if provider != CHAINING_PROVIDER:
            raise ConfigError(
                f"{where}.chain: only {CHAINING_PROVIDER} models chain their requests"
            )
    headers = value.get("headers", {})
    if not isinstance(headers, Mapping):
        raise ConfigError(f'{where}.headers: must be a table of NAME = "VALUE"')
    parts = [_header(str(n), v, f"{where}.headers.{n}", env) for n, v in headers.items()]
    return ProviderSettings(chain=chain).over(combined(parts))


def _header(name: str, raw: object, where: str, env: Mapping[str, str]) -> ProviderSettings:
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: the value must be a string")
    if not VARIABLE.search(raw) and _is_credential(name):
        raise ConfigError(
            f"{where}: a credential is read from the environment only: write its value as "
            '"${VARIABLE}" (or "Bearer ${VARIABLE}")'
        )
    return header(name, raw, where, env)


def _is_credential(name: str) -> bool:
    """``x-api-key``, ``Authorization``, ``cf-aig-authorization``, ``x-access-token``… (not
    ``x-portkey-provider``: a word, not a part of one)."""
    return any(word in _CREDENTIAL_WORDS for word in re.split(r"[-_]", name.lower()))


def header(name: str, raw: str, where: str, env: Mapping[str, str]) -> ProviderSettings:
    """One header, its value's ``${VAR}`` expanded from ``env``; a :class:`ConfigError` starting
    with ``where`` (and never holding the value) when it cannot be sent."""
    if not _TOKEN.match(name):
        raise ConfigError(f"{where}: {name!r} is not a valid HTTP header name")
    if name.lower() in _OWNED:
        raise ConfigError(f"{where}: {name} is set by the HTTP client, not by the config")
    expand = Expander(env)
    value = expand(raw).strip()
    if expand.missing:
        raise ConfigError(f"{where}: {expand.missing_text()} is not set in the environment")
    if not value:
        raise ConfigError(f"{where}: the value is empty")
    if not _VALUE.match(value):
        raise ConfigError(
            f"{where}: the value holds a character a header cannot carry (printable ASCII only)"
        )
    secrets = kept_secrets((value, *expand.substituted))
    return ProviderSettings(headers={name: value}, secrets=secrets)


def header_flag(text: str, env: Mapping[str, str]) -> ProviderSettings:
    """``--header NAME:VALUE`` as settings of every model; :class:`ConfigError` when it is not
    one header drover can send (the message never holds the value)."""
    name, sep, raw = text.partition(":")
    if not sep or not name.strip():
        raise ConfigError("expected NAME:VALUE, e.g. 'x-portkey-api-key:${PORTKEY_API_KEY}'")
    return header(name.strip(), raw, name.strip(), env)
