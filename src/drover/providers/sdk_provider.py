"""The plumbing every provider shares: its SDK client, retries, stream relay and error mapping.

A provider module keeps what is its own — the request it builds and the mapping of its SDK's
events onto neutral stream events — and subclasses :class:`SdkProvider`, which

* builds the SDK client the same way for every protocol: the SDK's own retries off (drover
  retries, counting a model call's retries once), httpx's timeouts from ``stall_timeout``, the
  extra ``headers`` a gateway needs as the SDK's ``default_headers`` (over the SDK's own, its
  key's header included: a gateway's ``Authorization`` replaces the API key's), and
  the HTTP client the ``http_client`` option names: the SDK's default (``httpx``) or the SDK's
  own aiohttp-backed client (``aiohttp``, the SDKs' ``aiohttp`` extra: the same ``httpx2``
  requests and responses, read by aiohttp's C parser, which costs a server less CPU per
  streamed event);
* streams through :func:`~drover.providers.retry.retrying` with the request's retry budget;
* relays one attempt: opens it under the stall guard, then reads it through an
  :class:`~drover.providers.sdk_stream.SdkStream`, telling :func:`retrying` the stream has
  started once the first event was mapped (an error event raises before that), and asks the
  mapper to finish when the SDK's stream runs out;
* maps the SDK's exceptions onto drover's error tree (:func:`translate_sdk_error`), the two
  SDKs differing only in their exception classes and in how their APIs word an error's type
  and a request over the context window (:class:`SdkErrors`).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypedDict, TypeVar

import anyio
import httpx2

from drover.config.expand import kept_secrets
from drover.core.model_stream import ModelRequest, StreamEvent
from drover.errors import (
    ConfigError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    StreamError,
)
from drover.providers.base import EventMapper
from drover.providers.client_env import check_client_environment
from drover.providers.retry import (
    STARTED,
    RetryPolicy,
    Started,
    context_overflow,
    error_message,
    foreign_error_text,
    is_api_error_body,
    parse_retry_after,
    retrying,
    stream_error,
    where_to_look,
)
from drover.providers.sdk_stream import (
    DEFAULT_STALL_TIMEOUT,
    ClosableStream,
    SdkStream,
    misnamed_timeout,
    stall_guard,
    transport_timeout,
    wrapped,
)
from drover.providers.sse import SseError
from drover.providers.whole_text import WholeText

T = TypeVar("T")


class SdkClient(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=SdkClient)

#: ``(exception, status or None inside a stream, message, type, code)`` → (the error type drover
#: reports, whether the request does not fit the context window).
Classify = Callable[[Any, int | None, str, str | None, str | None], tuple[str | None, bool]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkErrors:
    """One SDK's exceptions, and how its API words what drover tells apart."""

    #: The SDK's name, for an error of its own.
    sdk: str
    #: The variable its API key comes from, named when authentication fails.
    key_var: str
    #: What to check about a base URL whose server answered with something not the API's.
    url_hint: str
    status_error: type[Exception]
    connection_error: type[Exception]
    #: An error the API sent inside a streamed 200 response.
    stream_error: type[Exception]
    #: The root of the SDK's exceptions.
    sdk_error: type[Exception]
    classify: Classify


def translate_sdk_error(
    exc: Exception, errors: SdkErrors, api: str
) -> tuple[ProviderError, float | None] | None:
    """An SDK or transport exception as a drover error, with the server's retry-after; None
    for an exception that is not the SDK's or the transport's (it propagates unchanged)."""
    if isinstance(exc, errors.status_error) and getattr(exc, "status_code", 0) >= 400:
        return _http_error(exc, errors)
    if isinstance(exc, errors.connection_error):
        failure = misnamed_timeout(exc)
        if failure is not None:  # (the SDK says "timed out": it did not)
            return _unreachable(f"cannot reach {api}: {failure}", exc), None
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        return _unreachable(f"cannot reach {api}: {exc}{cause}", exc), None
    if isinstance(exc, errors.stream_error):
        message, error_type, code = error_message(getattr(exc, "body", None), str(exc))
        kind, overflow = errors.classify(exc, None, message, error_type, code)
        if overflow:
            return context_overflow(message, error_type=kind), None
        return stream_error(message, kind, code), None
    if isinstance(exc, httpx2.RequestError | anyio.EndOfStream):
        detail = str(exc) or type(exc).__name__
        return ProviderConnectionError(f"connection to {api} failed: {detail}"), None
    if isinstance(exc, json.JSONDecodeError | SseError):
        return stream_error(f"{api} sent malformed data: {exc}", "malformed"), None
    if isinstance(exc, errors.sdk_error):
        return StreamError(f"{errors.sdk} SDK error: {exc}", retryable=False), None
    return None


def _unreachable(message: str, exc: BaseException) -> ProviderConnectionError:
    """A connection that failed: retryable, unless the server's certificate could not be
    verified — a CA bundle or a host name to fix, which no new attempt changes."""
    error = ProviderConnectionError(message)
    if _certificate_refused(exc):
        error.retryable = False
    return error


def _certificate_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is or wraps (each client in its own way) a failed verification of the
    server's certificate."""
    return wrapped(exc, ssl.SSLCertVerificationError) is not None


def _http_error(exc: Any, errors: SdkErrors) -> tuple[ProviderError, float | None]:
    status: int = exc.status_code
    message, error_type, code = error_message(exc.body, str(exc))
    kind, overflow = errors.classify(exc, status, message, error_type, code)
    request = exc.response.request
    if not is_api_error_body(exc.body):
        text = foreign_error_text(exc.body, exc.response.reason_phrase)
        message = f"{text} ({where_to_look(request.method, request.url, errors.url_hint)})"
    elif status == 404:
        message = f"{message} ({request.method} {request.url})"
    elif status == 401:
        message = f"authentication failed: {message} (check {errors.key_var})"
    elif overflow:
        return context_overflow(message, status=status, error_type=kind), None
    error = ProviderHTTPError(status, message, error_type=kind)
    should_retry = exc.response.headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        error.retryable = should_retry == "true"
    return error, parse_retry_after(exc.response.headers)


def field(obj: object, name: str, default: Any = None) -> Any:
    """A field of an API object, given as its JSON (a dict) or as the SDK's model."""
    if type(obj) is dict:
        return obj.get(name, default)
    return getattr(obj, name, default)


def int_attr(obj: object, name: str) -> int | None:
    """An API object's integer field (a count), or None when absent or not an integer."""
    value = field(obj, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: object) -> str:
    """A field that should be text, or "" when it is not."""
    return value if isinstance(value, str) else ""


def untransformed(key: str, value: Sequence[Any]) -> dict[str, Any]:
    """``extra_body`` that sends ``value`` (a request parameter already in its wire form) at
    ``key`` as it is.

    The ``openai`` SDK walks every parameter of ``create`` against its TypedDicts
    (``maybe_transform``) before encoding it: for a history of plain dicts and strings that walk
    changes nothing, yet it costs about as much as everything else in a request together
    (~0.2 ms a message on Chat Completions, ~0.7 ms on Responses, whose item type is a wide
    union). ``extra_body`` is merged into the body after that walk, key by key, so the history
    goes there, over a placeholder ``[]`` passed as the parameter itself: the body keeps the
    same keys in the same order, and the same bytes.
    """
    return {key: value}


class SdkOptions(TypedDict, total=False):
    """What every provider's constructor takes besides its model, key and base URL."""

    max_retries: int
    backoff_base: float
    backoff_max: float
    timeout: float
    #: The most output tokens a request may ask for.
    max_tokens: int
    #: The most seconds any wait for data may last.
    stall_timeout: float
    #: ``httpx`` (the SDK's default client) or ``aiohttp`` (the SDK's ``DefaultAioHttpClient``).
    http_client: str
    #: Extra headers sent with every request (a gateway's routing or authentication).
    headers: Mapping[str, str]


class SdkProvider(Generic[C]):
    """A provider on an official SDK whose client is a ``C``; see the module docstring."""

    #: The protocol name used in ``PROVIDER:MODEL``.
    provider: ClassVar[str]
    #: The API as error messages name it ("the Anthropic API").
    api: ClassVar[str]
    errors: ClassVar[SdkErrors]
    #: The SDK's client on aiohttp (its ``DefaultAioHttpClient``), for ``http_client="aiohttp"``.
    aiohttp_client: ClassVar[Callable[..., httpx2.AsyncClient]]

    def __init__(
        self,
        model: str,
        client: Callable[..., C],
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        timeout: float = 600.0,
        max_tokens: int = 8192,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        http_client: str = "httpx",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._model = model
        # What a server may echo of a header into an error: each value, and each word of one
        # (the token of "Bearer TOKEN").
        values = (headers or {}).values()
        self._secrets = kept_secrets(w for v in values for w in (v, *v.split()))
        self._stall_timeout = stall_timeout
        self._max_tokens = max_tokens
        self._policy = RetryPolicy(
            max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max
        )
        timeouts = transport_timeout(timeout, stall_timeout)
        check_client_environment(http_client)
        try:
            # None: the SDK builds its default httpx client (with these timeouts).
            http = self.aiohttp_client(timeout=timeouts) if http_client == "aiohttp" else None
            self._client = client(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                timeout=timeouts,
                http_client=http,
                default_headers=dict(headers) if headers else None,
            )
        except (OSError, ValueError, ImportError, httpx2.InvalidURL) as exc:
            # (what the check above does not foresee)
            raise ConfigError(f"cannot set up the HTTP client for {self.api}: {exc}") from None

    @property
    def name(self) -> str:
        return self.provider

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        return retrying(
            self._policy,
            lambda: self._attempt(request),
            self._translate,
            budget=request.retry_budget,
            secrets=self._secrets,
        )

    def _translate(self, exc: Exception) -> tuple[ProviderError, float | None] | None:
        return translate_sdk_error(exc, self.errors, self.api)

    def _max_output(self, request: ModelRequest) -> int:
        """The request's output cap, within this provider's."""
        return min(request.max_tokens, self._max_tokens) or self._max_tokens

    async def _guard(self, opening: Awaitable[T]) -> T:
        """``await opening`` (the request that opens a stream), a timeout as the stall error."""
        return await stall_guard(opening, self._stall_timeout, self.api)

    async def _open(self, request: ModelRequest) -> tuple[ClosableStream[Any], EventMapper]:
        """Send the request (through :meth:`_guard`); its SDK stream and a fresh mapper."""
        raise NotImplementedError

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[StreamEvent | Started, None]:
        sdk_stream, mapper = await self._open(request)
        events = WholeText(mapper)  # a character split over two deltas is joined
        started = False
        async with SdkStream(sdk_stream, stall_timeout=self._stall_timeout, api=self.api) as stream:
            while (raw := await stream.next()) is not None:
                mapped = events.feed(raw)  # an error event raises before the stream counts
                if not started:
                    started = True
                    yield STARTED
                for event in mapped:
                    yield event
            for event in events.finish():
                yield event
