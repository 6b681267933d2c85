"""``${VAR}`` in configured text, expanded from the environment — and what that expansion means
for secrecy.

``${VAR}`` is the variable's value and ``${VAR:-default}`` the default when the variable is
unset or empty; any other ``$`` is kept as written. An :class:`Expander` remembers what it
substituted (a value from the environment is treated as a secret: nothing drover shows, logs or
stores holds it) and which variables were missing, so its caller decides whether a missing one
is an error (the config file's headers) or a note (an MCP server that will not start).
:func:`secret_patterns` turns secrets into patterns for the journal's redactor; :func:`scrub`
takes them out of a text shown as it is (an error a server echoed a secret into).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: Secrets shorter than this are not redacted (a one-character value would blank out text).
MIN_SECRET_LENGTH = 8
REDACTED = "[REDACTED]"
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class Expander:
    """Expands ``${VAR}``; remembers what it substituted (secrets) and what was missing."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.substituted: list[str] = []
        self.missing: list[str] = []

    def __call__(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            value = self._env.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    self.missing.append(name)
                    return ""
                value = default
            else:
                self.substituted.append(value)
            return value

        return VARIABLE.sub(one, text)

    def missing_text(self) -> str:
        """``${A}, ${B}``: the variables that were missing, each once, in order."""
        return ", ".join(f"${{{name}}}" for name in dict.fromkeys(self.missing))


def kept_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth redacting (long enough not to blank out ordinary words), each once,
    longest first (so a secret that contains another is replaced whole)."""
    return tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True))


def secret_patterns(secrets: Iterable[str]) -> list[str]:
    """Secrets as patterns for the journal's redactor, longest first."""
    return [re.escape(secret) for secret in kept_secrets(secrets)]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret (longest first, as :func:`kept_secrets` orders them) replaced
    by ``[REDACTED]``."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text
