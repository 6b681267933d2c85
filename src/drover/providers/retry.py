"""Retries before a response starts, and the error helpers every provider shares.

:func:`retrying` runs one streaming attempt after another. A retryable failure (HTTP 408, 409,
429, 5xx and 529, a refused or dropped connection, an ``overloaded_error`` event) that happens
before the attempt's stream delivered its first event is retried with exponential backoff and
jitter, honouring the server's ``retry-after`` up to a cap; each new attempt is announced by a
:class:`~drover.providers.base.RetryNotice`. An attempt reports that its stream has started by
yielding :data:`STARTED` (which :func:`retrying` keeps to itself) before anything else.

An error reported inside a stream is retryable when its type says the server was the problem
(``overloaded_error``, ``api_error``, ``server_error``…) or when its code is such an HTTP status:
gateways in front of a model report an upstream failure part-way through a 200 response with
only a status code (LiteLLM's Chat Completions stream: ``{"error": {"type": null, "code":
"500"}}``, whatever the upstream said — an overload, a dropped connection), and that is as
transient as the same status before the stream started. A type that says the request itself is
wrong (``invalid_request_error``…) is final whatever the code.

Once the stream has started a failure is never retried here: it is raised as a
:class:`~drover.errors.StreamError` (keeping its ``retryable`` flag) and the loop decides —
except a :class:`~drover.errors.ContextOverflowError`, which keeps its class wherever it
arrives (the Responses API can report it in a ``response.failed`` event), so the caller can
compact and try again. Cancellation is never caught: the attempt generator is closed, which
closes its SDK stream.

An error's message may hold what the server echoed back of the request; ``secrets`` (the values
of the extra headers a provider sends) are taken out of it before it is announced or raised.

Retries come from one of two counters. With ``retry_budget`` (a
:class:`~drover.core.model_stream.RetryBudget` the caller made for one model call, and spends its
own mid-stream retries from) every retry here is taken from it, so the call as a whole never
makes more than ``budget.limit`` retries however the layers share them. Without one, the
policy's ``max_retries`` counts this stream's retries alone. Either way, an error raised
because no retry was left says how many attempts were made.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import random
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from drover.config.expand import scrub
from drover.core.model_stream import RetryBudget, RetryNotice, StreamEvent
from drover.errors import ContextOverflowError, ProviderError, StreamError, retryable_status

#: Translates an SDK or transport exception into (drover error, retry-after seconds), or
#: None when the exception is not one the provider knows (it then propagates unchanged).
Translate = Callable[[Exception], "tuple[ProviderError, float | None] | None"]

#: Anthropic / OpenAI (and gateway) error types and codes that mean "try again later" when
#: seen in a stream; LiteLLM says ``internal_server_error`` for an upstream's failure.
RETRYABLE_ERROR_TYPES = frozenset(
    {
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "timeout_error",
        "server_error",
        "rate_limit_exceeded",
        "incomplete_stream",
        "internal_server_error",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    #: The longest ``retry-after`` honoured; a server asking for more gets this.
    retry_after_max: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (counting from 1)."""
        if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
            return min(retry_after, self.retry_after_max)
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + self.rng.random() / 2)


class Started:
    """The sentinel type of :data:`STARTED`."""

    def __repr__(self) -> str:
        return "STARTED"


#: Yielded by an attempt once its SDK stream delivered an event: from then on, no retry.
STARTED = Started()

Attempt = Callable[[], AsyncGenerator["StreamEvent | Started", None]]


async def retrying(
    policy: RetryPolicy,
    attempt: Attempt,
    translate: Translate,
    *,
    budget: RetryBudget | None = None,
    secrets: Sequence[str] = (),
) -> AsyncGenerator[StreamEvent, None]:
    """The events of the first attempt that gets going, with retries before that."""
    retries = 0
    while True:
        started = False
        try:
            async with contextlib.aclosing(attempt()) as events:
                async for event in events:
                    if isinstance(event, Started):
                        started = True
                        continue
                    started = True
                    yield event
            return
        except Exception as exc:
            cause: Exception = exc
            if isinstance(exc, ProviderError):
                error, retry_after = exc, None
            else:
                translated = translate(exc)
                if translated is None:
                    raise
                error, retry_after = translated
        if started:
            error = as_stream_error(error)
        if secrets:
            hide(error, secrets)
        if not started and error.retryable:
            if budget is not None:
                may_retry = budget.spend()
                number = budget.used
            else:
                may_retry = retries < policy.max_retries
                number = retries + 1
            if may_retry:
                retries += 1
                delay = policy.delay(number, retry_after)
                yield RetryNotice(attempt=number, delay=delay, error=str(error))
                await asyncio.sleep(delay)
                continue
            attempts = (budget.used if budget is not None else retries) + 1
            if attempts > 1:
                gave_up(error, attempts)
        if error is cause:
            raise error
        raise error from cause


def hide(error: ProviderError, secrets: Sequence[str]) -> None:
    """Take ``secrets`` out of ``error``'s message."""
    error.args = tuple(scrub(a, secrets) if isinstance(a, str) else a for a in error.args)


def gave_up(error: ProviderError, attempts: int) -> None:
    """Add to ``error``'s message that it ended ``attempts`` attempts (no retry was left)."""
    error.args = (f"{error} (gave up after {attempts} attempts)", *error.args[1:])


def as_stream_error(error: ProviderError) -> ProviderError:
    """``error`` as the :class:`StreamError` of a stream that already yielded content (a
    context overflow stays what it is: only a smaller request can help)."""
    if isinstance(error, StreamError | ContextOverflowError):
        return error
    error_type = getattr(error, "error_type", None)
    return StreamError(str(error), error_type=error_type, retryable=error.retryable)


def stream_error(message: str, error_type: str | None, code: str | None = None) -> StreamError:
    """A mid-stream error event; retryable when its type or its code says the server was the
    problem (see the module docstring), unless its type says the request was wrong."""
    fatal = error_type in StreamError.FATAL_TYPES
    retryable = not fatal and (server_side(error_type) or server_side(code))
    return StreamError(message, error_type=error_type, retryable=retryable)


def server_side(kind: str | None) -> bool:
    """Whether an error's type or code says the server was the problem: a known type, or an
    HTTP status a new attempt may get past (``"500"``, ``"529"``, ``"429"``, ``"408"``)."""
    if kind is None:
        return False
    if kind in RETRYABLE_ERROR_TYPES:
        return True
    is_status = len(kind) == 3 and kind.isascii() and kind.isdigit()
    return is_status and retryable_status(int(kind))


def error_code(value: object) -> str | None:
    """An error's ``code`` as text: the API's string, or a number (``"code": 502``) as its
    digits; None for anything else."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        with contextlib.suppress(ValueError):
            return float(millis) / 1000
    value = headers.get("retry-after")
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return float(value)
    with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return None


def error_message(body: object, fallback: str) -> tuple[str, str | None, str | None]:
    """(message, type, code) from an API error body, Anthropic's or OpenAI's shape.

    Anthropic: ``{"type": "error", "error": {"type", "message"}}``; OpenAI: ``{"error":
    {"message", "type", "code", "param"}}`` — or the inner object alone, as the OpenAI SDK
    keeps it. A body that is not JSON is used as the message when it is short.
    """
    inner = body.get("error") if isinstance(body, Mapping) else None
    detail = inner if isinstance(inner, Mapping) else body
    if isinstance(detail, Mapping):
        message = detail.get("message")
        kind = detail.get("type")
        return (
            message if isinstance(message, str) and message else fallback,
            kind if isinstance(kind, str) else None,
            error_code(detail.get("code")),
        )
    if isinstance(body, str) and body.strip() and len(body) < 500:
        return body.strip(), None, None
    return fallback, None, None


def context_overflow(
    message: str, *, status: int | None = None, error_type: str | None = None
) -> ContextOverflowError:
    """The request does not fit the context window; ``status`` None: said inside a stream."""
    error = ContextOverflowError(200 if status is None else status, message, error_type=error_type)
    if status is None:
        error.args = (message,)
    error.retryable = False
    return error


def is_api_error_body(body: object) -> bool:
    """Whether an error body is the API's JSON error object (Anthropic's or OpenAI's shape,
    or the inner object alone), rather than a page from something else at that URL."""
    if not isinstance(body, Mapping):
        return False
    inner = body.get("error", body)
    return isinstance(inner, Mapping) and isinstance(inner.get("message"), str)


def foreign_error_text(body: object, reason: str) -> str:
    """A short message for an error body that is not the API's: its text on one line, cut at
    200 characters, or else the status's reason phrase."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = " ".join(body.split()) if isinstance(body, str) else ""
    if len(text) > 200:
        text = text[:200] + "…"
    return text or reason or "no error message"


def where_to_look(method: str, url: object, hint: str) -> str:
    """The request that failed, and the question to ask about it."""
    return f"{method} {url} — is the base URL right? {hint}"
