"""The journal's domain: what a turn's durable record is, and how it is written, independent of SQL.

- the store protocol the journal writes through and every backend implements:
  :mod:`~drover.journal.records` (sessions, turns, messages, tool calls, events, grants),
  :mod:`~drover.journal.protocol` (``SessionStore``, ``TurnLeases``, ``PermissionGrants``,
  ``TurnJournal``, ``EventLog`` and ``Store``), :mod:`~drover.journal.writes` (the writes as
  values, made together in one transaction), :mod:`~drover.journal.rules` (what every backend
  decides the same way) and :mod:`~drover.journal.owners` (who runs a turn);
- the journal itself: :class:`~drover.journal.journal.Journal`, the event sink that records a
  running turn (with :mod:`~drover.journal.journal_log` and
  :mod:`~drover.journal.journal_text`), its write queue
  (:mod:`~drover.journal.journal_queue`), its numbering of the session's log
  (:mod:`~drover.journal.numbering`), its text buffers, flush timer, step results and a
  worker's log (:mod:`~drover.journal.worker_log`), redaction (:mod:`~drover.journal.redact`)
  and the folding of a finished step's text (:mod:`~drover.journal.fold`);
- reading it back: :mod:`~drover.journal.history` rebuilds the model history from stored turns.

The SQL backends are in :mod:`drover.store`; nothing here imports them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from drover.journal.owners import owner_alive, owner_id
from drover.journal.protocol import (
    EventLog,
    PermissionGrants,
    SessionStore,
    Store,
    TurnJournal,
    TurnLeases,
)
from drover.journal.records import (
    EventRecord,
    GrantRecord,
    SessionRecord,
    StoredMessage,
    ToolCallRecord,
    TurnRecord,
)

if TYPE_CHECKING:
    from drover.journal.history import build_history, repair_history
    from drover.journal.journal import Journal
    from drover.journal.redact import Redactor

__all__ = [
    "EventLog",
    "EventRecord",
    "GrantRecord",
    "Journal",
    "PermissionGrants",
    "Redactor",
    "SessionRecord",
    "SessionStore",
    "Store",
    "StoredMessage",
    "ToolCallRecord",
    "TurnJournal",
    "TurnLeases",
    "TurnRecord",
    "build_history",
    "owner_alive",
    "owner_id",
    "repair_history",
]

#: Names imported on first use: the commands that only read the journal (``drover sessions``,
#: ``drover show``) never load the journal's writer, history repair or redaction.
_LAZY = {
    "Journal": "drover.journal.journal",
    "build_history": "drover.journal.history",
    "repair_history": "drover.journal.history",
    "Redactor": "drover.journal.redact",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
