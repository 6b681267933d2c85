"""What a process observes of its turns, and how an operator turns it on.

:class:`Telemetry` is handed to an :class:`~drover.agent.agent.Agent` (and so to its runner): a
tracer provider when traces are wanted, the Prometheus :class:`~drover.telemetry.metrics.Metrics`
when a server exposes them, and whether message content goes into spans. Nothing here is
process-wide: drover never installs a global tracer provider, and an agent without telemetry
builds no span, no metric and no extra event sink.

Traces are wanted when ``--otel`` or the config file's ``otel = true`` asks, or when the
standard variables do: ``OTEL_TRACES_EXPORTER`` set to anything but ``none``, or an OTLP
endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
``OTEL_SDK_DISABLED=true`` turns them off whatever asked. The SDK then reads the rest of the
standard variables itself: endpoint, headers, timeout, sampler, batch delays, resource
(``OTEL_SERVICE_NAME``, default ``drover``). Exporters (``OTEL_TRACES_EXPORTER``, a comma list):
``otlp`` (the default) over ``http/protobuf`` (``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``; ``grpc``
needs ``opentelemetry-exporter-otlp-proto-grpc`` installed) and ``console``. The SDK and the
OTLP/HTTP exporter are the ``otel`` extra (``pip install 'drover[otel]'``).

Message content (prompts, answers, tool arguments and results) goes into spans only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true, redacted as the journal is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drover.errors import ConfigError

if TYPE_CHECKING:  # the API is imported only when traces are on
    from opentelemetry.trace import TracerProvider

    from drover.telemetry.metrics import Metrics

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_TRUE = ("1", "true", "yes", "on")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in _TRUE


def traces_wanted(asked: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether traces are on: ``asked`` (``--otel``, the config file) or the variables say
    so, unless ``OTEL_SDK_DISABLED`` is true."""
    if _flag(environ, "OTEL_SDK_DISABLED"):
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return asked or any(environ.get(name, "").strip() for name in _ENDPOINTS)


@dataclass(frozen=True, slots=True)
class Telemetry:
    """What an agent's runner observes turns with (see the module docstring).

    ``tracer_provider``: spans go there (None: no traces). ``metrics``: the counters and
    histograms a server exposes on ``/metrics`` (None: none kept). ``capture_content``: prompts,
    answers and tool arguments and results go into spans (redacted). The caller that made a
    :class:`Telemetry` closes it (:meth:`aclose` flushes the spans not yet exported).
    """

    tracer_provider: TracerProvider | None = None
    metrics: Metrics | None = None
    capture_content: bool = False

    @property
    def tracing(self) -> bool:
        return self.tracer_provider is not None

    @classmethod
    def from_env(
        cls,
        *,
        traces: bool = False,
        metrics: Metrics | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> Telemetry | None:
        """The telemetry the standard variables describe, traces on when :func:`traces_wanted`
        (``traces``: asked by a flag or the config file); None when nothing is on."""
        provider = sdk_tracer_provider(environ) if traces_wanted(traces, environ) else None
        if provider is None and metrics is None:
            return None
        return cls(
            tracer_provider=provider,
            metrics=metrics,
            capture_content=_flag(environ, CAPTURE_CONTENT),
        )

    @contextlib.contextmanager
    def parent_from(self, headers: Mapping[str, str]) -> Iterator[None]:
        """While the block runs, the trace context ``headers`` carry (an HTTP request's W3C
        ``traceparent``, by the propagators ``OTEL_PROPAGATORS`` names) is the current one:
        a turn started in it has its span as parent. Without traces, nothing."""
        if self.tracer_provider is None:
            yield
            return
        from opentelemetry import context, propagate

        token = context.attach(propagate.extract(headers))
        try:
            yield
        finally:
            context.detach(token)

    async def aclose(self) -> None:
        """Export the spans still buffered and stop the provider (a blocking call: it runs in
        a thread so the event loop goes on meanwhile)."""
        provider: Any = self.tracer_provider
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            await asyncio.to_thread(shutdown)


def sdk_tracer_provider(environ: Mapping[str, str] = os.environ) -> TracerProvider:
    """An SDK tracer provider exporting as the ``OTEL_*`` variables say; a
    :class:`~drover.errors.ConfigError` when the ``otel`` extra is missing or a variable
    names what drover cannot export with."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        raise ConfigError("traces need the OpenTelemetry SDK: pip install 'drover[otel]'") from None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "drover"}))
    provider = SdkTracerProvider(resource=resource)
    names = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    for name in (n.strip() for n in names.split(",")):
        exporter: SpanExporter
        if name == "otlp":
            exporter = _otlp_exporter(environ)
        elif name == "console":
            exporter = ConsoleSpanExporter()
        elif name in ("", "none"):
            continue
        else:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (expected otlp, console or none)"
            )
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _otlp_exporter(environ: Mapping[str, str]) -> Any:
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or "http/protobuf"
    ).lower()
    if protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTLP over HTTP needs its exporter: pip install 'drover[otel]'"
            ) from None
        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "installed (or use http/protobuf)"
            ) from None
        return GrpcSpanExporter()
    raise ConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL: unsupported protocol {protocol!r} "
        "(expected http/protobuf or grpc)"
    )
