"""The conversation manager: committed history, system prompt and the token budget.

It knows nothing of providers or tools. Reads return snapshots (a tuple the caller may keep
while the history moves on); appends take a lock, so a request in flight is never affected by
a concurrent append.

The token count is an estimate: characters ÷ ``chars_per_token`` (default 4, or
``DROVER_CHARS_PER_TOKEN``). After every model call the loop reports the provider's real input
token count for the request it estimated, and an exponential moving average of real ÷ estimated
calibrates the estimate used for compaction decisions (shown by ``/tokens``).

Compaction replaces everything but a tail with one user message that frames a summary as
background, never separating a tool call from its result.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from drover.core.messages import Message, content_chars, user_message

SUMMARY_SENTINEL = "[Summary of the earlier conversation: background context, not a new request]"
DEFAULT_CHARS_PER_TOKEN = 4.0
CALIBRATION_ALPHA = 0.3


def summary_message(summary: str) -> Message:
    return user_message(f"{SUMMARY_SENTINEL}\n\n{summary}")


def estimate_tokens(system_prompt: str, messages: Iterable[Message], chars_per_token: float) -> int:
    chars = len(system_prompt) + sum(content_chars(m) for m in messages)
    return int(chars / chars_per_token)


def safe_cut(messages: Sequence[Message], keep_tail: int) -> int:
    """Index where the kept tail starts, moved earlier so no tool result loses its call."""
    cut = max(0, len(messages) - keep_tail)
    while 0 < cut < len(messages) and messages[cut].tool_results:
        cut -= 1
    return cut


class ConversationManager:
    def __init__(
        self,
        *,
        system_prompt: str = "",
        context_limit: int = 200_000,
        chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
        compaction_ratio: float = 0.8,
        messages: Iterable[Message] = (),
    ) -> None:
        if not 1 <= chars_per_token <= 32:
            raise ValueError("chars_per_token must be between 1 and 32")
        self._lock = threading.Lock()
        self._messages: list[Message] = list(messages)
        self._system_prompt = system_prompt
        self.context_limit = context_limit
        self.chars_per_token = chars_per_token
        self.compaction_ratio = compaction_ratio
        self._calibration: float | None = None

    # -- history -------------------------------------------------------------------------------

    def messages(self) -> tuple[Message, ...]:
        with self._lock:
            return tuple(self._messages)

    def append(self, message: Message) -> None:
        with self._lock:
            self._messages.append(message)

    def extend(self, messages: Iterable[Message]) -> None:
        with self._lock:
            self._messages.extend(messages)

    def replace(self, messages: Iterable[Message]) -> None:
        """The history as stored anew (another process, or recovery, moved it on)."""
        with self._lock:
            self._messages = list(messages)

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    @property
    def system_prompt(self) -> str:
        with self._lock:
            return self._system_prompt

    def set_system_prompt(self, prompt: str) -> None:
        with self._lock:
            self._system_prompt = prompt

    # -- token budget --------------------------------------------------------------------------

    def estimate(self, messages: Iterable[Message]) -> int:
        """Raw estimate for a request made of the system prompt and ``messages``."""
        return estimate_tokens(self.system_prompt, messages, self.chars_per_token)

    def estimated_tokens(self, extra: Iterable[Message] = ()) -> int:
        with self._lock:
            messages = [*self._messages, *extra]
            prompt = self._system_prompt
        return estimate_tokens(prompt, messages, self.chars_per_token)

    def calibrated_tokens(self, extra: Iterable[Message] = ()) -> int:
        """The estimate scaled by the calibration learnt from real usage."""
        return int(self.estimated_tokens(extra) * (self._calibration or 1.0))

    @property
    def calibration(self) -> float | None:
        """EMA of provider input tokens ÷ estimated tokens; None before the first report."""
        return self._calibration

    def record_usage(self, estimated: int, actual_input_tokens: int) -> None:
        if estimated <= 0 or actual_input_tokens <= 0:
            return
        ratio = actual_input_tokens / estimated
        with self._lock:
            if self._calibration is None:
                self._calibration = ratio
            else:
                self._calibration += CALIBRATION_ALPHA * (ratio - self._calibration)

    def needs_compaction(self, extra: Iterable[Message] = ()) -> bool:
        return self.calibrated_tokens(extra) > self.context_limit * self.compaction_ratio

    # -- compaction ----------------------------------------------------------------------------

    def summarise(self, summary: str, keep_tail: int) -> bool:
        """Replace all but the last ``keep_tail`` messages by a framed summary.

        Returns False (and changes nothing) when there is nothing to replace.
        """
        with self._lock:
            cut = safe_cut(self._messages, keep_tail)
            if cut == 0:
                return False
            self._messages = [summary_message(summary), *self._messages[cut:]]
            return True
