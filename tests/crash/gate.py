"""The journal's flush gate, checked against its own flush times in the database.

The kill-time check (at most the last 250 ms of text is missing) sees one moment of a run,
and where that moment falls against the flush cycle is chance: a gate twice too slow passes it
whenever the kill lands just after a flush. The event log has every flush of the run: each
coalesced ``text_delta`` event is written by one flush, stamped (``created_at``, the process's
own clock) when the write began, and the step's ``assistant_message`` ends it. So every flush
can be measured: once a delta arrived that the previous flush had not taken, the next flush
must begin within the window of that delta's arrival.

What is checked is the median over a run's flushes. A flush's start is stamped when its
write begins, after the writes queued before it: time the writer thread spends blocked — on
the interpreter lock, on the disk — is not counted as waiting for a CPU, so on a loaded
machine a single flush can begin late without the gate being wrong. A gate that is wrong is
late every time: the median of a 500 ms gate exceeds the window by 150 ms on an idle machine,
while the median of the 250 ms gate stays ~90 ms inside it under any load measured here.

A delta's arrival is bounded above by the time this process read it from the pipe (the
journal sees a delta before the printer prints it). Which delta the previous flush had not
taken follows from the text it wrote: a flush writes everything buffered except a tail a
credential could still be arriving in (``redact``), so the delta holding the first character
after the written text that no credential can contain arrived after that flush. As in the
kill-time check, the window is ``FLUSH_INTERVAL + PIPE_MARGIN`` plus the time the process
waited for a CPU meanwhile (:mod:`.sched`).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drover.journal.records import EventRecord

from .watch import Line

#: Characters a built-in credential pattern can consist of (API keys, tokens, JWTs, bearer
#: values); a URL password or key block is announced by an opening (``scheme://``, ``Bearer``,
#: ``-----BEGIN``), which no answer here contains.
CREDENTIAL_CHARS = frozenset(string.ascii_letters + string.digits + "._~+/=-_")


@dataclass(frozen=True, slots=True)
class Flush:
    """One write of a step's streamed text: when it began (monotonic) and what it wrote."""

    t: float
    text: str
    final: bool  # the step's message, which ends its partial text


def flushes_by_step(events: Sequence[EventRecord], clock_offset: float) -> dict[int, list[Flush]]:
    """Each step's flushes in order (a discarded attempt's flushes dropped, like its deltas).

    ``clock_offset`` is wall time minus monotonic time; it turns ``created_at`` into the
    monotonic time the lines were stamped with (one machine, one clock).
    """
    steps: dict[int, list[Flush]] = {}
    step = 0
    for event in events:
        t = event.created_at - clock_offset
        if event.type == "step_started":
            step = int(event.payload["step"])
            steps.setdefault(step, [])
        elif event.type == "text_delta":
            step = int(event.payload["step"])
            steps.setdefault(step, []).append(Flush(t, str(event.payload["text"]), final=False))
        elif event.type == "retry" and event.payload.get("discard_partial"):
            steps[step] = []
        elif event.type == "assistant_message":
            blocks = event.payload["message"]["content"]
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            steps.setdefault(step, []).append(Flush(t, text, final=True))
    return steps


def _untaken(text: str, written: int) -> int:
    """The first offset after ``written`` that no flush may hold back (end: none)."""
    pos = written
    while pos < len(text) and text[pos] in CREDENTIAL_CHARS:
        pos += 1
    return pos


def flush_delays(
    deltas: Sequence[Line],
    flushes: Sequence[Flush],
    window: Callable[[float, float], float],
) -> list[tuple[float, str]]:
    """For each flush of one step that had a delta to take (one the previous flush had not
    taken): by how much it began later than ``window(arrived, began)`` after that delta
    arrived (``arrived``: when it was read from the pipe; negative: in time), and a line
    describing it."""
    starts: list[int] = []
    text = ""
    for delta in deltas:
        starts.append(len(text))
        text += str(delta.data["text"])
    found: list[tuple[float, str]] = []
    written = 0
    for number, flush in enumerate(flushes, 1):
        pos = _untaken(text, written)
        waiting = [d for d, start in zip(deltas, starts, strict=True) if start <= pos]
        if pos < len(text) and waiting:
            delta = waiting[-1]  # the delta holding offset ``pos``
            allowed = window(delta.t, flush.t)
            found.append(
                (
                    flush.t - delta.t - allowed,
                    f"flush {number} began {flush.t - delta.t:.3f} s after text it had to take "
                    f"arrived (offset {pos}, {text[pos : pos + 16]!r}); allowed {allowed:.3f} s",
                )
            )
        written = len(flush.text) if flush.final else written + len(flush.text)
    return found
