"""The REPL's session commands — ``/rename``, ``/rm`` (``/delete``), ``/export``, and
``/resume`` by any unique start of an id — in both of its modes, as a person types them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import Terminal, base_args, clean_env, run_drover
from .test_repl_tui import PROMPT, open_repl
from .tmux_screen import Screen, tmux_available


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait()


def _stored(fake_llm: FakeLLMServer, tmp_path: Path, session_id: str, prompt: str) -> None:
    fake_llm.script({"text": f"Answer to {prompt}."})
    done = run_drover(["-p", prompt, "--session", session_id, *base_args(fake_llm, tmp_path)])
    assert done.returncode == 0, done.stderr


def _sessions(tmp_path: Path) -> dict[str, str | None]:
    listed = run_drover(["sessions", "--json", "--db", str(tmp_path / "journal.db")])
    return {row["id"]: row["title"] for row in json.loads(listed.stdout)}


def test_line_mode_renames_exports_and_deletes(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    _stored(fake_llm, tmp_path, "other-one", "other question")
    _stored(fake_llm, tmp_path, "mine", "my question")
    env = clean_env(ANTHROPIC_API_KEY="test", TERM="dumb")  # the line mode
    term = Terminal([*base_args(fake_llm, tmp_path), "--resume", "mi"], env=env)
    terminals.append(term)
    term.expect("drover — session mine ")
    term.expect("› ")

    term.type("/rename")
    term.expect("usage: /rename TITLE")
    term.type("/rename   Parser   work ")
    term.expect("renamed session mine: Parser work")
    assert _sessions(tmp_path)["mine"] == "Parser work"

    out = tmp_path / "mine.md"
    term.type(f"/export {out}")
    term.expect(f"exported session mine to {out} (markdown)")
    text = out.read_text()
    assert text.startswith("# Parser work\n") and "Answer to my question." in text
    term.type(f"/export {out}")
    term.expect("exists; give another file name")
    assert out.read_text() == text
    term.type(f"/export {tmp_path / 'mine.jsonl'}")
    term.expect("(jsonl)")
    first = json.loads((tmp_path / "mine.jsonl").read_text().splitlines()[0])
    assert first == {**first, "type": "session", "id": "mine", "title": "Parser work"}

    term.type("/rm mine")
    term.expect("mine is the open session")
    term.type("/rm other")
    term.expect("delete session other-one “other question” (1 turn) and everything it holds?")
    term.type("n")
    term.expect("not deleted")
    assert set(_sessions(tmp_path)) == {"mine", "other-one"}
    term.type("/delete other")
    term.expect("[y/N] ")
    term.type("y")
    term.expect("deleted session other-one")
    assert set(_sessions(tmp_path)) == {"mine"}
    term.type("/rm other")
    term.expect("error: no session other in this journal")
    # The REPL goes on: the open session still takes turns.
    fake_llm.script({"text": "Still here."})
    term.type("hello again")
    term.expect("Still here.")
    term.expect("› ")
    assert term.close() == 0


@pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")
def test_full_repl_resumes_by_a_start_and_deletes_after_a_yes(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    screens: list[Screen],
) -> None:
    _stored(fake_llm, tmp_path, "first-session", "the first question")
    _stored(fake_llm, tmp_path, "second-session", "the second question")
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "s3")
    screen.type("/resume fir")
    screen.wait_for(PROMPT, after="drover — session first-session")
    screen.type("/resume s")
    screen.wait_for(PROMPT, after="type more of the id")
    screen.type("/rename Renamed in the REPL")
    screen.wait_for(PROMPT, after="renamed session first-session")
    screen.type("/rm seco")
    screen.wait_for("[y/N]", after="/rm seco")
    screen.type("y")
    screen.wait_for(PROMPT, after="deleted session second-session")
    out = tmp_path / "first.jsonl"
    screen.type(f"/export {out}")
    screen.wait_for(PROMPT, after="(jsonl)")
    screen.keys("C-d")
    assert screen.exit_status() == 0
    assert _sessions(tmp_path) == {"first-session": "Renamed in the REPL", "s3": None}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["title"] == "Renamed in the REPL"
    assert any(line.get("role") == "assistant" for line in lines)


def test_line_mode_lists_and_runs_the_full_repls_commands(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    from drover.cli.repl.commands import HELP

    _stored(fake_llm, tmp_path, "other-one", "other question")
    env = clean_env(ANTHROPIC_API_KEY="test", TERM="dumb")  # the line mode
    term = Terminal([*base_args(fake_llm, tmp_path), "--session", "mine"], env=env)
    terminals.append(term)
    term.expect("› ")
    term.type("/help")
    helped = term.expect("› ")
    names = re.findall(r"^(/[a-z]+)", HELP, re.MULTILINE)
    assert len(names) > 10 and all(name in helped for name in names)

    term.type("/compact")
    said = " ".join(term.expect("› ").split())
    assert "nothing compacted: the history has 0 messages, and the last 8 messages" in said
    term.type("/sessions")
    assert "other-one" in term.expect("› ")
    term.type("/resume other")
    term.expect("drover — session other-one")
    term.type("/session")
    term.expect("other-one")
    term.type("/clear")
    term.expect("new session ")
    ran = {"/help", "/compact", "/sessions", "/resume", "/session", "/clear"}
    for name in set(names) - ran - {"/exit", "/rm", "/export", "/rename"}:  # tested above
        term.type(name)
        assert "unknown command" not in term.expect("› "), name
    term.type("/exit")
    assert term.proc.wait(timeout=30) == 0
