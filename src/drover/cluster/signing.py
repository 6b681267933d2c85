"""Control messages between server processes, sealed with a key only drover can read.

A process asks another to act on a turn it runs — answer a permission request, interrupt or
stop the turn, log a queue's event — over Redis (``drover:control:{owner}``) or PostgreSQL
``NOTIFY``. Whoever can reach Redis can write those streams: a command the model runs with
``--sandbox-network``, another user of the machine, any client of a shared Redis. Unchecked, it
could find its own pending permission request and approve it. So every control message is
*sealed*:

* an HMAC-SHA256, with the cluster's key, over the message, the process it is for, the time it
  was sent and a random nonce (:meth:`Seal.seal`);
* a process acts on a message (:meth:`Seal.open`) only when the HMAC is right, it is addressed
  to that process, it was sent less than :data:`WINDOW` seconds ago (the processes' clocks
  agree to within that much) and its nonce was not seen before; anything else is dropped and
  logged — a forgery as a warning, a replay (a Redis stream read again from its start after a
  reconnect holds the messages already acted on) quietly.

The live events a process adds to a session's Redis stream are sealed too (:meth:`Seal.sign`,
over the session and the entry; their numbers already make a replay a no-op): an entry that is
not genuine is dropped (:meth:`Seal.verify`), so a client of Redis cannot show another
process's followers a permission question, or an answer, the turn never asked or gave.

The key is :data:`KEY_BYTES` random bytes in ``cluster.key`` in drover's data directory (mode
600, in a directory of mode 700; sandboxed commands do not see it), made by the first process
that needs it; ``DROVER_CLUSTER_KEY_FILE`` names another file. Processes on one machine share
it as they are; processes on several machines need the same file on each (a secret of the
deployment, like the token).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import platformdirs

from drover.config.private import PRIVATE_FILE, private_dir, tighten
from drover.errors import ConfigError

log = logging.getLogger(__name__)

KEY_FILE = "cluster.key"
KEY_ENV = "DROVER_CLUSTER_KEY_FILE"
KEY_BYTES = 32
#: Seconds a sealed message stays good (and its nonce remembered).
WINDOW = 60.0
#: Seconds between two warnings about dropped forgeries (the rest are counted).
WARN_EVERY = 10.0


def key_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    named = env.get(KEY_ENV)
    if named:
        return Path(named).expanduser()
    return Path(platformdirs.user_data_dir("drover")) / KEY_FILE


def cluster_key(path: Path | None = None) -> bytes:
    """The cluster's key, from ``path`` (default: :func:`key_path`), made there when missing."""
    path = path or key_path()
    if not path.exists():
        private_dir(path.parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
        except FileExistsError:
            pass  # another process made it meanwhile: read that one
        else:
            with os.fdopen(fd, "w", encoding="ascii") as file:
                file.write(secrets.token_hex(KEY_BYTES) + "\n")
    tighten(path)
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the cluster key {path}: {exc}") from None
    if len(text) < 32:
        raise ConfigError(f"the cluster key {path} is too short (at least 32 characters)")
    return text.encode()


class Seal:
    """Seals and opens one process's control messages (see the module docstring)."""

    def __init__(
        self, key: bytes, *, window: float = WINDOW, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = key
        self._window = window
        self._clock = clock
        #: Nonces of the messages opened, with when they stop mattering.
        self._seen: dict[str, float] = {}
        self._warned = 0.0
        self._forged = 0
        self.dropped = 0

    def seal(self, to: str, message: Mapping[str, Any]) -> dict[str, str]:
        """``message`` for the process ``to``: ``{"body", "mac"}``."""
        body = json.dumps(
            {"to": to, "at": self._clock(), "nonce": secrets.token_hex(16), "message": message},
            separators=(",", ":"),
            sort_keys=True,
        )
        return {"body": body, "mac": self._mac(body)}

    def open(self, me: str, sealed: object) -> dict[str, Any] | None:
        """The message of ``sealed`` when it is genuine, fresh, new and for ``me``; None (and
        logged) otherwise."""
        fields = _text_fields(sealed)
        body, mac = fields.get("body"), fields.get("mac")
        if body is None or mac is None or not hmac.compare_digest(self._mac(body), mac):
            self._forgery("no valid seal" if mac is not None else "not sealed")
            return None
        try:
            data = json.loads(body)
            to, at, nonce, message = data["to"], float(data["at"]), data["nonce"], data["message"]
        except (ValueError, TypeError, KeyError):
            self._forgery("sealed, but not a control message")
            return None
        now = self._clock()
        for old in [n for n, until in self._seen.items() if until < now]:
            del self._seen[old]
        if to != me:
            self._forgery(f"sealed for another process ({to})")
            return None
        if abs(now - at) > self._window or nonce in self._seen or not isinstance(message, dict):
            self.dropped += 1
            log.info("control message dropped: replayed or stale (sent %.0f s ago)", now - at)
            return None
        self._seen[nonce] = at + 2 * self._window
        return message

    def sign(self, data: bytes) -> str:
        """The HMAC of ``data`` (an entry of a session's live event stream)."""
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def verify(self, data: bytes, mac: object, *, what: str) -> bool:
        """Whether ``mac`` (as Redis hands it) is ``data``'s; a forgery is counted and said."""
        if isinstance(mac, bytes):
            mac = mac.decode(errors="replace")
        if isinstance(mac, str) and hmac.compare_digest(self.sign(data), mac):
            return True
        self._forgery("no valid seal" if mac is not None else "not sealed", what)
        return False

    def _mac(self, body: str) -> str:
        return self.sign(body.encode())

    def _forgery(self, why: str, what: str = "control message") -> None:
        """Count (and now and then say) a message that was not genuine."""
        self.dropped += 1
        self._forged += 1
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY:
            log.warning(
                "%s dropped: %s (%d such since the last warning); the processes of a cluster "
                "share the key in %s",
                what,
                why,
                self._forged,
                KEY_FILE,
            )
            self._warned, self._forged = now, 0


def _text_fields(sealed: object) -> dict[str, str]:
    """``sealed``'s string fields (Redis hands them as bytes)."""
    if not isinstance(sealed, Mapping):
        return {}
    out = {}
    for key, value in sealed.items():
        name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str):
            out[name] = value
    return out
