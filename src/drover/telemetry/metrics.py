"""Prometheus metrics of a server process, in a registry of its own (``GET /metrics``).

=============================================  ===============================================
``drover_turns_total{status}``                 turns this process ran, by how they ended
                                               (completed, incomplete, failed, interrupted)
``drover_tool_calls_total{tool,state}``        tool calls (workers' too) by final state
``drover_model_call_duration_seconds``         a model call, from its step's start to its
                                               response (or its end); ``{provider,model}``
``drover_model_time_to_first_token_seconds``   from a model call's start to its first text,
                                               thinking or tool input
``drover_model_retries_total``                 retries of model calls (before or during a
                                               stream)
``drover_tokens_total{type}``                  tokens reported by the models (``input``,
                                               ``output``), ``{provider,model}``
``drover_journal_commits_total``               transactions the turns' journals made
``drover_journal_writes_total``                writes they held
``drover_journal_commit_seconds``              how long one took (the flush latency)
``drover_sse_clients``                         event streams open now
``drover_replay_seconds``                      serving a client's backlog (log and ring)
``drover_takeovers_total``                     turns of dead processes this process ended
``drover_turns_running``                       turns running in this process now
``drover_queue_messages_total{outcome}``       queued messages, by what this process did with
                                               them: ``queued`` (a message written to a
                                               session's queue), ``started`` (a queued
                                               message's turn began here), ``cancelled``
=============================================  ===============================================

The turn, call and token counters are fed by :class:`MetricsSink`, a live event sink the runner
adds to each turn; the journal's by its commit hook (:meth:`Metrics.journal_committed`); the
queue's by the runner's queue (:meth:`Metrics.queue_message`), where every front door's queue
operation goes; the rest by the server. A test checks the counters against the journal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeAlias

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from drover.core.events import (
    TERMINAL_TOOL_STATES,
    AssistantMessage,
    Done,
    Error,
    Event,
    Incomplete,
    Retry,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolStateChanged,
    UsageReport,
    WorkerEvent,
    turn_status,
)
from drover.telemetry.genai import provider_name

#: Seconds: model calls take from a fraction of a second to minutes.
_CALL_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)
_FIRST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32)
#: A commit of the journal takes a fraction of a millisecond (SQLite) to tens (a far server).
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_REPLAY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

#: What became of a queued message, as ``drover_queue_messages_total`` counts it.
QueueOutcome: TypeAlias = Literal["queued", "started", "cancelled"]
QUEUE_OUTCOMES: tuple[QueueOutcome, ...] = ("queued", "started", "cancelled")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The metrics of one process (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        model = ("provider", "model")
        self.turns = Counter(
            "drover_turns", "Turns run here, by how they ended.", ["status"], registry=registry
        )
        self.tool_calls = Counter(
            "drover_tool_calls",
            "Tool calls (workers' included), by final state.",
            ["tool", "state"],
            registry=registry,
        )
        self.model_calls = Histogram(
            "drover_model_call_duration_seconds",
            "Model calls, from the start of the step to its response.",
            model,
            buckets=_CALL_BUCKETS,
            registry=registry,
        )
        self.first_token = Histogram(
            "drover_model_time_to_first_token_seconds",
            "From the start of a model call to its first streamed text, thinking or tool input.",
            model,
            buckets=_FIRST_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "drover_model_retries", "Retries of model calls.", model, registry=registry
        )
        self.tokens = Counter(
            "drover_tokens",
            "Tokens the models reported, by type (input, output).",
            [*model, "type"],
            registry=registry,
        )
        self.commits = Counter(
            "drover_journal_commits", "Transactions of the turns' journals.", registry=registry
        )
        self.writes = Counter(
            "drover_journal_writes", "Writes those transactions held.", registry=registry
        )
        self.commit_seconds = Histogram(
            "drover_journal_commit_seconds",
            "How long one journal transaction took (the flush latency).",
            buckets=_COMMIT_BUCKETS,
            registry=registry,
        )
        self.replay = Histogram(
            "drover_replay_seconds",
            "Serving a client's backlog of events (from the log and the live ring).",
            buckets=_REPLAY_BUCKETS,
            registry=registry,
        )
        self.takeovers = Counter(
            "drover_takeovers", "Turns of dead processes this process ended.", registry=registry
        )
        self.queue_messages = Counter(
            "drover_queue_messages",
            "Queued messages, by outcome (queued, started, cancelled).",
            ["outcome"],
            registry=registry,
        )
        for outcome in QUEUE_OUTCOMES:  # each outcome reads 0 before its first
            self.queue_messages.labels(outcome)
        self._sse = Gauge("drover_sse_clients", "Event streams open now.", registry=registry)
        self._running = Gauge(
            "drover_turns_running", "Turns running in this process now.", registry=registry
        )

    def watch_sse_clients(self, count: Callable[[], int]) -> None:
        """Read the number of open event streams from ``count`` at each scrape."""
        self._sse.set_function(lambda: float(count()))

    def watch_running_turns(self, count: Callable[[], int]) -> None:
        self._running.set_function(lambda: float(count()))

    def journal_committed(self, writes: int, seconds: float) -> None:
        """The journal's commit hook: one transaction of ``writes`` writes took ``seconds``."""
        self.commits.inc()
        self.writes.inc(writes)
        self.commit_seconds.observe(seconds)

    def queue_message(self, outcome: QueueOutcome) -> None:
        """A message was queued, its turn started here, or it was cancelled."""
        self.queue_messages.labels(outcome).inc()

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def turn_sink(self, protocol: str, model: str) -> MetricsSink:
        return MetricsSink(self, provider_name(protocol), model)


class MetricsSink:
    """Counts one turn's events into :class:`Metrics`; a live event sink."""

    def __init__(self, metrics: Metrics, provider: str, model: str) -> None:
        self._metrics = metrics
        labels = (provider, model)
        self._calls = metrics.model_calls.labels(*labels)
        self._first = metrics.first_token.labels(*labels)
        self._retries = metrics.retries.labels(*labels)
        self._input = metrics.tokens.labels(*labels, "input")
        self._output = metrics.tokens.labels(*labels, "output")
        # When each agent's (the turn's, a worker's) model call began, until its first chunk
        # (then the negative of it) and its end (then absent).
        self._began: dict[object, float] = {}
        self._first_seen: set[object] = set()

    async def send(self, event: Event) -> None:
        self._count(None, event)

    def _count(self, agent: object, event: Event) -> None:
        match event:
            case TextDelta() | ThinkingDelta():
                if agent not in self._first_seen:
                    self._first_chunk(agent)
            case ToolStateChanged():
                if event.state == "input-streaming" and agent not in self._first_seen:
                    self._first_chunk(agent)
                elif event.state in TERMINAL_TOOL_STATES:
                    self._metrics.tool_calls.labels(event.name, event.state).inc()
            case StepStarted():
                self._began[agent] = time.monotonic()
                self._first_seen.discard(agent)
            case UsageReport() if not event.usage.partial:  # counted whole at the answer's end
                self._input.inc(event.usage.input_tokens)
                self._output.inc(event.usage.output_tokens)
            case AssistantMessage():
                self._call_ended(agent)
            case Retry():
                self._retries.inc()
            case WorkerEvent():
                self._count((event.call_id, event.worker), event.event)
            case Done() | Incomplete() | Error():
                self._call_ended(agent)
                if agent is None:
                    self._metrics.turns.labels(turn_status(event)).inc()
            case _:
                pass

    def _first_chunk(self, agent: object) -> None:
        self._first_seen.add(agent)
        began = self._began.get(agent)
        if began is not None:
            self._first.observe(time.monotonic() - began)

    def _call_ended(self, agent: object) -> None:
        began = self._began.pop(agent, None)
        if began is not None:
            self._calls.observe(time.monotonic() - began)
