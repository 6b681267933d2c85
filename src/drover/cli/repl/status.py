"""The REPL's status line and token accounting: model, tokens used, estimated cost, context
left, session id.

Cost comes from a per-model price table (US dollars per million tokens, input and output):
a few well-known models are built in, and the user extends or overrides them in a TOML file,
``prices.toml`` beside the config file (or the file ``DROVER_PRICES`` names)::

    [models]
    "anthropic:claude-sonnet-4-5" = { input = 3.0, output = 15.0 }
    "my-local-model" = { input = 0, output = 0 }

A key matches the full ``PROVIDER:MODEL`` or the model name alone; the longest prefix wins,
so ``"gpt-4o"`` prices ``gpt-4o-2024-08-06`` too. A model without a price shows no cost.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from drover.config.settings import default_config_path
from drover.core.messages import Usage
from drover.errors import ConfigError

#: (input, output) US dollars per million tokens; list prices when this table was written.
BUILTIN_PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-haiku-4": (1.0, 5.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4o": (2.5, 10.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1": (2.0, 8.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5": (1.25, 10.0),
    "o3": (2.0, 8.0),
}


def prices_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    named = env.get("DROVER_PRICES")
    if named:
        return Path(named).expanduser()
    return default_config_path(env).parent / "prices.toml"


def load_prices(path: Path) -> dict[str, tuple[float, float]]:
    """The built-in table overlaid with the user's file (when there is one)."""
    prices = dict(BUILTIN_PRICES)
    if not path.is_file():
        return prices
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable price table: {exc}") from None
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"{path}: [models] must be a table")
    for name, entry in models.items():
        try:
            prices[name] = (float(entry["input"]), float(entry["output"]))
        except (TypeError, KeyError, ValueError):
            raise ConfigError(
                f"{path}: models.{name} needs numbers 'input' and 'output' "
                "(dollars per million tokens)"
            ) from None
    return prices


def price_of(model: str, prices: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The price of ``PROVIDER:MODEL``: full spec first, then the model name; longest prefix."""
    name = model.split(":", 1)[1] if ":" in model else model
    for candidate in (model, name):
        matches = [key for key in prices if candidate.startswith(key)]
        if matches:
            return prices[max(matches, key=len)]
    return None


def short_count(tokens: int) -> str:
    if tokens < 1000:
        return str(tokens)
    if tokens < 1_000_000:
        return f"{tokens / 1000:.1f}k"
    return f"{tokens / 1_000_000:.2f}M"


@dataclass
class TokenAccount:
    """Tokens used in the session (from the API's usage reports), and what they cost."""

    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    used: Usage = field(default_factory=Usage)
    cost: float = 0.0
    priced: bool = True

    def add(self, usage: Usage, model: str) -> None:
        self.used = self.used + usage
        price = price_of(model, self.prices)
        if price is None:
            self.priced = False
            return
        tokens_in = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.cost += (tokens_in * price[0] + usage.output_tokens * price[1]) / 1_000_000

    def cost_text(self, model: str) -> str:
        """The estimated cost, ``$0.0123`` (``+`` when some usage was of a model without a
        price), or ``n/a`` when nothing used has a price."""
        if not self.cost and (not self.priced or price_of(model, self.prices) is None):
            return "n/a"
        return f"${self.cost:.4f}" + ("" if self.priced else "+")


def status_text(
    *,
    model: str,
    account: TokenAccount,
    context_used: int,
    context_limit: int,
    session_id: str,
    sandbox: str | None = None,
) -> str:
    """One line: the most useful first, since a narrow terminal cuts the end."""
    left = max(context_limit - context_used, 0)
    percent = 100 * left // context_limit if context_limit else 0
    used = account.used
    parts = [
        model,
        f"{short_count(used.input_tokens + used.output_tokens)} tokens",
        cost if (cost := account.cost_text(model)) != "n/a" else "cost n/a",
        f"~{percent}% context left",
        f"session {session_id[:12]}",
    ]
    if sandbox:
        parts.append(f"sandbox {sandbox}")
    return " │ ".join(parts)
