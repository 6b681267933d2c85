"""The REPL's ``/fork`` and ``/rewind``, in both of its modes, as a person types them: the
turns listed, the diff shown before the question, the files put back, a refusal after an
outside change, and a fork that the REPL goes on in."""

from __future__ import annotations

import json
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


def _script_file_turns(fake_llm: FakeLLMServer) -> None:
    """Turn 1 creates notes.txt; turn 2 edits it and creates extra.txt."""
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "notes.txt", "content": "v1\n"}}]},
        {"text": "Created it."},
        {
            "tool_calls": [
                {
                    "name": "edit_file",
                    "input": {"path": "notes.txt", "old_string": "v1", "new_string": "v2"},
                },
                {"name": "write_file", "input": {"path": "extra.txt", "content": "extra\n"}},
            ]
        },
        {"text": "Changed it."},
    )


def test_line_mode_rewinds_after_showing_the_diff_and_forks(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    _script_file_turns(fake_llm)
    env = clean_env(ANTHROPIC_API_KEY="test", TERM="dumb")  # the line mode
    term = Terminal([*base_args(fake_llm, tmp_path), "--session", "s1"], env=env)
    terminals.append(term)
    term.expect("› ")
    term.type("create the notes")
    term.expect("Created it.")
    term.expect("› ")
    term.type("change the notes")
    term.expect("Changed it.")
    term.expect("› ")
    assert (tmp_path / "notes.txt").read_text() == "v2\n"

    term.type("/rewind")
    listed = term.expect("› ")
    assert "1  completed   create the notes" in listed
    assert "2  completed   change the notes" in listed

    (tmp_path / "notes.txt").write_text("by hand\n")
    term.type("/rewind 2")
    refused = term.expect("› ")
    assert "notes.txt: changed outside drover since" in refused
    assert "not rewound: 'notes.txt' changed outside drover" in refused
    (tmp_path / "notes.txt").write_text("v2\n")

    term.type("/rewind 2")
    shown = term.expect("rewind turn 2 and restore 2 files? [y/N] ")
    assert "-v2\n+v1" in shown.replace("\r\n", "\n")
    assert "+++ /dev/null" in shown  # extra.txt goes
    term.type("n")
    term.expect("not rewound")
    assert (tmp_path / "notes.txt").read_text() == "v2\n"

    term.type("/rewind 2")
    term.expect("[y/N] ")
    term.type("y")
    term.expect("rewound 1 turn (kept in the journal, marked rewound); restored")
    term.expect("turn 2 asked: change the notes")
    assert (tmp_path / "notes.txt").read_text() == "v1\n"
    assert not (tmp_path / "extra.txt").exists()

    fake_llm.script({"text": "In the fork."})
    term.type("/fork 1")
    term.expect("forked session ")
    fork_id = term.expect(" from s1").split()[0]
    term.expect("now in the fork")
    term.type("diverge")
    term.expect("In the fork.")
    term.expect("› ")
    term.type("/session")
    term.expect(fork_id)
    sent = str(fake_llm.requests[-1].body)
    assert "create the notes" in sent and "change the notes" not in sent
    assert term.close() == 0


@pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")
def test_full_repl_shows_the_diff_then_rewinds(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    screens: list[Screen],
) -> None:
    _script_file_turns(fake_llm)
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "s2", mode="allow")
    screen.type("create the notes")
    screen.wait_for(PROMPT, after="Created it.")
    screen.type("change the notes")
    screen.wait_for(PROMPT, after="Changed it.")
    screen.type("/rewind 2")
    screen.wait_for("[y/N]", after="+v1")
    screen.type("y")
    screen.wait_for(PROMPT, after="marked rewound")
    assert (tmp_path / "notes.txt").read_text() == "v1\n"
    fake_llm.script({"text": "In the fork."})
    screen.type("/fork")
    screen.wait_for(PROMPT, after="(the source stays")
    screen.type("diverge")
    screen.wait_for(PROMPT, after="In the fork.")
    screen.keys("C-d")
    assert screen.exit_status() == 0
    listed = run_drover(["sessions", "--json", "--db", str(tmp_path / "journal.db")])
    turns = {row["id"]: row["turns"] for row in json.loads(listed.stdout)}
    assert turns.pop("s2") == 2  # the source: its two turns (one rewound), nothing after
    assert list(turns.values()) == [3]  # the fork: a copy of both, and its own
