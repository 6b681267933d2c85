"""The interactive REPL as a person uses it: the real program in tmux against the fake LLM.

Keys go in with ``send-keys``; what the person sees comes back with ``capture-pane``. Every
wait is on screen content, bounded by a deadline; a failed wait keeps its captures as an
artefact file and prints the path.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from drover.journal.records import QueuedMessage
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer

from .helpers import base_args, clean_env, run_drover
from .tmux_screen import Screen, tmux_available

pytestmark = pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")

PROMPT = "›"


def open_repl(
    screens: list[Screen],
    server: FakeLLMServer,
    tmp_path: Path,
    *extra: str,
    mode: str = "ask",
    width: int = 80,
    **env: str,
) -> Screen:
    args = base_args(server, tmp_path)
    args[args.index("allow")] = mode
    artefacts = tmp_path / "screens"
    artefacts.mkdir(exist_ok=True)
    environment = clean_env(
        ANTHROPIC_API_KEY="test",
        TERM="xterm-256color",
        LANG="C.UTF-8",
        XDG_DATA_HOME=str(tmp_path / "data"),
        **env,
    )
    screen = Screen([*args, *extra], env=environment, artefacts=artefacts, width=width)
    screens.append(screen)
    screen.wait_for(PROMPT, after="Ctrl-D leaves")
    return screen


def flat(screen: str) -> str:
    """The screen's text with line breaks and runs of spaces as one space (rich wraps)."""
    return " ".join(screen.split())


def sent(server: FakeLLMServer, index: int = -1) -> str:
    return json.dumps(server.requests[index].body)


def test_a_tool_turn_asks_with_a_diff_and_renders_markdown(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    (tmp_path / "a.txt").write_text("hello\nworld\n")
    edit = {"path": "a.txt", "old_string": "world", "new_string": "there"}
    fake_llm.script(
        {"text": "Editing.", "tool_calls": [{"name": "edit_file", "input": edit}]},
        {"text": "Changed **one** line:\n\n- `a.txt`\n", "usage": {"input_tokens": 1500}},
    )
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("edit a")
    asked = screen.wait_for("y once · a always")
    assert "-world" in asked and "+there" in asked  # the diff, before the answer
    assert (tmp_path / "a.txt").read_text() == "hello\nworld\n"
    screen.keys("y")
    done = screen.wait_for("• a.txt", after="allowed once")
    assert "✓ edit_file: a.txt  [done]" in done
    assert "**one**" not in done and "Changed one line:" in done  # markdown, not raw
    screen.wait_for(PROMPT, after="• a.txt")
    # The status line is redrawn once the turn's usage is in: wait for it, not only the prompt.
    status = screen.wait_for("context left", after="• a.txt")
    assert "anthropic:test │" in status and "tokens" in status and "context left" in status
    assert "sandbox: " in status  # the start-up line says where bash runs its commands
    assert (tmp_path / "a.txt").read_text() == "hello\nthere\n"
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_esc_during_a_running_bash_call_interrupts_and_the_next_message_resumes(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    command = "touch started && sleep 60 && touch finished"
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "Resumed after the interruption."},
    )
    screen = open_repl(screens, fake_llm, tmp_path, mode="allow")
    screen.type("run it")
    screen.wait_for("(running)")
    screen.keys("Escape")
    shown = flat(screen.wait_for("The next message resumes it"))
    assert "interrupted during a tool call" in shown
    # bash has side effects: cut off while running, its outcome is unknown
    assert "[interrupted, outcome unknown]" in shown
    assert "kept 3 messages, 1 tool call (1 with results)" in shown
    screen.wait_for(PROMPT, after="The next message resumes it")
    screen.type("go on")
    screen.wait_for(PROMPT, after="Resumed after the interruption.")
    request = sent(fake_llm)
    assert "go on" in request and "interrupted" in request and command in request
    assert (tmp_path / "started").exists() and not (tmp_path / "finished").exists()
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_parallel_calls_ask_one_at_a_time(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    calls = [
        {"name": "write_file", "input": {"path": "one.txt", "content": "first\n"}},
        {"name": "write_file", "input": {"path": "two.txt", "content": "second\n"}},
    ]
    fake_llm.script({"tool_calls": calls}, {"text": "One written, one refused."})
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("write both")
    first = screen.wait_for("y once · a always")
    assert first.count("y once · a always") == 1  # one question at a time
    assert "one.txt" in first.rsplit("asks to run", 1)[1]
    screen.keys("y")
    second = screen.wait_for("y once · a always", after="allowed once")
    assert "two.txt" in second.rsplit("asks to run", 1)[1]
    screen.keys("n")
    end = screen.wait_for(PROMPT, after="One written, one refused.")
    assert "[denied]" in end and "[done]" in end
    assert (tmp_path / "one.txt").exists() and not (tmp_path / "two.txt").exists()
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_esc_at_a_permission_prompt_keeps_the_work_and_ctrl_c_twice_quits(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    write = {"name": "write_file", "input": {"path": "x.txt", "content": "x"}}
    fake_llm.script({"text": "Writing x.", "tool_calls": [write]})
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "s1")
    screen.type("write x")
    screen.wait_for("y once · a always")
    screen.keys("C-c")
    screen.wait_for("interrupted during a permission question")
    screen.wait_for(PROMPT, after="The next message resumes it")
    screen.keys("C-c")
    screen.wait_for("Ctrl-C again to leave")
    screen.keys("C-c")
    assert screen.exit_status() == 0
    assert not (tmp_path / "x.txt").exists()
    shown = run_drover(["show", "s1", "--db", str(tmp_path / "journal.db")])
    assert "turn 1: interrupted" in shown.stdout and "Writing x." in shown.stdout


def test_model_switch_keeps_the_pending_work(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    (tmp_path / "notes.txt").write_text("the notes\n")
    read = {"name": "read_file", "input": {"path": "notes.txt"}}
    fake_llm.script({"tool_calls": [read]}, {"text": "The other model read the notes."})
    screen = open_repl(screens, fake_llm, tmp_path, "--max-turns", "1")
    screen.type("read the notes")
    screen.wait_for("turn incomplete (max_turns)")
    screen.wait_for(PROMPT, after="turn incomplete")
    screen.type("/model anthropic:other-model")
    switched = flat(screen.wait_for(PROMPT, after="now using anthropic:other-model"))
    assert "the unfinished work (3 messages) is kept" in switched
    screen.type("/pending")
    screen.wait_for("calls: read_file")
    screen.type("continue")
    screen.wait_for(PROMPT, after="The other model read the notes.")
    body = fake_llm.requests[-1].body
    assert body["model"] == "other-model"
    assert "the notes" in json.dumps(body) and "continue" in json.dumps(body)
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_resume_opens_a_stored_session_with_its_transcript(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script({"text": "The first answer."}, {"text": "The second answer."})
    first = run_drover(["-p", "first question", "--session", "s1", *base_args(fake_llm, tmp_path)])
    assert first.returncode == 0, first.stderr
    screen = open_repl(screens, fake_llm, tmp_path, "--resume", "s1")
    shown = screen.wait_for(PROMPT, after="Ctrl-D leaves")
    assert "› first question" in shown and "The first answer." in shown
    screen.type("second question")
    screen.wait_for(PROMPT, after="The second answer.")
    request = sent(fake_llm)
    assert "first question" in request and "The first answer." in request
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_a_prompt_on_the_command_line_is_sent_first_and_works_narrow_without_colour(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script({"text": "A first answer that is long enough to wrap in a narrow pane."})
    screen = open_repl(screens, fake_llm, tmp_path, "hello there", width=40, NO_COLOR="1")
    shown = screen.wait_for(PROMPT, after="narrow pane.")
    assert "› hello there" in shown
    assert all(len(line) <= 40 for line in shown.splitlines())
    screen.type("/model nope:x")  # an error line: red, when colour is on
    screen.wait_for(PROMPT, after="unknown provider")
    coloured = screen._tmux("capture-pane", "-p", "-e")
    # No colour under NO_COLOR (bold and reverse video stay; 39/49 reset to the defaults).
    assert not re.search(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])[;m]", coloured)
    screen.resize(100, 24)
    screen.type("/tokens")
    tokens = screen.wait_for(PROMPT, after="the divisor")
    assert "calibration ratio" in tokens and "used in this session" in tokens
    # Laid out for the new width: the first line of /tokens (~70 columns) is no longer cut.
    lines = tokens.rsplit("/tokens", 1)[1].splitlines()
    assert any(line.startswith("context: estimated") and line.endswith("left") for line in lines)
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_clear_sessions_and_resume_another_session(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script({"text": "Answer in session A."}, {"text": "Answer in session A again."})
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "session-a")
    screen.type("question for A")
    screen.wait_for(PROMPT, after="Answer in session A.")
    screen.type("/clear")
    cleared = screen.wait_for(PROMPT, after="the previous one stays stored")
    new_id = cleared.rsplit("new session ", 1)[1].split()[0]
    screen.type("/sessions")
    listed = screen.wait_for(PROMPT, after="› /sessions").rsplit("› /sessions", 1)[1]
    assert f"* {new_id}" in listed and "  session-a" in listed
    screen.type("/resume session-a")
    screen.wait_count("drover — session session-a", 2)  # the start-up one, then this one
    resumed = screen.wait_for(PROMPT, after="drover — session session-a")
    assert "› question for A" in resumed.rsplit("/resume session-a", 1)[1]
    screen.type("again")
    screen.wait_for(PROMPT, after="Answer in session A again.")
    assert "question for A" in sent(fake_llm)
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_a_multi_line_paste_is_one_message_and_history_outlives_the_process(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script({"text": "Got both lines."})
    screen = open_repl(screens, fake_llm, tmp_path)
    screen._tmux("set-buffer", "first pasted line\nsecond pasted line")
    screen._tmux("paste-buffer", "-p")  # bracketed, as a terminal pastes
    screen.wait_for("second pasted line")
    assert not fake_llm.requests  # the newline inside the paste did not send it
    screen.keys("Enter")
    screen.wait_for(PROMPT, after="Got both lines.")
    assert "first pasted line\\nsecond pasted line" in sent(fake_llm)
    screen.keys("C-d")
    assert screen.exit_status() == 0
    screen.close()
    again = open_repl(screens, fake_llm, tmp_path)
    again.keys("Up")  # the history of the previous process
    assert "second pasted line" in again.wait_for("first pasted line", after="Ctrl-D leaves")
    # Leaving with Ctrl-C twice is tested on its own; two Ctrl-C sent right after a history
    # recall were lost about one run in three here (not understood yet): close the terminal.
    again.close()


def test_esc_while_the_answer_streams_keeps_the_partial_text(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    first = "The first paragraph arrived whole.\n\nThe second one never ends"
    fake_llm.script({"text": first, "stall_after": 12}, {"text": "Picked up again."})
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("tell me")
    screen.wait_for("The second one")  # the paragraph being written, in the live area
    screen.keys("Escape")
    shown = flat(screen.wait_for(PROMPT, after="The next message resumes it"))
    # The note comes after the answer so far, on its own line, not between its paragraphs.
    assert re.search(r"The second one[^›]*interrupting the model's answer…", shown), shown
    assert "interrupted during the model's answer" in shown
    assert "characters of answer" in shown
    screen.type("please go on")
    screen.wait_for(PROMPT, after="Picked up again.")
    request = sent(fake_llm)
    assert "The first paragraph arrived whole." in request and "please go on" in request
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_a_failed_turn_says_so_and_how_to_go_on(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    fake_llm.script(
        {"http_error": {"status": 400, "message": "prompt is malformed"}},
        {"text": "Fresh start."},
    )
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("bad request")
    said = flat(screen.wait_for(PROMPT, after="prompt is malformed"))
    assert "turn failed (error): HTTP 400: prompt is malformed" in said
    assert "Resending will fail the same way" in said and "/discard" in said
    screen.type("/discard")
    screen.wait_for(PROMPT, after="discarded 1 pending message")
    screen.type("new request")
    screen.wait_for(PROMPT, after="Fresh start.")
    request = sent(fake_llm)
    assert "new request" in request and "bad request" not in request
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_esc_then_a_line_typed_at_once_runs_it_without_another_enter(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    first = "The first paragraph arrived whole.\n\nThe second one never ends"
    fake_llm.script({"text": first, "stall_after": 12}, {"text": "Picked up again."})
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "s1")
    screen.type("tell me")
    screen.wait_for("The first paragraph arrived whole.")
    # One send-keys: the line and its Enter arrive while the interrupted turn ends.
    screen.keys("Escape", "go on", "Enter")
    shown = screen.wait_for(PROMPT, after="Picked up again.")
    assert "interrupted during the model's answer" in flat(shown)
    assert shown.count("› go on") == 1
    assert len(fake_llm.requests) == 2 and "go on" in sent(fake_llm)
    screen.keys("C-d")
    assert screen.exit_status() == 0
    journal = run_drover(["show", "s1", "--json", "--db", str(tmp_path / "journal.db")])
    assert journal.returncode == 0, journal.stderr
    assert '"go on"' in journal.stdout


def test_a_line_typed_during_a_turn_is_sent_once_the_turn_ends(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    write = {"name": "write_file", "input": {"path": "x.txt", "content": "x"}}
    fake_llm.script(
        {"text": "Writing x.", "tool_calls": [write]},
        {"text": "Wrote x."},
        {"text": "Going on as asked."},
    )
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("write x")
    screen.wait_for("y once · a always")
    # Typed while the question waits (no y, a or n in it), then the answer: the turn's own
    # reader takes the keys in order, so the line was read before the turn went on and ended.
    screen.keys("keep it short", "Enter", "y")
    shown = screen.wait_for(PROMPT, after="Going on as asked.")
    assert "Wrote x." in shown and (tmp_path / "x.txt").read_text() == "x"
    assert shown.count("› keep it short") == 1
    assert len(fake_llm.requests) == 3 and "keep it short" in sent(fake_llm)
    assert "keep it short" not in sent(fake_llm, 1)  # not part of the turn it was typed in
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_a_paste_during_a_turn_is_one_piece_of_the_next_line(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    write = {"name": "write_file", "input": {"path": "x.txt", "content": "x"}}
    fake_llm.script(
        {"text": "Writing x.", "tool_calls": [write]},
        {"text": "Wrote x."},
        {"text": "Read both lines."},
    )
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("write x")
    screen.wait_for("y once · a always")
    # Its n's do not deny the call and its newline does not send its first line.
    screen._tmux("set-buffer", "an answer line\nnone of it sent")
    screen._tmux("paste-buffer", "-p")
    screen.keys("y")
    screen.wait_for("none of it sent", after="Wrote x.")
    assert (tmp_path / "x.txt").read_text() == "x"
    assert len(fake_llm.requests) == 2
    screen.keys("Enter")
    screen.wait_for(PROMPT, after="Read both lines.")
    assert "an answer line\\nnone of it sent" in sent(fake_llm)
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_tokens_and_compact_say_what_they_mean(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    screen = open_repl(screens, fake_llm, tmp_path)
    screen.type("/tokens")
    shown = flat(screen.wait_for(PROMPT, after="/tokens"))
    assert "estimated cost n/a (anthropic:test)" in shown and "cost cost" not in shown
    screen.type("/compact")
    shown = flat(screen.wait_for(PROMPT, after="/compact"))
    assert "the history has 0 messages, and the last 8 messages" in shown
    screen.keys("C-d")
    assert screen.exit_status() == 0


def test_a_line_entered_during_a_turn_is_queued_and_esc_still_interrupts(
    fake_llm: FakeLLMServer, tmp_path: Path, screens: list[Screen]
) -> None:
    first = "The first paragraph arrived whole.\n\nThe second one never ends"
    fake_llm.script({"text": first, "stall_after": 12}, {"text": "Queued line answered."})
    screen = open_repl(screens, fake_llm, tmp_path, "--session", "s1", DROVER_STALL_TIMEOUT="600")
    screen.type("tell me")
    screen.wait_for("The first paragraph arrived whole.")
    screen.keys("second question", "Enter")
    screen.wait_for("queued: second question")
    # In the journal while the turn still runs: it would survive this process.
    queued = asyncio.run(_queued(tmp_path / "journal.db", "s1"))
    assert [(m.content, m.status) for m in queued] == [("second question", "queued")]
    assert len(fake_llm.requests) == 1
    screen.keys("Escape")
    shown = screen.wait_for(PROMPT, after="Queued line answered.")
    assert "interrupted during the model's answer" in flat(shown)
    assert shown.count("› second question") == 1
    assert len(fake_llm.requests) == 2
    request = sent(fake_llm)  # the interrupted work, then the queued line
    assert "The first paragraph arrived whole." in request and "second question" in request
    screen.keys("C-d")
    assert screen.exit_status() == 0
    ran = asyncio.run(_queued(tmp_path / "journal.db", "s1"))
    assert [(m.content, m.status) for m in ran] == [("second question", "started")]


async def _queued(db: Path, session_id: str) -> list[QueuedMessage]:
    async with SqliteStore(str(db)) as store:
        return await store.queued_messages(session_id, every=True)
