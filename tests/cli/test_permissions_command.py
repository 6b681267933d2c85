"""``/permissions`` in the REPL lists what decides tool calls — rules with where they come
from, the session's "always" answers — and withdraws answers; ``--allow``/``--deny`` and the
config file's ``[permissions]`` on ``-p``."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from drover.store.sqlite.store import SqliteStore
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
    assert "always write_file" in first and "always bash" in first
    assert 'an "always" answer in this session' in first
    assert "no grant 'nope' in this session" in rest
    assert "always bash" in rest and "always write_file" not in rest
    assert asyncio.run(_rules(tmp_path / "journal.db", session_id)) == ["bash"]


def test_permissions_lists_config_and_flag_rules_with_their_source(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[permissions]\nallow = ["read_file"]\ndeny = ["bash(rm *)"]\n')
    done = subprocess.run(
        [*DROVER, *base_args(fake_llm, tmp_path), "--allow", "bash(git status*)"],
        input="/permissions\n",
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test", DROVER_CONFIG=str(config)),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert f"deny bash(rm *) ({config})" in lines
    assert f"allow read_file ({config})" in lines
    assert "allow bash(git status*) (--allow)" in lines


def test_flags_and_config_rules_decide_headless_calls(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """No terminal, so a call that would ask is refused; --allow lets one through and the
    config file's deny refuses one even in allow mode, telling the model which rule."""
    config = tmp_path / "config.toml"
    config.write_text('[permissions]\ndeny = ["write_file(*.lock)"]\n')
    writes = [
        {"name": "write_file", "input": {"path": "src/a.txt", "content": "a"}},
        {"name": "write_file", "input": {"path": "b.txt", "content": "b"}},
        {"name": "write_file", "input": {"path": "deps/c.lock", "content": "c"}},
    ]
    fake_llm.script({"tool_calls": writes}, {"text": "Done."})
    args = base_args(fake_llm, tmp_path)
    args[args.index("allow")] = "ask"
    done = subprocess.run(
        [*DROVER, "-p", "write", *args, "--allow", "write_file(src/**)", "--allow", "*(*.lock)"],
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test", DROVER_CONFIG=str(config)),
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "src" / "a.txt").read_text() == "a"
    assert not (tmp_path / "b.txt").exists() and not (tmp_path / "deps" / "c.lock").exists()
    told = [
        block["content"]
        for message in fake_llm.requests[-1].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert "there was no terminal to ask" in str(told[1])
    assert f'the deny rule "write_file(*.lock)" ({config})' in str(told[2])


def test_a_malformed_rule_flag_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DROVER, "-p", "x", "--deny", "bash(rm"],
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith("missing the closing ')'")
    assert "Traceback" not in done.stderr
