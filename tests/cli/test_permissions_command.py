"""``/permissions`` in the REPL lists the session's "always" answers and withdraws them."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from drover.store.sqlite import SqliteStore
from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env


async def _granted(db: Path, workdir: Path) -> str:
    async with SqliteStore(db) as store:
        record = await store.create_session(workdir=str(workdir), model="anthropic:test")
        await store.add_grant(record.id, "write_file")
        await store.add_grant(record.id, "bash")
        return record.id


async def _rules(db: Path, session_id: str) -> list[str]:
    async with SqliteStore(db) as store:
        return [g.rule for g in await store.grants(session_id)]


def test_permissions_lists_and_withdraws_the_sessions_grants(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    session_id = asyncio.run(_granted(tmp_path / "journal.db", tmp_path))
    lines = "/permissions\n/permissions revoke write_file\n/permissions revoke nope\n/permissions\n"
    done = subprocess.run(
        [*DROVER, *base_args(fake_llm, tmp_path), "--session", session_id],
        input=lines,
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "permission mode: allow" in out
    first, _, rest = out.partition("withdrawn: write_file")
    assert "always: write_file" in first and "always: bash" in first
    assert "no grant 'nope' in this session" in rest
    assert "always: bash" in rest and "always: write_file" not in rest
    assert asyncio.run(_rules(tmp_path / "journal.db", session_id)) == ["bash"]
