"""The REPL on a real terminal: one owner of standard input, errors as lines, /model, /discard."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import DROVER, Terminal, base_args, clean_env, run_drover

WRITE = {"tool_calls": [{"name": "write_file", "input": {"path": "x.txt", "content": "x"}}]}


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait()


def repl(terminals: list[Terminal], server: FakeLLMServer, tmp_path: Path, *extra: str) -> Terminal:
    args = base_args(server, tmp_path)
    args[args.index("allow")] = "ask"
    terminal = Terminal([*args, *extra], env=clean_env(ANTHROPIC_API_KEY="test"))
    terminals.append(terminal)
    terminal.expect("› ")
    return terminal


def test_line_after_ctrl_c_at_a_permission_prompt_reaches_the_repl(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script(WRITE, {"text": "Second answer."})
    term = repl(terminals, fake_llm, tmp_path, "--session", "s1")
    term.type("write x")
    term.expect("Allow? [y]es / [a]lways for this tool / [N]o: ")
    term.interrupt()
    term.expect("[interrupted")
    term.expect("› ")
    # The dead question must not eat this line: the REPL runs it as a turn.
    term.type("go on")
    term.expect("Second answer.")
    term.expect("› ")
    assert term.close() == 0
    assert not (tmp_path / "x.txt").exists()
    assert "go on" in json.dumps(fake_llm.requests[-1].body)


def test_model_switch_keeps_the_base_url(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script({"text": "From the other model."})
    term = repl(terminals, fake_llm, tmp_path)
    term.type("/model anthropic:other-model")
    term.expect("now using anthropic:other-model")
    term.type("hello")
    term.expect("From the other model.")
    term.expect("› ")
    assert term.close() == 0
    assert fake_llm.requests[-1].body["model"] == "other-model"


def test_model_that_cannot_be_built_keeps_the_old_one(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script({"text": "Still the first model."})
    term = repl(terminals, fake_llm, tmp_path)
    term.type("/model nope:x")
    term.expect("unknown provider 'nope'")
    term.type("hello")
    term.expect("Still the first model.")
    term.expect("› ")
    assert term.close() == 0
    assert fake_llm.requests[-1].body["model"] == "test"


def test_a_request_the_api_refuses_says_how_to_continue_and_discard_drops_it(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script(
        {"http_error": {"status": 400, "message": "prompt is malformed"}},
        {"text": "Fresh start."},
    )
    term = repl(terminals, fake_llm, tmp_path)
    term.type("bad request")
    said = term.expect("› ")
    assert "resending will fail the same way" in said and "/discard" in said
    term.type("/discard")
    term.expect("discarded 1 pending message")
    term.type("new request")
    term.expect("Fresh start.")
    term.expect("› ")
    assert term.close() == 0
    sent = json.dumps(fake_llm.requests[-1].body)
    assert "new request" in sent and "bad request" not in sent


def test_ctrl_c_at_a_headless_permission_prompt_leaves_no_reader_behind(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script(WRITE)
    args = base_args(fake_llm, tmp_path)
    args[args.index("allow")] = "ask"
    term = Terminal(["-p", "write x", *args], env=clean_env(ANTHROPIC_API_KEY="test"))
    terminals.append(term)
    term.expect("Allow? [y]es / [a]lways for this tool / [N]o: ")
    term.interrupt()
    said = term.expect("--resume-turn) to resume")
    assert term.proc.wait(timeout=term.timeout) == 130
    assert "Traceback" not in said and "Fatal" not in said
    assert not (tmp_path / "x.txt").exists()


def test_a_busy_session_is_one_line_for_p_and_the_repl_stays(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    fake_llm.script({"text": "Working on it slowly", "stall_after": 4})
    base = base_args(fake_llm, tmp_path)
    env = clean_env(ANTHROPIC_API_KEY="test")
    running = subprocess.Popen(
        [*DROVER, "-p", "long job", "--session", "s", "--output-format", "stream-json", *base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert running.stdout is not None
        for line in running.stdout:  # the turn is running once its text streams
            if json.loads(line)["type"] == "text_delta":
                break
        second = run_drover(["-p", "another", "--session", "s", *base])
        assert second.returncode == 1
        assert second.stderr.startswith("drover: error: session s is busy: ")
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr

        term = repl(terminals, fake_llm, tmp_path, "--session", "s")
        term.type("another")
        said = term.expect("› ")
        assert "session s is busy" in said and "Traceback" not in said
        term.type("/session")
        term.expect("s\r\n")
        assert term.close() == 0
    finally:
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=30)
    assert running.returncode == 130
    assert len(fake_llm.requests) == 1


def test_parallel_calls_are_asked_about_one_at_a_time(
    fake_llm: FakeLLMServer, tmp_path: Path, terminals: list[Terminal]
) -> None:
    calls = [
        {"name": "write_file", "input": {"path": name, "content": name}}
        for name in ("first.txt", "second.txt")
    ]
    fake_llm.script({"tool_calls": calls}, {"text": "Wrote one."})
    term = repl(terminals, fake_llm, tmp_path)
    term.type("write both")
    asked = term.expect("Allow? [y]es / [a]lways for this tool / [N]o: ")
    assert "first.txt" in asked and "second.txt" not in asked
    term.type("y")
    asked = term.expect("Allow? [y]es / [a]lways for this tool / [N]o: ")
    assert "second.txt" in asked
    term.type("n")
    term.expect("Wrote one.")
    term.expect("› ")
    assert term.close() == 0
    assert (tmp_path / "first.txt").read_text() == "first.txt"
    assert not (tmp_path / "second.txt").exists()
