"""The library's types as a strictly checked user program sees them: ``ToolContext[Deps]``
types ``ctx.deps``, and ``RunResult``/``Session``/streams carry the run's output type. mypy
``--strict`` runs on ``typed_api.py``, whose comments say what it must reveal and refuse."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("typed_api.py")
EXPECTED = re.compile(r"\S  # (->|error:) (.+)$")
REPORTED = re.compile(r"^typed_api\.py:(\d+): (note|error): (.*)$")


def expected_report() -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(SOURCE.read_text(encoding="utf-8").splitlines(), start=1):
        match = EXPECTED.search(line)
        if match is None:
            continue
        kind, what = match.groups()
        out.append((number, f'Revealed type is "{what}"' if kind == "->" else f"[{what}]"))
    return out


def test_mypy_strict_sees_the_documented_types(tmp_path: Path) -> None:
    (tmp_path / "typed_api.py").write_text(SOURCE.read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--no-color-output",
            "--cache-dir",
            str(tmp_path / "cache"),
            "typed_api.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    reported = []
    for line in done.stdout.splitlines():
        match = REPORTED.match(line)
        assert match is not None, done.stdout + done.stderr
        number, kind, text = match.groups()
        # An error is identified by its code; a note by its whole text.
        shown = text if kind == "note" else text[text.rindex("[") :]
        reported.append((int(number), shown))
    assert reported == expected_report(), done.stdout
