"""Secret redaction for everything the journal persists.

:class:`Redactor` finds well-known credentials — Anthropic and OpenAI keys, GitHub tokens, AWS
access key ids, Slack tokens, Google API keys, ``Bearer`` tokens and JWTs, PEM private key
blocks and passwords inside URLs — plus patterns from the configuration, and replaces each with
``[REDACTED]``. A pattern with a group named ``secret`` redacts only that group (``Bearer`` and
URL passwords keep their context: ``https://user:[REDACTED]@host``).

Streamed text needs more care than a finished string: a key may arrive split over two deltas,
and a flush between them would write its first half before the redactor could recognise it.
:class:`StreamRedactor` therefore writes only a *safe prefix* of what it buffered and keeps a
raw tail back for the next flush. The tail starts at the earliest of:

* the trailing run of characters a credential can consist of (ASCII letters, digits and
  ``_-.~+/=``, capped at :data:`HOLD_MAX` characters) — a secret that is still arriving lies
  inside that run, and text no key can contain (spaces, punctuation, Chinese…) is never held;
* an opening that can still grow into a secret across whitespace or across a long run: a
  ``Bearer`` prefix, a ``scheme://user:`` URL whose ``@`` has not arrived, an unfinished
  ``-----BEGIN … PRIVATE KEY`` line or a key block without its END line (held until it ends);
* any match that crosses the cut or touches the end of the buffer (it may continue).

The written prefix is redacted with the matches found in the *whole* buffer, so a secret is
always redacted in one piece. The final flush of a block (its message ended) writes the rest,
redacting an unterminated key block to the end. The cost is that a reload in mid-stream shows
the text up to the last key-like run of characters (the journal, which writes whole deltas,
passes the places its deltas end: up to the delta that run begins in).
"""

from __future__ import annotations

import re
import string
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, assert_never

from drover.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from drover.errors import ConfigError

REDACTED = "[REDACTED]"
#: The longest key-like tail kept back at a flush (a key is far shorter).
HOLD_MAX = 256
#: The characters of the built-in credentials (keys, tokens, JWTs, base64).
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_-.~+/=")

_TOKEN = r"[A-Za-z0-9_\-]"
#: Where a key of a built-in pattern can begin (used to hold a streamed tail back).
_KEY_START = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abposr]-|xapp-|AIza|eyJ)"
)
_BUILTIN_PATTERNS: tuple[str, ...] = (
    # Anthropic (sk-ant-api03-…, sk-ant-admin01-…)
    rf"(?<![A-Za-z0-9_\-])sk-ant-{_TOKEN}{{20,}}",
    # OpenAI (sk-…, sk-proj-…, sk-svcacct-…); a digit tells a key from words like "sk-learn-…"
    rf"(?<![A-Za-z0-9_\-])sk-(?={_TOKEN}*[0-9]){_TOKEN}{{20,}}",
    # GitHub personal, OAuth, app and refresh tokens; fine-grained personal access tokens
    r"(?<![A-Za-z0-9_])(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",
    r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{30,}",
    # AWS access key ids
    r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
    # Slack bot, user, app and config tokens
    r"(?<![A-Za-z0-9])(?:xox[abposr]|xapp)-[0-9A-Za-z\-]{10,}",
    # Google API keys
    r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35,}",
    # Bearer tokens: a digit, or a length no English word has
    r"(?i)\bbearer\s+(?P<secret>(?=[A-Za-z0-9._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{8,}"
    r"|[A-Za-z0-9._~+/=\-]{20,})",
    # JSON Web Tokens (bearer credentials even without the "Bearer" in front)
    r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    # PEM private key blocks; an unterminated one is redacted to the end of the text
    r"(?s)-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    # passwords in URLs: scheme://user:PASSWORD@host
    r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/?#@]+:(?P<secret>[^\s/?#@]+)@",
)

#: What every match of a built-in pattern contains (one for each above, in order): text with
#: none of these holds no built-in credential, and one search over it replaces eleven.
_BUILTIN_MARKS = re.compile(
    r"sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abposr]-|xapp-|AIza|(?i:bearer)|eyJ|-----BEGIN|://"
)
#: The same marks less ``bearer``: each alternative begins with a literal, so ``re`` skips to
#: the positions of their first characters instead of trying every alternative everywhere (well
#: under half the time on prose). ``bearer`` in any case is looked for in the lowered text: only
#: ``b e a r`` in either case lower to those letters, so both find the same texts.
_CASED_MARKS = re.compile(
    r"sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abposr]-|xapp-|AIza|eyJ|-----BEGIN|://"
)


def _has_mark(text: str) -> bool:
    """Whether ``text`` holds one of :data:`_BUILTIN_MARKS` (the quick check of every string
    persisted; see :data:`_CASED_MARKS` for why it is not that search)."""
    return _CASED_MARKS.search(text) is not None or "bearer" in text.lower()


#: Openings that can still grow into a secret; a flush keeps them back whole.
_OPENINGS = (
    re.compile(r"(?i)\bbearer\s+\S*\Z"),
    # a URL whose credentials may still arrive, from its scheme's colon on
    re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}:(?://[^\s/?#@]*|/?)\Z"),
    re.compile(r"-----BEGIN[A-Z0-9 ]*-{0,5}\Z"),
)


#: The sequences :meth:`Redactor.redact_obj` redacts item by item (a tuple: no union per call).
_SEQUENCES = (list, tuple)


class Redactor:
    """Replaces credentials in text and JSON values with ``[REDACTED]``."""

    def __init__(self, extra_patterns: Sequence[str] = ()) -> None:
        compiled: list[re.Pattern[str]] = [re.compile(p) for p in _BUILTIN_PATTERNS]
        for pattern in extra_patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ConfigError(f"invalid redaction pattern {pattern!r}: {exc}") from None
        self._builtin = tuple(compiled[: len(_BUILTIN_PATTERNS)])
        self._extra = tuple(compiled[len(_BUILTIN_PATTERNS) :])

    # -- finding -------------------------------------------------------------------------------

    def _matches(self, text: str) -> list[tuple[int, int, int, int]]:
        """Every match as (match start, match end, redacted start, redacted end)."""
        found: list[tuple[int, int, int, int]] = []
        patterns = self._extra
        if _has_mark(text):
            patterns = self._builtin + patterns
        for pattern in patterns:
            has_secret = "secret" in pattern.groupindex
            for m in pattern.finditer(text):
                if m.end() == m.start():
                    continue
                if has_secret and m.start("secret") >= 0:
                    found.append((m.start(), m.end(), m.start("secret"), m.end("secret")))
                else:
                    found.append((m.start(), m.end(), m.start(), m.end()))
        return found

    @staticmethod
    def _apply(text: str, spans: list[tuple[int, int]]) -> str:
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        pos = 0
        cur_start, cur_end = spans[0]
        for start, end in spans[1:]:
            if start < cur_end:
                cur_end = max(cur_end, end)
                continue
            out += (text[pos:cur_start], REDACTED)
            pos = cur_end
            cur_start, cur_end = start, end
        out += (text[pos:cur_start], REDACTED, text[cur_end:])
        return "".join(out)

    # -- public --------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced."""
        if not self._extra and not _has_mark(text):
            return text  # the common case: one scan, nothing built
        spans = [(rs, re_) for _, _, rs, re_ in self._matches(text) if re_ > rs]
        return self._apply(text, spans)

    def redact_prefix(self, text: str, ends: Sequence[int] | None = None) -> tuple[str, int]:
        """Redact the longest prefix of a growing text that no later text can change.

        Returns the redacted prefix and the length of raw text it covers; the caller keeps
        ``text[cut:]`` and prepends it to what arrives next. ``ends`` (increasing offsets):
        the only places the prefix may end, besides 0 (a journal writes whole deltas).
        """
        n = len(text)
        run = n
        while run > 0 and n - run < HOLD_MAX and text[run - 1] in _KEY_CHARS:
            run -= 1
        cut = run
        # A key-like start in the key-like tail is held however long the tail grows: whether
        # it is a key may only be decided by a character still to come.
        tail = run
        while tail > 0 and text[tail - 1] in _KEY_CHARS:
            tail -= 1
        key = _KEY_START.search(text, tail)
        if key is not None:
            cut = min(cut, key.start())
        for opening in _OPENINGS:
            m = opening.search(text)
            if m is not None:
                cut = min(cut, m.start())
        if ends is not None:
            cut = _at_or_before(ends, cut)
        matches = self._matches(text)
        moved = True
        while moved:
            moved = False
            for start, end, _, _ in matches:
                if start < cut and (end > cut or end == n):
                    cut, moved = start if ends is None else _at_or_before(ends, start), True
        spans = [(rs, re_) for _, end, rs, re_ in matches if end <= cut and re_ > rs]
        return self._apply(text[:cut], spans), cut

    def redact_obj(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string value redacted (keys are kept)."""
        kind = type(value)
        if kind is str:
            return self.redact(value)
        if kind is int or kind is bool or kind is float or value is None:
            return value  # the common leaves, without the abstract-class checks below
        if kind is dict or isinstance(value, Mapping):
            # (every event the journal logs is one: its leaves are taken here, not in a call
            # each; a string with no mark of a built-in credential is kept as redact keeps it)
            plain = not self._extra
            out: dict[Any, Any] = {}
            for k, v in value.items():
                kind = type(v)
                if kind is str:
                    marked = _CASED_MARKS.search(v) is not None or "bearer" in v.lower()
                    out[k] = self.redact(v) if marked or not plain else v
                elif kind is int or kind is bool or kind is float or v is None:
                    out[k] = v
                else:
                    out[k] = self.redact_obj(v)
            return out
        if isinstance(value, _SEQUENCES):
            return [self.redact_obj(v) for v in value]
        if isinstance(value, str):
            return self.redact(value)
        return value

    def redact_message(self, message: Message) -> Message:
        """A copy of ``message`` with text, thinking, tool inputs and results redacted.

        Opaque provider data (signatures, redacted thinking, ``meta``) is kept unchanged so a
        same-provider resume stays lossless; it carries no plain text. A thinking block whose
        text had to change loses its signature, which no longer matches it.
        """
        blocks = tuple(self._redact_block(b) for b in message.content)
        if all(new is old for new, old in zip(blocks, message.content, strict=True)):
            return message
        return replace(message, content=blocks)

    def _redact_block(self, block: ContentBlock) -> ContentBlock:
        match block:
            case TextBlock():
                text = self.redact(block.text)
                return block if text == block.text else replace(block, text=text)
            case ThinkingBlock():
                thinking = self.redact(block.thinking)
                if thinking == block.thinking:
                    return block
                return replace(block, thinking=thinking, signature=None)
            case ToolUseBlock():
                redacted = self.redact_obj(dict(block.input))
                return block if redacted == dict(block.input) else replace(block, input=redacted)
            case ToolResultBlock():
                content = self.redact(block.content)
                return block if content == block.content else replace(block, content=content)
            case ImageBlock():
                return block  # bytes, not text: a pattern matching inside base64 would break it
            case _:
                assert_never(block)


def _at_or_before(ends: Sequence[int], cut: int) -> int:
    """The greatest of ``ends`` (increasing) not past ``cut``; 0 when none is."""
    i = bisect_right(ends, cut)
    return ends[i - 1] if i else 0


class StreamRedactor:
    """Buffers one text stream and hands out redacted text that is safe to write."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._held = ""
        self._chunks: list[str] = []

    def feed(self, text: str) -> None:
        self._chunks.append(text)

    @property
    def pending(self) -> bool:
        """Whether anything (new text or a held tail) is waiting to be written."""
        return bool(self._chunks) or bool(self._held)

    @property
    def held_chars(self) -> int:
        """Raw characters kept back by the last :meth:`take`."""
        return len(self._held)

    def take(self, *, final: bool = False, ends: Sequence[int] | None = None) -> str:
        """Redacted text ready to write; ``final`` releases the held tail too. ``ends``: where
        what is written may end, in offsets of the raw text held and fed since (see
        :meth:`Redactor.redact_prefix`)."""
        buffered = self._held + "".join(self._chunks)
        self._chunks.clear()
        if final:
            self._held = ""
            return self._redactor.redact(buffered)
        out, cut = self._redactor.redact_prefix(buffered, ends)
        self._held = buffered[cut:]
        return out
