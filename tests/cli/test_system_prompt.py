"""``--system-prompt`` and ``--append-system-prompt`` (TEXT or @FILE) and the project's
AGENTS.md on the command line, and ``/context`` saying what the prompt holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env, run_drover


def env_with_user_dir(tmp_path: Path) -> tuple[dict[str, str], Path]:
    user = tmp_path / "config"
    user.mkdir()
    return clean_env(ANTHROPIC_API_KEY="test", DROVER_CONFIG=str(user / "config.toml")), user


def test_p_sends_the_replaced_prompt_the_instructions_and_the_appended_text(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    env, user = env_with_user_dir(tmp_path)
    (tmp_path / "AGENTS.md").write_text("Always answer in French.")
    (user / "AGENTS.md").write_text("I like short answers.")
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("You are a release bot.")
    fake_llm.script({"text": "D'accord."})
    args = ["-p", "hi", *base_args(fake_llm, tmp_path)]
    args += ["--system-prompt", f"@{prompt_file}", "--append-system-prompt", "@@ends here"]
    done = run_drover(args, env=env)
    assert done.returncode == 0, done.stderr
    system = fake_llm.requests[0].body["system"]
    text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    assert text.startswith("You are a release bot.") and "You are drover" not in text
    positions = [text.index(t) for t in ("French", "short answers", "@ends here")]
    assert positions == sorted(positions)


def test_a_prompt_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    done = run_drover(["-p", "x", "--system-prompt", f"@{tmp_path / 'missing.txt'}"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert f"cannot read {tmp_path / 'missing.txt'}: No such file or directory" in done.stderr


def test_context_lists_each_part_of_the_prompt(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    env, _user = env_with_user_dir(tmp_path)
    (tmp_path / "CLAUDE.md").write_text("Use tabs.")
    done = subprocess.run(
        [*DROVER, *base_args(fake_llm, tmp_path), "--append-system-prompt", "Be brief."],
        input="/context\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "system prompt (drover's own):" in out
    assert f"instructions (project): {tmp_path / 'CLAUDE.md'} — 9 characters" in out
    assert "appended (--append-system-prompt): 9 characters" in out
    assert "tokens in use" in out
