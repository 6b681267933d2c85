"""What an operator sees of drover's turns: OpenTelemetry traces, Prometheus metrics, logs.

:class:`Telemetry` (:mod:`.setup`) is what an :class:`~drover.agent.agent.Agent` observes its turns
with; off unless given. Traces go through the OpenTelemetry API only, as spans in the GenAI
semantic conventions (:mod:`.genai`) built from the loop's events (:mod:`.tracing`); metrics
are a Prometheus registry of the process (:mod:`.metrics`); :mod:`.logs` puts a turn's ids on
log records and writes them as JSON lines; :mod:`.watch` is how the runner wires them to a
turn. With no telemetry the runner adds nothing to a turn: no span, no sink, no check in the
loop.
"""

from drover.telemetry.setup import CAPTURE_CONTENT, Telemetry, sdk_tracer_provider, traces_wanted

__all__ = ["CAPTURE_CONTENT", "Telemetry", "sdk_tracer_provider", "traces_wanted"]
