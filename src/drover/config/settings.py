"""Configuration: a TOML file, then the environment, then command-line flags (flags win).

The file is ``$DROVER_CONFIG`` or ``<user config dir>/drover/config.toml`` (platformdirs); a
missing file means defaults (pointing ``DROVER_CONFIG`` at nothing turns the file off)::

    default_model = "anthropic:claude-sonnet-4-5"
    models = ["openai:gpt-4.1", "openai:llama3.1:8b"]      # listed by `drover models`
    context_limit = 200000
    chars_per_token = 4.0
    max_turns = 25
    stall_timeout = 30                                      # seconds without data from a model
    redact_patterns = ["internal-[0-9]+"]
    otel = false                                            # traces (--otel; OTEL_* vars)
    log_format = "text"                                     # text | json (--log-format)
    http_client = "httpx"                                   # httpx | aiohttp: the SDKs' client

    [base_urls]                                             # per provider
    openai = "http://localhost:11434/v1"

    [providers.openai-responses]                            # or any provider, PROVIDER:MODEL
    headers = { "x-gateway-key" = "${GATEWAY_KEY}" }        # extra request headers
    chain = false                                           # no previous_response_id

    [aliases]                                               # short names for --model
    fast = "anthropic:claude-haiku-4-5"

    [permissions]                                           # rules (drover.core.rules)
    allow = ["bash(git status*)", "edit_file(src/**)"]     # run without asking
    deny = ["bash(rm -rf*)", "read_file(.env)"]            # refused, even in allow mode

    [[hooks]]                                               # commands run around tool calls
    event = "pre_tool"                                      # pre_tool | post_tool | turn_end
    tool = "bash"                                           # which calls (a rule; optional)
    command = "./scripts/check"                             # exit 2 blocks a pre_tool call
    timeout = 60

    [mcp]
    approve_project = false                                 # true or [names]: start a workdir's
                                                            # .mcp.json servers without asking

    [sandbox]                                               # where `bash` runs its commands
    mode = "workdir"                                        # off | workdir | read-only
    network = false                                         # --sandbox-network
    writable = ["~/.cache/pip"]                             # extra writable paths
    hidden = ["~/secrets", "config/prod.env"]               # never readable by commands
    protected = [".husky", ".pre-commit-config.yaml"]       # readable, never writable
    env = ["PYTHONPATH", "CARGO_*"]                          # variables commands get too
    processes = 4096                                        # processes at once per command
    memory_mb = 8192                                        # memory per process
    home_allow = [".bashrc", ".config/ruff"]                # more of ~ that commands may read
    allow_domains = ["pypi.org", "*.pythonhosted.org"]      # names commands reach (HTTP proxy)

    [retries]                                               # a model call that fails to start
    max = 4                                                 # tries again at most (0: never)
    backoff = 0.5                                           # seconds first, doubling…
    backoff_max = 8                                         # …up to this (retry-after wins)

    [retention]                                             # applied by `drover serve`
    older_than = "30d"                                      # prune sessions idle this long
    keep_last = 100                                         # but never the 100 latest
    every = "1h"                                            # how often serve prunes

Environment: ``DROVER_MODEL``, ``DROVER_CHARS_PER_TOKEN`` (1..32), ``DROVER_MAX_TURNS``,
``DROVER_STALL_TIMEOUT`` (seconds, > 0),
``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL`` (both OpenAI protocols) and the API keys
``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``. Keys come from the environment only: the file may
not hold them, and :class:`Config` never shows them in its ``repr``.

A model spec is ``PROVIDER:MODEL`` with ``anthropic``, ``openai`` (Chat Completions) or
``openai-responses``; only the first colon splits, so ``openai:llama3.1:8b`` works. A spec
without a colon is an alias, or a model of a known family (``gpt-…``, ``o1``/``o3``/``o4…``:
OpenAI, the default model's OpenAI protocol if it has one; ``claude-…``: Anthropic); any other
bare name is refused with the ``PROVIDER:MODEL`` hint.

Every problem is a :class:`~drover.errors.ConfigError` saying where (file path or variable)
and what is wrong.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from drover.config.provider_tables import ProviderSettings, combined, providers_table
from drover.config.tables import (
    HookSpec,
    hooks_table,
    mcp_table,
    permissions_table,
    retention_table,
    retries_table,
)
from drover.core.rules import Rule
from drover.errors import ConfigError

PROVIDERS = ("anthropic", "openai", "openai-responses")
KEY_VARS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
}
URL_VARS = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "openai-responses": "OPENAI_BASE_URL",
}
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"
CHARS_PER_TOKEN_RANGE = (1.0, 32.0)
#: Seconds a model's stream may send nothing before the attempt fails as stalled.
DEFAULT_STALL_TIMEOUT = 30.0

_FILE_KEYS = (
    "default_model",
    "models",
    "aliases",
    "base_urls",
    "chars_per_token",
    "context_limit",
    "hooks",
    "http_client",
    "log_format",
    "max_turns",
    "mcp",
    "otel",
    "permissions",
    "providers",
    "redact_patterns",
    "retention",
    "retries",
    "sandbox",
    "stall_timeout",
)
SANDBOX_MODES = ("off", "workdir", "read-only")
LOG_FORMATS = ("text", "json")
#: The HTTP clients the SDKs can send through: theirs on httpx, or theirs on aiohttp.
HTTP_CLIENTS = ("httpx", "aiohttp")
_SANDBOX_KEYS = (
    "mode",
    "network",
    "writable",
    "hidden",
    "protected",
    "env",
    "processes",
    "memory_mb",
    "home_allow",
    "allow_domains",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")

#: The ``allow_domains`` entry that admits every name (what ``--sandbox-network`` means).
ANY_DOMAIN = "*"
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
_DOMAIN = re.compile(rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})*$")


def domain_entry(text: str) -> str:
    """An ``allow_domains`` entry checked and normalised: ``pypi.org`` (that name only),
    ``*.example.org`` (its subdomains), an IP address, or ``*`` (any name). Raises
    :class:`~drover.errors.ConfigError` with the reason otherwise."""
    entry = text.strip().lower().rstrip(".")
    if entry == ANY_DOMAIN:
        return entry
    try:
        return str(ipaddress.ip_address(entry.strip("[]")))
    except ValueError:
        pass  # a name, then
    if not _DOMAIN.match(entry) or len(entry) > 253:
        raise ConfigError(
            f"not a domain name for the sandbox's allow-list: {text!r} (expected a name such "
            "as pypi.org, *.example.org for its subdomains, or an IP address)"
        )
    return entry


#: Known model families: a name's start → the providers that serve it (the first unless the
#: default model's provider is one of them).
MODEL_FAMILIES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"^(gpt-|chatgpt-|o[1-9](-|$))", re.IGNORECASE), ("openai", "openai-responses")),
    (re.compile(r"^claude-", re.IGNORECASE), ("anthropic",)),
)


def bare_model_provider(model: str, default_provider: str = "anthropic") -> str:
    """The provider of a model named without one: its family's (``gpt-…``, ``o1``/``o3``/``o4…``
    are OpenAI's, ``claude-…`` Anthropic's), or a :class:`ConfigError` asking for
    ``PROVIDER:MODEL`` — guessing would send an unknown name to the wrong API with the wrong key."""
    for pattern, providers in MODEL_FAMILIES:
        if pattern.match(model):
            return default_provider if default_provider in providers else providers[0]
    raise ConfigError(
        f"unknown model '{model}': name its provider as PROVIDER:MODEL "
        f"(anthropic:{model}, openai:{model} or openai-responses:{model})"
    )


def parse_model_spec(spec: str, default_provider: str = "anthropic") -> tuple[str, str]:
    """``"openai:gpt-4.1"`` → ``("openai", "gpt-4.1")``; a bare model is matched against the
    known families (see :func:`bare_model_provider`), keeping ``default_provider`` when it
    serves that family."""
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip()
    if not sep:
        if not spec.strip():
            raise ConfigError("no model name (expected PROVIDER:MODEL)")
        model = spec.strip()
        provider = bare_model_provider(model, default_provider)
    if provider not in PROVIDERS:
        raise ConfigError(
            f"unknown provider '{provider}' (expected anthropic, openai or openai-responses)"
        )
    if not model.strip():
        raise ConfigError(f"no model name in '{spec}' (expected PROVIDER:MODEL)")
    return provider, model.strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    default_model: str = DEFAULT_MODEL
    #: Extra model specs listed by ``drover models``.
    models: list[str] = field(default_factory=list)
    #: Short names for model specs.
    aliases: dict[str, str] = field(default_factory=dict)
    #: Base URL per provider name.
    base_urls: dict[str, str] = field(default_factory=dict)
    #: ``[providers]``: extra headers and Responses chaining, by provider or ``PROVIDER:MODEL``;
    #: the command line's (``--header``, ``--no-chain``) over them for every model.
    providers: dict[str, ProviderSettings] = field(default_factory=dict, repr=False)
    every_model: ProviderSettings = field(default_factory=ProviderSettings, repr=False)
    #: API key per provider name, from the environment only.
    api_keys: dict[str, str] = field(default_factory=dict, repr=False)
    chars_per_token: float = 4.0
    context_limit: int = 200_000
    max_turns: int = 25
    #: Seconds without data from a model (before or during its answer) that fail the attempt.
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    #: ``[retries]``: retries of one model call, and the back-off before them (seconds).
    retries_max: int = 4
    retries_backoff: float = 0.5
    retries_backoff_max: float = 8.0
    redact_patterns: list[str] = field(default_factory=list)
    #: ``[sandbox]``: how ``bash`` is sandboxed (flags ``--sandbox``/``--sandbox-network`` win).
    sandbox_mode: str = "workdir"
    sandbox_network: bool = False
    #: Extra writable and hidden paths, as written (``~`` and relative paths resolved later).
    sandbox_writable: list[str] = field(default_factory=list)
    sandbox_hidden: list[str] = field(default_factory=list)
    #: Extra protected paths (readable, not writable by commands), as written.
    sandbox_protected: list[str] = field(default_factory=list)
    #: Environment variable names commands get besides the built-in allow-list.
    sandbox_env: list[str] = field(default_factory=list)
    #: Processes a command may have at once, memory per process (MiB); None: the defaults.
    sandbox_processes: int | None = None
    sandbox_memory_mb: int | None = None
    #: Paths of the home directory commands may read besides the built-in list, as written.
    sandbox_home_allow: list[str] = field(default_factory=list)
    #: Names commands reach through drover's HTTP proxy (normalised entries).
    sandbox_allow_domains: list[str] = field(default_factory=list)
    #: ``[permissions]``: rules that run calls without asking, and rules that refuse them.
    permissions_allow: tuple[Rule, ...] = ()
    permissions_deny: tuple[Rule, ...] = ()
    #: ``[[hooks]]``: commands run before and after tool calls and at a turn's end.
    hooks: tuple[HookSpec, ...] = ()
    #: ``[mcp] approve_project``: a workdir's ``.mcp.json`` servers that start without asking
    #: (True: all of them; names: those).
    mcp_approve_project: bool | frozenset[str] = False
    #: Whether turns are traced (the flag ``--otel`` and the ``OTEL_*`` variables may too).
    otel: bool = False
    #: How the command line writes its log: ``text`` or ``json`` (``--log-format`` wins).
    log_format: str = "text"
    #: ``http_client``: the SDKs' client on ``httpx`` or on ``aiohttp`` (None: the command's
    #: choice, :func:`drover.providers.factory.server_config` for ``drover serve``).
    http_client: str | None = None
    #: ``[retention]``: seconds a session may sit idle before ``drover serve`` prunes it (None:
    #: never), the latest sessions kept whatever their age, seconds between two prunes.
    retention_older_than: float | None = None
    retention_keep_last: int = 0
    retention_every: float = 3600.0
    #: The config file read, if one existed.
    path: Path | None = None
    #: Where each setting that is not a default came from (file path, variable, ``flag``).
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def default_provider(self) -> str:
        provider, _sep, _model = self.default_model.partition(":")
        return provider if provider in PROVIDERS else "anthropic"

    def resolve(self, spec: str) -> tuple[str, str]:
        """(provider, model) for a spec, an alias or a bare model name."""
        spec = self.aliases.get(spec.strip(), spec)
        return parse_model_spec(spec, self.default_provider)

    def api_key(self, provider: str) -> str | None:
        return self.api_keys.get(provider)

    def provider_settings(self, provider: str, model: str) -> ProviderSettings:
        """One model's ``[providers]`` settings: its own table over its provider's, the
        command line's over both."""
        tables = (self.providers.get(key) for key in (provider, f"{provider}:{model}"))
        return combined([*(t for t in tables if t is not None), self.every_model])

    @property
    def secrets(self) -> tuple[str, ...]:
        """What no journal, log or error may hold: every configured header value."""
        return combined([*self.providers.values(), self.every_model]).secrets

    def with_overrides(
        self,
        *,
        default_model: str | None = None,
        base_urls: Mapping[str, str] | None = None,
        chars_per_token: float | None = None,
        context_limit: int | None = None,
        max_turns: int | None = None,
        models: Sequence[str] | None = None,
        redact_patterns: Sequence[str] | None = None,
        stall_timeout: float | None = None,
        every_model: ProviderSettings | None = None,
    ) -> Config:
        """A copy with the given (non-None) values, as command-line flags set them."""
        where = "command line"
        changes: dict[str, Any] = {}
        if default_model is not None:
            provider, model = self.resolve(default_model)
            changes["default_model"] = f"{provider}:{model}"
        if base_urls is not None:
            changes["base_urls"] = {**self.base_urls, **_base_urls(base_urls, where)}
        if chars_per_token is not None:
            changes["chars_per_token"] = _chars_per_token(chars_per_token, where)
        if context_limit is not None:
            changes["context_limit"] = _positive_int(context_limit, where, "context_limit")
        if max_turns is not None:
            changes["max_turns"] = _positive_int(max_turns, where, "max_turns")
        if models is not None:
            changes["models"] = _specs(list(models), where, "models")
        if redact_patterns is not None:
            changes["redact_patterns"] = _patterns(list(redact_patterns), where)
        if stall_timeout is not None:
            changes["stall_timeout"] = _seconds(stall_timeout, where, "stall_timeout")
        if every_model is not None:
            changes["every_model"] = every_model.over(self.every_model)
        sources = {**self.sources, **dict.fromkeys(changes, "flag")}
        return replace(self, **changes, sources=sources)


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get("DROVER_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    return Path(platformdirs.user_config_dir("drover")) / "config.toml"


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The file's settings (if any), then the environment's."""
    env = os.environ if env is None else env
    path = path if path is not None else default_config_path(env)
    settings, sources = _read_file(path, env)
    _apply_env(settings, sources, env)
    keys = {p: env[var] for p, var in KEY_VARS.items() if env.get(var, "").strip()}
    return Config(
        **settings,
        api_keys=keys,
        path=path if path.is_file() else None,
        sources=sources,
    )


def list_models(config: Config) -> list[tuple[str, str]]:
    """(spec, where it comes from) for ``drover models``: default, configured, aliases."""
    rows = [(config.default_model, f"default ({config.sources.get('default_model', 'built-in')})")]
    where = config.sources.get("models", "config")
    rows += [(spec, where) for spec in config.models]
    alias_where = config.sources.get("aliases", "config")
    rows += [(alias, f"alias for {spec} ({alias_where})") for alias, spec in config.aliases.items()]
    seen: set[str] = set()
    unique = []
    for spec, source in rows:
        if spec not in seen:
            seen.add(spec)
            unique.append((spec, source))
    return unique


# --- reading -------------------------------------------------------------------------------


def _read_file(path: Path, env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    where = str(path)
    for key in data:
        if "key" in key.lower() and key not in _FILE_KEYS:
            raise ConfigError(
                f"{where}: '{key}': API keys are read from the environment only "
                "(ANTHROPIC_API_KEY, OPENAI_API_KEY), never from a file"
            )
        if key not in _FILE_KEYS:
            raise ConfigError(
                f"{where}: unknown setting '{key}' (expected {', '.join(_FILE_KEYS)})"
            )
    out: dict[str, Any] = {}
    if "aliases" in data:
        out["aliases"] = _aliases(data["aliases"], where)
    if "default_model" in data:
        default = data["default_model"]
        default = (
            out.get("aliases", {}).get(default, default) if isinstance(default, str) else default
        )
        out["default_model"] = _spec(default, where, "default_model")
    if "models" in data:
        out["models"] = _specs(data["models"], where, "models")
    if "base_urls" in data:
        out["base_urls"] = _base_urls(data["base_urls"], where)
    if "providers" in data:
        out["providers"] = providers_table(data["providers"], where, env, PROVIDERS)
    if "chars_per_token" in data:
        out["chars_per_token"] = _chars_per_token(data["chars_per_token"], where)
    for name in ("context_limit", "max_turns"):
        if name in data:
            out[name] = _positive_int(data[name], where, name)
    if "redact_patterns" in data:
        out["redact_patterns"] = _patterns(data["redact_patterns"], where)
    if "sandbox" in data:
        out.update(_sandbox(data["sandbox"], where))
    if "permissions" in data:
        out.update(permissions_table(data["permissions"], where))
    if "hooks" in data:
        out["hooks"] = hooks_table(data["hooks"], where)
    if "mcp" in data:
        out.update(mcp_table(data["mcp"], where))
    if "retention" in data:
        out.update(retention_table(data["retention"], where))
    if "retries" in data:
        out.update(retries_table(data["retries"], where))
    if "stall_timeout" in data:
        out["stall_timeout"] = _seconds(data["stall_timeout"], where, "stall_timeout")
    if "otel" in data:
        if not isinstance(data["otel"], bool):
            raise ConfigError(f"{where}: 'otel' must be true or false")
        out["otel"] = data["otel"]
    if "log_format" in data:
        if data["log_format"] not in LOG_FORMATS:
            raise ConfigError(f"{where}: 'log_format' must be one of {', '.join(LOG_FORMATS)}")
        out["log_format"] = data["log_format"]
    if "http_client" in data:
        if data["http_client"] not in HTTP_CLIENTS:
            raise ConfigError(f"{where}: 'http_client' must be one of {', '.join(HTTP_CLIENTS)}")
        out["http_client"] = data["http_client"]
    return out, dict.fromkeys(out, where)


def _apply_env(settings: dict[str, Any], sources: dict[str, str], env: Mapping[str, str]) -> None:
    def value(name: str) -> str | None:
        raw = env.get(name, "").strip()
        return raw or None

    urls = dict(settings.get("base_urls", {}))
    for provider, var in URL_VARS.items():
        url = value(var)
        if url is not None:
            urls[provider] = _url(url, var, provider)
            sources["base_urls"] = var
    if urls:
        settings["base_urls"] = urls
    model = value("DROVER_MODEL")
    if model is not None:
        model = settings.get("aliases", {}).get(model, model)
        default = Config(default_model=settings.get("default_model", DEFAULT_MODEL))
        try:
            provider, name = parse_model_spec(model, default.default_provider)
        except ConfigError as exc:
            raise ConfigError(f"DROVER_MODEL: {exc}") from None
        settings["default_model"] = f"{provider}:{name}"
        sources["default_model"] = "DROVER_MODEL"
    chars = value("DROVER_CHARS_PER_TOKEN")
    if chars is not None:
        settings["chars_per_token"] = _chars_per_token(chars, "DROVER_CHARS_PER_TOKEN")
        sources["chars_per_token"] = "DROVER_CHARS_PER_TOKEN"
    turns = value("DROVER_MAX_TURNS")
    if turns is not None:
        settings["max_turns"] = _positive_int(turns, "DROVER_MAX_TURNS", "value")
        sources["max_turns"] = "DROVER_MAX_TURNS"
    stall = value("DROVER_STALL_TIMEOUT")
    if stall is not None:
        settings["stall_timeout"] = _seconds(stall, "DROVER_STALL_TIMEOUT", "value")
        sources["stall_timeout"] = "DROVER_STALL_TIMEOUT"


# --- validation ----------------------------------------------------------------------------


def _kind(value: object) -> str:
    return type(value).__name__


def _spec(value: object, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {name} must be a model spec like 'anthropic:MODEL'")
    if ":" not in value:
        raise ConfigError(f"{where}: {name} '{value}' must be PROVIDER:MODEL")
    try:
        parse_model_spec(value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {name}: {exc}") from None
    return value.strip()


def _specs(value: object, where: str, name: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {name} must be a list of model specs, got {_kind(value)}")
    return [_spec(item, where, f"{name}[{i}]") for i, item in enumerate(value)]


def _aliases(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: [aliases] must be a table of name = "PROVIDER:MODEL"')
    return {str(name): _spec(spec, where, f"aliases.{name}") for name, spec in value.items()}


def _url(value: object, where: str, provider: str) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+", value.strip()):
        raise ConfigError(f"{where}: base URL for {provider} must be an http(s) URL, got {value!r}")
    return value.strip()


def _base_urls(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f'{where}: [base_urls] must be a table of provider = "URL"')
    urls: dict[str, str] = {}
    for provider, url in value.items():
        if provider not in PROVIDERS:
            raise ConfigError(
                f"{where}: [base_urls] has unknown provider '{provider}' "
                "(expected anthropic, openai or openai-responses)"
            )
        urls[provider] = _url(url, where, provider)
    return urls


def _number(value: object, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: {name} must be a number, got {_kind(value)}")
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{where}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {name} must be a finite number, got {value!r}")
    return number


def _chars_per_token(value: object, where: str) -> float:
    name = "chars_per_token" if where != "DROVER_CHARS_PER_TOKEN" else "value"
    number = _number(value, where, name)
    low, high = CHARS_PER_TOKEN_RANGE
    if not low <= number <= high:
        raise ConfigError(f"{where}: {name} must be between {low:g} and {high:g}, got {number:g}")
    return number


def _seconds(value: object, where: str, name: str) -> float:
    number = _number(value, where, name)
    if number <= 0:
        raise ConfigError(f"{where}: {name} must be a number of seconds above 0, got {value!r}")
    return number


def _positive_int(value: object, where: str, name: str) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value)
    if number is None or number < 1:
        raise ConfigError(f"{where}: {name} must be a positive integer, got {value!r}")
    return number


def _patterns(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"{where}: redact_patterns must be a list of regular expressions")
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"{where}: redact_patterns: {pattern!r} is not a valid regular expression ({exc})"
            ) from None
    return list(value)


def _sandbox(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [sandbox] must be a table ({', '.join(_SANDBOX_KEYS)})")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _SANDBOX_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'sandbox.{key}' (expected {', '.join(_SANDBOX_KEYS)})"
            )
        if key == "mode":
            if item not in SANDBOX_MODES:
                raise ConfigError(
                    f"{where}: sandbox.mode must be one of {', '.join(SANDBOX_MODES)}, got {item!r}"
                )
            out["sandbox_mode"] = item
        elif key == "network":
            if not isinstance(item, bool):
                raise ConfigError(f"{where}: sandbox.network must be true or false")
            out["sandbox_network"] = item
        elif key in ("processes", "memory_mb"):
            out[f"sandbox_{key}"] = _positive_int(item, where, f"sandbox.{key}")
        elif key == "env":
            if not isinstance(item, list) or not all(
                isinstance(n, str) and _ENV_NAME.match(n) for n in item
            ):
                raise ConfigError(
                    f"{where}: sandbox.env must be a list of variable names (NAME or PREFIX*)"
                )
            out["sandbox_env"] = list(item)
        elif key == "allow_domains":
            if not isinstance(item, list) or not all(isinstance(d, str) for d in item):
                raise ConfigError(f"{where}: sandbox.allow_domains must be a list of names")
            try:
                out["sandbox_allow_domains"] = [domain_entry(d) for d in item]
            except ConfigError as exc:
                raise ConfigError(f"{where}: sandbox.allow_domains: {exc}") from None
        else:
            if not isinstance(item, list) or not all(isinstance(p, str) and p for p in item):
                raise ConfigError(f"{where}: sandbox.{key} must be a list of paths")
            out[f"sandbox_{key}"] = list(item)
    return out
