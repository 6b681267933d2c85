"""``drover gc`` as a real process: a dry run counts and deletes nothing, a prune keeps the
latest and reports the journal's size, the config's ``[retention]`` stands in for the flags,
and bad input is one line with exit status 2 (flags) or 1 (config)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from drover.core.messages import user_message
from drover.journal.writes import EndTurn
from drover.store import SqliteStore

from .helpers import clean_env, run_drover

DAY = 86400.0


async def _journal(db: Path, ages_in_days: list[float]) -> None:
    """One finished session per age, named ``a0``, ``a1``… in that order."""
    now = time.time()
    for i, age in enumerate(ages_in_days):
        async with SqliteStore(db, clock=lambda age=age: now - age * DAY) as store:
            await store.create_session(session_id=f"a{i}", workdir="/w", model="m")
            turn = await store.begin_turn(f"a{i}", user_message("hi"), "t:1:1", 30)
            await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])


async def _ids(db: Path) -> list[str]:
    async with SqliteStore(db) as store:
        return sorted(s.id for s in await store.list_sessions())


def test_dry_run_then_prune_keeping_the_latest(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    asyncio.run(_journal(db, [60, 50, 40, 35]))  # every one older than 30 days
    dry = run_drover(
        ["gc", "--older-than", "30d", "--keep-last", "1", "--dry-run", "--db", str(db)]
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("drover gc: would delete 3 session(s), 3 turn(s)")
    assert asyncio.run(_ids(db)) == ["a0", "a1", "a2", "a3"]
    done = run_drover(["gc", "--older-than", "30d", "--keep-last", "1", "--db", str(db)])
    assert done.returncode == 0, done.stderr
    assert "deleted 3 session(s), 3 turn(s)" in done.stdout and "journal " in done.stdout
    assert asyncio.run(_ids(db)) == ["a3"]  # the most recently updated


def test_the_config_stands_in_for_the_flags(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    asyncio.run(_journal(db, [3, 2, 1]))
    config = tmp_path / "config.toml"
    config.write_text('[retention]\nolder_than = "1d"\nkeep_last = 2\n', encoding="utf-8")
    done = run_drover(["gc", "--db", str(db)], env=clean_env(DROVER_CONFIG=str(config)))
    assert done.returncode == 0, done.stderr
    assert asyncio.run(_ids(db)) == ["a1", "a2"]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    for argv in (["--older-than", "30x"], ["--older-than", "30d", "--keep-last", "-1"]):
        bad = run_drover(["gc", *argv, "--db", db])
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert bad.stderr.startswith("drover: error: argument --")
    unsaid = run_drover(["gc", "--db", db])
    assert unsaid.returncode == 1
    assert (
        unsaid.stderr
        == "drover: error: say how old a session must be: --older-than 30d (or [retention])\n"
    )
    config = tmp_path / "config.toml"
    config.write_text('[retention]\nolder_than = "soon"\n', encoding="utf-8")
    wrong = run_drover(["gc", "--db", db], env=clean_env(DROVER_CONFIG=str(config)))
    assert wrong.returncode == 1 and "retention.older_than: not a duration" in wrong.stderr
    assert wrong.stderr.count("\n") == 1
