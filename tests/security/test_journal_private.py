"""The journal is nobody else's to read: another user of the machine must not read the
prompts, answers, file contents and command output it holds.

drover's data directory is made 700 and the journal (with its ``-wal`` and ``-shm``) 600
whatever the umask — even 000; a world-readable journal found in drover's own directory is
tightened when opened, one elsewhere (``--db``) is left as it is and ``drover doctor`` warns."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli.helpers import DROVER, base_args, clean_env, run_drover

from drover.store import default_db_path, open_store
from drover.testing.server import FakeLLMServer

RAW = Path(__file__).resolve().parents[1] / "support" / "raw_mcp.py"


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """drover's data directory of this test (not made yet)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "drover"


def journal_files(db: Path) -> list[Path]:
    return [db, Path(f"{db}-wal"), Path(f"{db}-shm")]


async def _write_one(target: str | None) -> list[int]:
    """Open the journal, write a session, and read the modes of its files while it is open."""
    store = open_store(target)
    async with store:
        await store.create_session(model="m", workdir="/w")
        db = default_db_path() if target is None else Path(target)
        return [mode(p) for p in journal_files(db)]


@pytest.mark.usefixtures("data")
def test_a_new_journal_is_private_whatever_the_umask(data: Path, tmp_path: Path) -> None:
    with umask(0):
        modes = asyncio.run(_write_one(None))
        elsewhere = tmp_path / "named.db"
        named_modes = asyncio.run(_write_one(str(elsewhere)))
    assert mode(data) == 0o700
    assert modes == [0o600, 0o600, 0o600]
    assert named_modes == [0o600, 0o600, 0o600]


def test_drovers_own_journal_found_readable_is_tightened(data: Path) -> None:
    with umask(0o022):
        asyncio.run(_write_one(None))
    db = data / "drover.db"
    data.chmod(0o755)
    db.chmod(0o644)
    asyncio.run(_write_one(None))
    assert (mode(data), mode(db)) == (0o700, 0o600)


def test_doctor_warns_of_a_journal_others_may_read(tmp_path: Path, data: Path) -> None:
    named = tmp_path / "shared.db"
    with umask(0o022):
        asyncio.run(_write_one(str(named)))
    named.chmod(0o644)
    env = clean_env(XDG_DATA_HOME=str(data.parent), ANTHROPIC_API_KEY="test")
    said = run_drover(["doctor", "--db", str(named)], env=env).stdout
    (line,) = [line for line in said.splitlines() if " journal " in line]
    assert line.startswith("warn") and "READABLE BY OTHER USERS (shared.db 644" in line
    assert f"chmod 600 {named}*" in line
    assert mode(named) == 0o644  # a journal the user named is theirs to set
    for path in tmp_path.glob("shared.db*"):  # (what the warning says to do)
        path.chmod(0o600)
    said = run_drover(["doctor", "--db", str(named)], env=env).stdout
    (line,) = [line for line in said.splitlines() if " journal " in line]
    assert line.startswith("ok") and "READABLE" not in line


def test_drover_p_under_umask_000_leaves_nothing_readable(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A real ``drover -p`` started with umask 000: its data directory and every file it made
    there (the journal, MCP logs) are the user's alone."""
    data = tmp_path / "xdg"
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text("")
    server = {"command": sys.executable, "args": [str(RAW)]}  # (for its log and directory)
    (config.parent / "mcp.json").write_text(json.dumps({"mcpServers": {"raw": server}}))
    env = clean_env(ANTHROPIC_API_KEY="test", XDG_DATA_HOME=str(data), DROVER_CONFIG=str(config))
    fake_llm.script({"text": "done"})
    args = base_args(fake_llm, tmp_path)
    args[args.index("--db") + 1 : args.index("--db") + 2] = []
    args.remove("--db")
    command = " ".join(f"'{a}'" for a in [*DROVER, *args, "-p", "hi"])
    done = subprocess.run(
        ["sh", "-c", f"umask 000; exec {command}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    made = [data / "drover", *sorted((data / "drover").rglob("*"))]
    names = {p.name for p in made}
    assert {"drover.db", "mcp-logs", "raw.log", "mcp-cwd"} <= names, names
    loose = {str(p): oct(mode(p)) for p in made if mode(p) & 0o077}
    assert loose == {}
    assert run_drover(["sessions"], env=env).returncode == 0
