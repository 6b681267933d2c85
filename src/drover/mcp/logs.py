"""A server's log file: its stderr, and drover's notes on its starts, failures and stops.

Logs live in ``<user data dir>/drover/mcp-logs/NAME.log`` (a directory the ``bash`` sandbox
hides: a server may print its secrets; mode 700, its files 600: :mod:`drover.config.private`), one
file per server appended across starts, each start
opening with a header line. A file past :data:`MAX_BYTES` is moved to ``NAME.log.1`` when the
server next starts. drover's notes never contain a secret of the server's configuration (they
are written from the text as configured, or scrubbed); what the server itself prints is its own.

Writing a note never fails a call: a log that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import platformdirs

from drover.config.private import open_private, private_dir

#: Size past which a log is rotated at the next start.
MAX_BYTES = 2_000_000
#: Lines of the log quoted when a server fails to start.
TAIL_LINES = 5
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_log_dir() -> Path:
    return Path(platformdirs.user_data_dir("drover")) / "mcp-logs"


class ServerLog:
    def __init__(self, log_dir: Path, server: str) -> None:
        name = _UNSAFE.sub("_", server).lstrip(".") or "server"
        self.path = log_dir / f"{name}.log"
        #: Where the current start's output begins.
        self._start = 0

    @contextlib.contextmanager
    def open(self, header: str) -> Iterator[TextIO]:
        """The file a child process writes its stderr to, for one start."""
        self._begin(header)
        with os.fdopen(open_private(self.path), "a", encoding="utf-8") as file:
            yield file

    def note(self, text: str) -> None:
        """Append one line of drover's own."""
        with (
            contextlib.suppress(OSError),
            os.fdopen(open_private(self.path), "a", encoding="utf-8") as file,
        ):
            file.write(f"[{_now()}] drover: {text}\n")

    def begin(self, header: str) -> None:
        """A start that writes nothing but drover's notes (an HTTP server)."""
        self._begin(header)

    def _begin(self, header: str) -> None:
        with contextlib.suppress(OSError):
            private_dir(self.path.parent)
            if self.path.exists() and self.path.stat().st_size > MAX_BYTES:
                self.path.replace(self.path.with_name(self.path.name + ".1"))
            self._start = self.path.stat().st_size if self.path.exists() else 0
        self.note(header)

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines the server wrote in its current start (not drover's notes)."""
        try:
            with self.path.open("rb") as file:
                file.seek(self._start)
                text = file.read()[-16_384:].decode("utf-8", "replace")
        except OSError:
            return ""
        kept = [line for line in text.splitlines() if line.strip() and "] drover: " not in line]
        return "\n".join(kept[-lines:])


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")
