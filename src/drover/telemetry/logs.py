"""Log records that say which turn they are about, and the two formats the CLI writes them in.

The runner sets :data:`TURN_LOG` in each turn's task once the turn is recorded (its session,
its id, and its span's trace and span ids when traces are on); tasks the turn starts inherit
it, so whatever a tool, the journal or a provider logs inside a turn carries those ids.

``--log-format text`` (the default) is today's: the message alone on stderr, warnings and
above. ``--log-format json`` writes one JSON object a line on stderr: ``time`` (RFC 3339, UTC),
``level``, ``logger``, ``message``, ``session_id``, ``turn_id``, ``trace_id``, ``span_id``
(null outside a turn or without traces) and ``exception`` when one was logged.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO


@dataclass(frozen=True, slots=True)
class TurnLog:
    """The ids a record logged inside a turn carries."""

    session_id: str
    turn_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None


#: The turn the current task works for (None: none).
TURN_LOG: contextvars.ContextVar[TurnLog | None] = contextvars.ContextVar(
    "drover_turn_log", default=None
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the turn's ids (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        turn = TURN_LOG.get()
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "session_id": None if turn is None else turn.session_id,
            "turn_id": None if turn is None else turn.turn_id,
            "trace_id": None if turn is None else turn.trace_id,
            "span_id": None if turn is None else turn.span_id,
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(fmt: str, stream: TextIO | None = None) -> logging.Handler | None:
    """Install the handler ``fmt`` asks for on the root logger (the command line does, once,
    before it runs anything); the handler installed, None for ``text`` (Python's own last
    resort already writes warnings that way)."""
    if fmt != "json":  # (the config's LOG_FORMATS: text or json)
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
    return handler
