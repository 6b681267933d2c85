"""Webhooks: a turn's end announced to a URL, signed, from the journal's durable outbox.

A turn started with a webhook URL (``drover serve --webhook URL``, or ``webhook`` on one
posted message) keeps the URL on its row; whatever ends the turn — its own process, shutdown,
or another server taking over after a crash — writes the announcement to the outbox in the
same transaction. A :class:`Deliverer` (``drover serve`` runs one) POSTs each due row:

- the body is JSON: ``{"id", "type": "turn.ended", "session_id", "turn_id", "status",
  "reason", "error", "usage", "ended_at"}``, fixed when the turn ended;
- ``X-Drover-Signature: sha256=<hex>`` is HMAC-SHA256 of the exact body bytes with the
  secret (``--webhook-secret`` or ``DROVER_WEBHOOK_SECRET``), ``X-Drover-Delivery`` the id;
- any 2xx answer is delivered; anything else (another status, a refused connection, no whole
  answer — status line and headers; the body is not read — within :data:`TIMEOUT` of the
  attempt's start) is retried with exponential backoff — ``backoff`` seconds, doubling, at most
  :data:`MAX_BACKOFF` — and given up after :data:`MAX_ATTEMPTS` attempts.

Receivers are independent: a deliverer sends to different receivers (URLs) side by side, at
most :data:`LANES` attempts at once, and to one receiver one attempt at a time, its oldest due
delivery first. A receiver that is slow or dead thus holds one lane for at most
:data:`TIMEOUT` per attempt, and never delays another receiver's deliveries.

Delivery is at least once: a deliverer holds a row under a claim that runs out, and a process
that dies between sending and recording the answer leaves the row to be sent again (by itself
after a restart, or by another server). The receiver drops a repeat by its ``id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2

from drover.errors import ConfigError, DroverError
from drover.journal.protocol import WebhookOutbox
from drover.journal.records import Delivery

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Drover-Signature"
DELIVERY_HEADER = "X-Drover-Delivery"
SECRET_ENV = "DROVER_WEBHOOK_SECRET"
#: Seconds one attempt may take, whole (connecting, sending, and the answer's status and headers).
TIMEOUT = 10.0
#: Seconds before the first retry (doubling after each failure, up to MAX_BACKOFF).
BACKOFF = 2.0
MAX_BACKOFF = 600.0
#: Attempts before a delivery is given up (with the defaults, about two hours of trying).
MAX_ATTEMPTS = 16
#: Seconds between two looks at the outbox when nothing wakes the deliverer sooner.
POLL = 1.0
#: Attempts one deliverer has in flight at most (each to another receiver).
LANES = 8
#: A claim outlasts its attempt (bounded by the timeout) and the recording of its answer by
#: this many timeouts.
HOLD_TIMEOUTS = 3


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``: ``sha256=`` and the HMAC's hex digest."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, body: bytes, header: str) -> bool:
    """Whether ``header`` is the signature of ``body`` (a receiver's check, constant time)."""
    return hmac.compare_digest(sign(secret, body), header)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased (how allowed targets are compared)."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def check_url(url: str, what: str = "webhook") -> str:
    """``url`` if it is an absolute http(s) URL with a host and no credentials; ConfigError
    saying what is wrong otherwise."""
    if not url or len(url) > 2000 or any(c.isspace() for c in url):
        raise ConfigError(f"{what}: not a URL: {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: expected an http:// or https:// URL with a host: {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{what}: a URL may not hold credentials (sign with the secret)")
    try:
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError:
        raise ConfigError(f"{what}: invalid port in {url!r}") from None
    return url


class Targets:
    """Where a server's turns may announce their end: the operator's ``--webhook`` URL, and
    the URLs a client names per message only under an origin the operator allowed
    (``--webhook-origin``, and the ``--webhook`` URL's own). A client can thus never make the
    server call an address of the operator's network it was not told to."""

    def __init__(self, default: str | None, origins: list[str]) -> None:
        self.default = None if default is None else check_url(default, "--webhook")
        allowed = {origin(check_url(o, "--webhook-origin")) for o in origins}
        if self.default is not None:
            allowed.add(origin(self.default))
        self.origins = frozenset(allowed)

    @property
    def enabled(self) -> bool:
        return bool(self.origins)

    def allow(self, url: str) -> str:
        """``url`` when a client may name it; :class:`DroverError` saying why not."""
        try:
            check_url(url)
        except ConfigError as exc:
            raise DroverError(str(exc)) from None
        if origin(url) not in self.origins:
            raise DroverError(
                "webhook: this server does not deliver to that origin (its operator allows "
                "them with --webhook-origin)"
            )
        return url


def backoff_after(attempts: int, base: float = BACKOFF) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt."""
    return float(min(base * 2 ** max(attempts - 1, 0), MAX_BACKOFF))


class Deliverer:
    """Delivers the outbox's due rows until stopped (:meth:`run`, or ``async with``).

    Each look claims the oldest due row of each receiver it is not sending to already (as
    many as it has free lanes), POSTs each in a task of its own, and records each answer; a
    finished attempt, or :meth:`wake` (a turn just ended here), makes it look again at once.
    ``claimer`` names this process in the claims: its owner id
    (:func:`~drover.journal.owners.owner_id`, ``agent.runner.owner``), so that a deliverer
    after a crash finds the claims of the dead process free at once."""

    def __init__(
        self,
        outbox: WebhookOutbox,
        secret: str,
        claimer: str,
        *,
        backoff: float = BACKOFF,
        poll: float = POLL,
        max_attempts: int = MAX_ATTEMPTS,
        timeout: float = TIMEOUT,
        lanes: int = LANES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ConfigError(f"webhooks need a secret: --webhook-secret or {SECRET_ENV}")
        if lanes < 1 or not timeout > 0:
            raise ConfigError("webhooks: lanes must be at least 1 and the timeout positive")
        self._outbox = outbox
        self._secret = secret
        self._claimer = claimer
        self._backoff = backoff
        self._poll = poll
        self._max_attempts = max_attempts
        self._timeout = timeout
        self._lanes = lanes
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The attempt in flight to each receiver (URL).
        self._sending: dict[str, asyncio.Task[None]] = {}

    def wake(self) -> None:
        self._wake.set()

    async def __aenter__(self) -> Deliverer:
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """Deliver until cancelled. A cancellation mid-attempt leaves the row claimed; the
        claim runs out and the row is sent again (at least once)."""
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(self._timeout)) as client:
            try:
                while True:
                    self._wake.clear()
                    if await self._start_due(client):
                        continue  # more may be due already
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._poll)
            finally:
                sending = list(self._sending.values())
                for attempt in sending:
                    attempt.cancel()
                await asyncio.gather(*sending, return_exceptions=True)

    async def _start_due(self, client: httpx2.AsyncClient) -> bool:
        """Start an attempt for each due row of a receiver not sent to now, in free lanes;
        whether any started."""
        free = self._lanes - len(self._sending)
        if free <= 0:
            return False
        try:
            due = await self._outbox.claim_deliveries(
                self._claimer, self._timeout * HOLD_TIMEOUTS, free, busy=tuple(self._sending)
            )
        except DroverError as exc:
            log.warning("webhooks: cannot read the outbox (%s)", exc)
            return False
        loop = asyncio.get_running_loop()
        for delivery in due:
            attempt = loop.create_task(self._attempt(client, delivery))
            self._sending[delivery.url] = attempt
            attempt.add_done_callback(functools.partial(self._sent, delivery))
        return bool(due)

    def _sent(self, delivery: Delivery, attempt: asyncio.Task[None]) -> None:
        if self._sending.get(delivery.url) is attempt:
            del self._sending[delivery.url]
        if not attempt.cancelled() and attempt.exception() is not None:
            log.error("webhook %s: the attempt failed", delivery.id, exc_info=attempt.exception())
        self._wake.set()  # a lane is free, and the receiver's next delivery may be due

    async def _attempt(self, client: httpx2.AsyncClient, delivery: Delivery) -> None:
        error = await self._post(client, delivery)
        attempts = delivery.attempts + 1
        retry_at: float | None = None
        if error is not None:
            if attempts < self._max_attempts:
                retry_at = self._clock() + backoff_after(attempts, self._backoff)
            log.warning(
                "webhook %s to %s failed (%s); %s",
                delivery.id,
                delivery.url,
                error,
                "retrying" if retry_at is not None else "given up",
            )
        try:
            await self._outbox.settle_delivery(
                delivery.id, self._claimer, error=error, retry_at=retry_at
            )
        except DroverError as exc:
            # The claim runs out and the row is sent again: at least once.
            log.warning("webhooks: cannot record delivery %s (%s)", delivery.id, exc)

    async def _post(self, client: httpx2.AsyncClient, delivery: Delivery) -> str | None:
        """POST the delivery; None when a 2xx answer came in time, else what went wrong. The
        timeout bounds the whole attempt: the client's own bounds each read only, which a
        receiver sending a byte at a time never trips."""
        body = delivery.body.encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "drover-webhook",
            SIGNATURE_HEADER: sign(self._secret, body),
            DELIVERY_HEADER: delivery.id,
        }
        try:
            async with asyncio.timeout(self._timeout):
                # The answer's body is never read: its status says it all.
                async with client.stream(
                    "POST", delivery.url, content=body, headers=headers
                ) as answer:
                    status = answer.status_code
        except TimeoutError:
            return f"no answer within {self._timeout:g} s"
        except (httpx2.HTTPError, httpx2.InvalidURL, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return None if 200 <= status < 300 else f"HTTP {status}"
