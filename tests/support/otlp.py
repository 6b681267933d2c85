"""A real OTLP/HTTP trace collector on loopback: what an operator's collector receives.

It answers ``POST /v1/traces`` as the OTLP/HTTP protocol says (a protobuf
``ExportTraceServiceRequest``, maybe gzip-compressed; a protobuf
``ExportTraceServiceResponse`` back) and decodes every span with ``opentelemetry-proto``.
Tests wait for the spans they expect with :meth:`Collector.wait_for` (a condition, with a
timeout only as the failure bound).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

BOUND = 60.0


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return None if kind is None else getattr(v, kind)


@dataclass(frozen=True)
class Event:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    """One exported span, ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[Event, ...]
    links: tuple[Link, ...]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    start_ns: int
    end_ns: int
    service: str

    @property
    def error(self) -> bool:
        return self.status_code == 2


class Collector:
    """The collector; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._changed = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector._take(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # serve_forever looks for a shutdown every poll_interval (default 0.5 s: what stop()
        # waited, each test).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(BOUND)

    def env(self) -> dict[str, str]:
        """The variables that point a drover process's traces here, exported at once."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_SERVICE_NAME": "drover-test",
        }

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            events=tuple(
                                Event(e.name, {kv.key: _value(kv.value) for kv in e.attributes})
                                for e in s.events
                            ),
                            links=tuple(
                                Link(
                                    x.trace_id.hex(),
                                    x.span_id.hex(),
                                    {kv.key: _value(kv.value) for kv in x.attributes},
                                )
                                for x in s.links
                            ),
                            status_code=s.status.code,
                            status_message=s.status.message,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        with self._changed:
            self.requests += 1
            self.spans.extend(found)
            self._changed.notify_all()

    def wait_for(self, done: Callable[[list[Span]], bool], timeout: float = BOUND) -> list[Span]:
        """The spans received once ``done(spans)`` holds; AssertionError after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: done(list(self.spans)), timeout):
                names = sorted(s.name for s in self.spans)
                raise AssertionError(f"the collector did not get the spans expected: {names}")
            return list(self.spans)

    def named(self, prefix: str) -> list[Span]:
        with self._changed:
            return [s for s in self.spans if s.name.startswith(prefix)]


def children(spans: list[Span], parent: Span) -> Iterator[Span]:
    return (s for s in spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id)
