"""``drover`` in a real terminal emulator (tmux), driven by keys and read from the screen.

Each :class:`Screen` runs its own tmux server (its own socket in the test's temp dir), so
tests never share state. Waits poll ``capture-pane`` until the text shows, with a deadline as
the failure bound only. When a wait fails, every capture taken so far is written to an
artefact file whose path the assertion message prints.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import DROVER

#: How often the screen is read while waiting (a poll interval, not a synchronisation).
POLL = 0.05


def tmux_available() -> bool:
    return shutil.which("tmux") is not None


class Screen:
    def __init__(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        artefacts: Path,
        width: int = 80,
        height: int = 24,
        timeout: float = 60,
    ) -> None:
        self.socket = artefacts / "tmux.sock"
        self.artefacts = artefacts
        self.timeout = timeout
        self.captures: list[str] = []
        self.exit_file = artefacts / "exit-status"
        self.exit_file.unlink(missing_ok=True)  # a previous program's, in the same test
        command = " ".join(shlex.quote(part) for part in [*DROVER, *args])
        # The exit status outlives the pane: the shell writes it, then the pane closes.
        script = f"{command}; echo $? > {shlex.quote(str(self.exit_file))}"
        self._tmux(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            str(width),
            "-y",
            str(height),
            *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")],
            "sh",
            "-c",
            script,
            env=env,
        )
        self._tmux("set-option", "-g", "escape-time", "0")

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=self.timeout,
            check=False,
        )
        if result.returncode != 0 and args[0] not in ("kill-server", "capture-pane"):
            raise AssertionError(f"tmux {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def capture(self, history: bool = True) -> str:
        """The screen (with the scrollback when ``history``)."""
        extra = ["-S", "-2000"] if history else []
        text = self._tmux("capture-pane", "-p", "-J", *extra)
        self.captures.append(text)
        return text

    def wait_for(self, text: str, *, after: str | None = None) -> str:
        """Wait until ``text`` is on the screen (after the last ``after`` when given)."""
        deadline = time.monotonic() + self.timeout
        while True:
            screen = self.capture()
            seen = screen.rsplit(after, 1)[1] if after and after in screen else screen
            if (after is None or after in screen) and text in seen:
                return screen
            if time.monotonic() > deadline:
                path = self.save("wait")
                raise AssertionError(f"no {text!r} on the screen; captures kept in {path}")
            time.sleep(POLL)

    def wait_count(self, text: str, count: int) -> str:
        """Wait until ``text`` appears ``count`` times on the screen."""
        deadline = time.monotonic() + self.timeout
        while True:
            screen = self.capture()
            if screen.count(text) >= count:
                return screen
            if time.monotonic() > deadline:
                path = self.save("wait")
                raise AssertionError(
                    f"{text!r} not {count} times on the screen; captures kept in {path}"
                )
            time.sleep(POLL)

    def save(self, label: str) -> Path:
        path = self.artefacts / f"screens-{label}-{len(self.captures)}.txt"
        separator = "\n" + "=" * 80 + "\n"
        path.write_text(separator.join(self.captures[-20:]), encoding="utf-8")
        return path

    def type(self, text: str, *, enter: bool = True) -> None:
        self._tmux("send-keys", "-l", text)
        if enter:
            self._tmux("send-keys", "Enter")

    def keys(self, *names: str) -> None:
        self._tmux("send-keys", *names)

    def resize(self, width: int, height: int) -> None:
        self._tmux("resize-window", "-x", str(width), "-y", str(height))

    def exit_status(self) -> int:
        """Wait for the program to end; its exit status."""
        deadline = time.monotonic() + self.timeout
        while not self.exit_file.exists() or not self.exit_file.read_text().strip():
            if time.monotonic() > deadline:
                path = self.save("exit")
                raise AssertionError(f"drover did not exit; captures kept in {path}")
            time.sleep(POLL)
        return int(self.exit_file.read_text())

    def close(self) -> None:
        self._tmux("kill-server")


@pytest.fixture
def screens() -> Iterator[list[Screen]]:
    """The screens a test opens (append them), closed after it; where each one's captures are
    kept is printed (pytest shows it when the test failed)."""
    opened: list[Screen] = []
    yield opened
    for screen in opened:
        print(f"screen captures kept in {screen.save('final')}")
        screen.close()
