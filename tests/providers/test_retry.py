"""The retry driver and error helpers, with scripted attempts (no network)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Callable

import pytest

from drover.core.messages import Usage
from drover.core.model_stream import (
    BlockDelta,
    BlockStart,
    RetryBudget,
    RetryNotice,
    StreamEnd,
    StreamEvent,
)
from drover.errors import (
    ContextOverflowError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    StreamError,
)
from drover.providers.retry import (
    STARTED,
    RetryPolicy,
    Started,
    context_overflow,
    error_message,
    parse_retry_after,
    retrying,
    stream_error,
)

FAST = RetryPolicy(max_retries=3, backoff_base=0.0001, backoff_max=0.0002)
END = StreamEnd(stop_reason="end_turn", usage=Usage())
TEXT = BlockStart(index=0, kind="text")


class Boom(Exception):
    """An SDK-ish exception the translator knows."""

    def __init__(self, status: int = 529, retry_after: float | None = None) -> None:
        super().__init__(f"boom {status}")
        self.status = status
        self.retry_after = retry_after


def translate(exc: Exception) -> tuple[ProviderError, float | None] | None:
    if isinstance(exc, Boom):
        return ProviderHTTPError(exc.status, "boom"), exc.retry_after
    return None


Script = list[list["StreamEvent | Started | Exception"]]


def scripted(
    script: Script,
) -> tuple[Callable[[], AsyncGenerator[StreamEvent | Started, None]], list[int]]:
    """One attempt per entry; each yields its items in order, raising the exceptions."""
    calls: list[int] = []

    async def attempt() -> AsyncGenerator[StreamEvent | Started, None]:
        steps = script[len(calls)]
        calls.append(len(calls))
        for step in steps:
            if isinstance(step, Exception):
                raise step
            yield step

    return attempt, calls


async def run(
    script: Script, policy: RetryPolicy = FAST, budget: RetryBudget | None = None
) -> tuple[list[StreamEvent], BaseException | None, int]:
    attempt, calls = scripted(script)
    events: list[StreamEvent] = []
    error: BaseException | None = None
    try:
        async for event in retrying(policy, attempt, translate, budget=budget):
            events.append(event)
    except Exception as exc:
        error = exc
    return events, error, len(calls)


async def test_success_needs_one_attempt() -> None:
    events, error, attempts = await run([[STARTED, TEXT, END]])
    assert error is None and attempts == 1
    assert events == [TEXT, END]  # STARTED stays inside


async def test_failures_before_the_stream_starts_are_retried_with_notices() -> None:
    events, error, attempts = await run([[Boom()], [Boom(500)], [STARTED, TEXT, END]])
    assert error is None and attempts == 3
    notices = [e for e in events if isinstance(e, RetryNotice)]
    assert [n.attempt for n in notices] == [1, 2]
    assert notices[0].error == "HTTP 529: boom"
    assert events[-2:] == [TEXT, END]


async def test_drover_errors_raised_by_an_attempt_are_retried_too() -> None:
    dropped = ProviderConnectionError("refused")
    events, error, attempts = await run([[dropped], [STARTED, END]])
    assert error is None and attempts == 2 and isinstance(events[0], RetryNotice)


async def test_retries_run_out_and_the_last_error_is_raised() -> None:
    events, error, attempts = await run([[Boom()]] * 4)
    assert attempts == 4
    assert isinstance(error, ProviderHTTPError) and error.status == 529
    assert isinstance(error.__cause__, Boom)
    assert len(events) == 3 and all(isinstance(e, RetryNotice) for e in events)
    assert str(error) == "HTTP 529: boom (gave up after 4 attempts)"


async def test_a_budget_replaces_the_policys_count() -> None:
    budget = RetryBudget(limit=2)
    events, error, attempts = await run([[Boom()]] * 5, FAST, budget)
    assert attempts == 3 and budget.used == 2 and budget.remaining == 0
    assert [e.attempt for e in events if isinstance(e, RetryNotice)] == [1, 2]
    assert str(error) == "HTTP 529: boom (gave up after 3 attempts)"
    generous = RetryBudget(limit=5)
    _events, error, attempts = await run(
        [[Boom()], [Boom()], [STARTED, END]], RetryPolicy(max_retries=0), generous
    )
    assert error is None and attempts == 3 and generous.used == 2


async def test_retries_the_caller_already_spent_count_against_the_call() -> None:
    # The loop retried once mid-stream (spending from the same budget) and streams again.
    budget = RetryBudget(limit=2)
    assert budget.spend()
    events, error, attempts = await run([[Boom()]] * 3, FAST, budget)
    assert attempts == 2 and budget.used == 2
    assert [e.attempt for e in events if isinstance(e, RetryNotice)] == [2]
    assert str(error) == "HTTP 529: boom (gave up after 3 attempts)"
    spent = RetryBudget(limit=1, used=1)
    events, error, attempts = await run([[Boom()], [STARTED, END]], FAST, spent)
    assert attempts == 1 and events == []
    assert str(error) == "HTTP 529: boom (gave up after 2 attempts)"


async def test_failures_no_retry_can_help_leave_the_budget_alone() -> None:
    budget = RetryBudget(limit=3)
    _events, error, _attempts = await run([[Boom(400)]], FAST, budget)
    assert budget.used == 0 and str(error) == "HTTP 400: boom"
    _events, error, _attempts = await run([[STARTED, TEXT, Boom()]], FAST, budget)
    assert budget.used == 0 and isinstance(error, StreamError)
    assert "gave up" not in str(error)


async def test_a_context_overflow_keeps_its_class_even_after_the_stream_started() -> None:
    overflow = context_overflow("too long", error_type="context_length_exceeded")
    events, error, attempts = await run([[STARTED, overflow], [STARTED, END]])
    assert attempts == 1 and events == [] and error is overflow
    assert isinstance(error, ContextOverflowError) and not error.retryable
    assert str(error) == "too long"


async def test_errors_that_cannot_succeed_are_not_retried() -> None:
    events, error, attempts = await run([[Boom(400)], [STARTED, END]])
    assert attempts == 1 and events == []
    assert isinstance(error, ProviderHTTPError) and error.status == 400


async def test_no_retry_once_the_stream_started_and_the_error_becomes_a_stream_error() -> None:
    events, error, attempts = await run([[STARTED, TEXT, Boom(529)], [STARTED, END]])
    assert attempts == 1 and events == [TEXT]
    assert isinstance(error, StreamError) and error.retryable  # the loop may retry it


async def test_started_alone_is_enough_to_stop_retries() -> None:
    # message_start / a role chunk / response.created: nothing visible yet, but it began.
    events, error, attempts = await run([[STARTED, ProviderConnectionError("gone")]])
    assert attempts == 1 and events == []
    assert isinstance(error, StreamError) and error.retryable


async def test_unknown_exceptions_propagate_unchanged() -> None:
    _events, error, _attempts = await run([[KeyError("bug")]])
    assert isinstance(error, KeyError)


async def test_retry_after_is_honoured_and_capped() -> None:
    policy = RetryPolicy(max_retries=2, backoff_base=0.0001, retry_after_max=0.001)
    events, error, _ = await run([[Boom(429, 0.0005)], [Boom(429, 30.0)], [STARTED, END]], policy)
    assert error is None
    delays = [e.delay for e in events if isinstance(e, RetryNotice)]
    assert delays == [0.0005, 0.001]


def test_backoff_grows_exponentially_with_jitter_up_to_the_max() -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_max=8.0, rng=random.Random(7))
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (9, 8.0)]:
        delay = policy.delay(attempt, None)
        assert ceiling / 2 <= delay <= ceiling


async def test_cancellation_closes_the_attempt_at_once() -> None:
    closed = asyncio.Event()
    reached = asyncio.Event()

    async def attempt() -> AsyncGenerator[StreamEvent | Started, None]:
        try:
            yield STARTED
            yield BlockDelta(index=0, kind="text", data="a")
            reached.set()
            await asyncio.Event().wait()  # a stalled stream
            yield END
        finally:
            closed.set()

    async def consume() -> None:
        async with contextlib.aclosing(retrying(FAST, attempt, translate)) as stream:
            async for _event in stream:
                pass

    task = asyncio.create_task(consume())
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()


async def test_cancellation_during_backoff_propagates() -> None:
    policy = RetryPolicy(max_retries=1, backoff_base=3600, backoff_max=3600)
    notified = asyncio.Event()

    async def consume() -> None:
        attempt, _calls = scripted([[Boom()], [STARTED, END]])
        async for event in retrying(policy, attempt, translate):
            if isinstance(event, RetryNotice):
                notified.set()

    task = asyncio.create_task(consume())
    await notified.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    when = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": when}, now=1445412480.0) == 10.0


def test_error_message_reads_both_api_shapes() -> None:
    anthropic_body = {"type": "error", "error": {"type": "overloaded_error", "message": "Over"}}
    assert error_message(anthropic_body, "x") == ("Over", "overloaded_error", None)
    openai_inner = {"message": "Nope", "type": "invalid_request_error", "code": "bad"}
    assert error_message(openai_inner, "x") == ("Nope", "invalid_request_error", "bad")
    assert error_message({"error": openai_inner}, "x") == ("Nope", "invalid_request_error", "bad")
    assert error_message("Bad Gateway", "x") == ("Bad Gateway", None, None)
    assert error_message(None, "fallback") == ("fallback", None, None)


def test_stream_errors_are_retryable_by_type() -> None:
    assert stream_error("busy", "overloaded_error").retryable
    assert stream_error("oops", "api_error").retryable
    assert not stream_error("bad", "invalid_request_error").retryable
    assert not stream_error("?", None).retryable


def test_stream_errors_are_retryable_by_a_status_code_too() -> None:
    """A gateway's ``"code": "500"`` with no type (LiteLLM) is as transient as an HTTP 500."""
    for code in ("500", "502", "529", "429", "408"):
        assert stream_error("upstream failed", None, code).retryable, code
        assert stream_error("upstream failed", code).retryable, code
    for code in ("400", "401", "404", "200", "5000", "50", "abc", ""):
        assert not stream_error("no", None, code).retryable, code
    # The type says the request was wrong: no code makes a new attempt useful.
    assert not stream_error("bad", "invalid_request_error", "500").retryable
    assert stream_error("busy", "internal_server_error").retryable
