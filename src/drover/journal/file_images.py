"""The journal's record of file writes: what a file held before a tool of a turn wrote it.

:class:`TurnFiles` is what a running turn hands its tools (``ToolContext.files``): before a
tool writes a file it records the content before and the hash of what it writes, in one write
of the journal (:class:`~drover.journal.writes.KeepFileImage`). The content is stored once per
distinct content; content over :data:`MAX_IMAGE_BYTES` is not kept, and the tool's result says
so (a rewind cannot put that file back). When the record cannot be made the tool does not
write: a write nobody could undo is refused rather than made silently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from drover.errors import StoreError, ToolError
from drover.journal.protocol import TurnJournal
from drover.journal.writes import KeepFileImage

#: The largest content before a write that the journal keeps (a file over it is written, and
#: its result carries a note that a rewind cannot restore it).
MAX_IMAGE_BYTES = 4 * 1024 * 1024


def digest(data: bytes) -> str:
    """The SHA-256 hex digest a file image names content by."""
    return hashlib.sha256(data).hexdigest()


def too_large_note(shown: str, size: int, cap: int = MAX_IMAGE_BYTES) -> str:
    return (
        f"[note: '{shown}' held {size:,} bytes before this write, over the {cap:,}-byte limit "
        "of what the journal keeps: a rewind cannot restore its previous content]"
    )


@dataclass(frozen=True, slots=True)
class TurnFiles:
    """Records the file writes of the running turn ``turn_id`` in ``store``."""

    store: TurnJournal
    turn_id: str
    cap: int = MAX_IMAGE_BYTES

    async def before_write(
        self, call_id: str, path: Path, shown: str, before: bytes | None, after: bytes
    ) -> str | None:
        write = KeepFileImage(
            turn_id=self.turn_id,
            call_id=call_id,
            path=str(path),
            shown=shown,
            before=before,
            after_hash=digest(after),
            cap=self.cap,
        )
        try:
            await self.store.write_batch([write])
        except StoreError as exc:
            raise ToolError(
                f"'{shown}' was not written: the journal could not keep its previous content "
                f"for a rewind ({exc})"
            ) from None
        if before is not None and len(before) > self.cap:
            return too_large_note(shown, len(before), self.cap)
        return None
