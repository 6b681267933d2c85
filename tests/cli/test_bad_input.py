"""Ways a user can break the command line, each answered by one line and an exit status."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env, run_drover


def run_into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``drover ARGS | head -c 0``: standard output is a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*DROVER, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=clean_env(ANTHROPIC_API_KEY="test"),
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def journal(tmp_path: Path) -> list[str]:
    return ["--db", str(tmp_path / "journal.db")]


def test_closed_stdout_ends_every_command_quietly(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "An answer."})
    assert (
        run_drover(["-p", "hi", "--session", "s1", *base_args(fake_llm, tmp_path)]).returncode == 0
    )
    for args in (["show", "s1", "--json"], ["show", "s1"], ["sessions"]):
        result = run_into_closed_pipe([*args, *journal(tmp_path)])
        assert result.stderr == "", args
        assert result.returncode == 1, args


@pytest.mark.parametrize("output_format", ["stream-json", "json", "text"])
def test_closed_stdout_during_a_turn_still_ends_and_journals_it(
    fake_llm: FakeLLMServer, tmp_path: Path, output_format: str
) -> None:
    fake_llm.script({"text": "Answer nobody reads."})
    base = base_args(fake_llm, tmp_path)
    result = run_into_closed_pipe(
        ["-p", "hi", "--session", "s1", "--output-format", output_format, *base]
    )
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr
    assert result.returncode == 0, result.stderr
    shown = run_drover(["show", "s1", "--json", *journal(tmp_path)])
    [turn] = json.loads(shown.stdout)["turns"]
    assert turn["status"] == "completed"
    assert turn["messages"][-1]["content"][0]["text"] == "Answer nobody reads."


def test_invalid_utf8_on_stdin_fails_and_creates_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        [*DROVER, "-p", "--model", "anthropic:x", *journal(tmp_path)],
        input=b"fix \xff\xfe this",
        capture_output=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode != 0
    assert stderr.startswith("drover: error: standard input is not valid UTF-8")
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert run_drover(["sessions", *journal(tmp_path)]).stdout.strip() == "no sessions yet"


def test_invalid_utf8_in_an_argument_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [*DROVER, "-p", b"fix \xff this", "--model", "anthropic:x", *journal(tmp_path)],
        capture_output=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 2
    assert "is not valid UTF-8" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert run_drover(["sessions", *journal(tmp_path)]).stdout.strip() == "no sessions yet"


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "--resume-turn", "--session", "typo"],
        ["-p", "--discard-pending", "--session", "typo"],
    ],
)
def test_an_unknown_session_to_finish_is_an_error_that_creates_nothing(
    args: list[str], tmp_path: Path
) -> None:
    result = run_drover([*args, "--model", "anthropic:x", *journal(tmp_path)])
    assert result.returncode == 1
    assert result.stderr.strip() == "drover: error: no session typo in this journal"
    assert run_drover(["sessions", *journal(tmp_path)]).stdout.strip() == "no sessions yet"


def test_resume_turn_without_a_session_creates_nothing(tmp_path: Path) -> None:
    result = run_drover(["-p", "--resume-turn", "--model", "anthropic:x", *journal(tmp_path)])
    assert result.returncode == 2
    assert "--resume-turn needs --session ID or --continue" in result.stderr
    assert run_drover(["sessions", *journal(tmp_path)]).stdout.strip() == "no sessions yet"


def test_new_session_id_is_told_on_stderr_once(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "One."}, {"text": "Two."}, {"text": "Three."})
    base = base_args(fake_llm, tmp_path)
    first = run_drover(["-p", "hi", *base])
    assert first.returncode == 0 and first.stdout == "One.\n"
    [listed] = run_drover(["sessions", *journal(tmp_path)]).stdout.splitlines()
    session_id = listed.split()[0]
    assert first.stderr == f"new session {session_id} (continue it with --session {session_id})\n"

    named = run_drover(["-p", "hi", "--session", "mine", *base])
    assert named.stderr == "new session mine (continue it with --session mine)\n"
    again = run_drover(["-p", "hi", "--session", "mine", *base])
    assert again.returncode == 0 and again.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "hi", "--session", ""], "argument --session: an empty session id"),
        (["fake-llm", "scenario.yaml", "--port", "99999"], "argument --port: not a port"),
        (["fake-llm", "scenario.yaml", "--port", "x"], "argument --port: not a port"),
        (["-p", "hi", "--continue", "--session", "a"], "either --session or --continue"),
        (["-p", "hi", "--resume-turn"], "--resume-turn takes no prompt"),
    ],
)
def test_more_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_drover([*args, *journal(tmp_path)])
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("command", [["-p", "hi"], ["sessions"], ["show", "s1"]])
def test_a_db_in_a_missing_directory_is_an_error_that_creates_nothing(
    fake_llm: FakeLLMServer, tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "no" / "such"
    model = ["--model", "anthropic:test", "--base-url", fake_llm.base_url]
    result = run_drover(
        [*command, "--db", str(missing / "x.db"), *(model if command[0] == "-p" else [])]
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"drover: error: cannot open the journal at {missing / 'x.db'}: "
        f"no such directory {missing}\n"
    )
    assert not (tmp_path / "no").exists()
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gpt4", "unknown model 'gpt4': name its provider as PROVIDER:MODEL (anthropic:gpt4,"),
        ("llama3", "unknown model 'llama3': name its provider as PROVIDER:MODEL"),
        # A known family finds its provider: the missing key is then OpenAI's, not Anthropic's.
        ("gpt-4.1", "OPENAI_API_KEY is not set (needed for openai:gpt-4.1)"),
        ("o3-mini", "OPENAI_API_KEY is not set (needed for openai:o3-mini)"),
        ("claude-x", "ANTHROPIC_API_KEY is not set (needed for anthropic:claude-x)"),
    ],
)
def test_a_model_without_a_provider_is_matched_or_refused(
    model: str, message: str, tmp_path: Path
) -> None:
    result = run_drover(["-p", "hi", "--model", model, *journal(tmp_path)], env=clean_env())
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"drover: error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "journal.db").exists()


def test_help_shows_the_serve_defaults_and_the_scenario_format() -> None:
    serve = " ".join(run_drover(["serve", "--help"]).stdout.split())
    assert "then is denied (300.0)" in serve
    assert "pings on an event stream (15.0)" in serve
    assert "request body accepted, in bytes (1048576)" in serve
    fake = run_drover(["fake-llm", "--help"]).stdout
    for needed in ("responses:", "tool_calls:", "http_error:", "error_after:", "/v1 for OpenAI"):
        assert needed in fake, needed


def test_the_default_journal_makes_its_own_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "xdg-data"
    result = run_drover(["sessions"], env=clean_env(XDG_DATA_HOME=str(data)))
    assert result.returncode == 0, result.stderr
    assert (data / "drover" / "drover.db").is_file()


@pytest.mark.parametrize(
    ("prompt", "stdin"),
    [("   ", b""), ("\u0085\u2028", b""), (None, "\ufeff \n".encode())],
)
def test_a_blank_prompt_is_a_usage_error_that_creates_nothing(
    tmp_path: Path, prompt: str | None, stdin: bytes
) -> None:
    given = ["-p"] if prompt is None else ["-p", prompt]
    result = subprocess.run(
        [*DROVER, *given, "--model", "anthropic:x", *journal(tmp_path)],
        input=stdin,
        capture_output=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert (
        stderr
        == "drover: error: the prompt is blank (empty or only white space): nothing to send\n"
    )
    assert run_drover(["sessions", *journal(tmp_path)]).stdout.strip() == "no sessions yet"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"SSL_CERT_FILE": "/nonexistent/ca.pem"}, "SSL_CERT_FILE names '/nonexistent/ca.pem'"),
        ({"HTTPS_PROXY": "ftp://user:s3cret@proxy"}, "HTTPS_PROXY is not a proxy URL"),
        ({"https_proxy": "socks5://127.0.0.1:1080"}, "https_proxy names a SOCKS proxy"),
    ],
)
def test_the_environment_of_the_http_client_is_one_line(
    fake_llm: FakeLLMServer, tmp_path: Path, variables: dict[str, str], message: str
) -> None:
    # (left to the SDK, each is a traceback from inside httpx, then another from the half-built
    # client as it is collected)
    env = clean_env(ANTHROPIC_API_KEY="test")
    for name in ("SSL_CERT_FILE", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        env.pop(name, None)
    result = run_drover(["-p", "hi", *base_args(fake_llm, tmp_path)], env={**env, **variables})
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"drover: error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "s3cret" not in result.stderr
    assert fake_llm.requests == []


def test_the_environment_of_the_http_client_is_said_once_by_a_pool(tmp_path: Path) -> None:
    # (checked before any worker starts: not once per worker, and no worker is left to fail)
    env = clean_env(ANTHROPIC_API_KEY="test", HTTPS_PROXY="ftp://proxy.example")
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        env.pop(name, None)
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    result = run_drover(["serve", "--port", "0", "--workers", "2", "--db", unreachable], env=env)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "drover: error: HTTPS_PROXY is not a proxy URL drover can use: "
        "Unknown scheme for proxy URL URL('ftp://proxy.example')\n"
    )
