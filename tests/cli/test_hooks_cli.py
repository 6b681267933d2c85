"""Hooks from ``config.toml`` on ``-p``: a blocked call is printed on stderr and is a ``hook``
event in ``stream-json``."""

from __future__ import annotations

import json
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import base_args, clean_env, run_drover


def test_a_config_hook_blocks_a_call_on_p(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[hooks]]\nevent = "pre_tool"\ntool = "write_file(*.lock)"\n'
        "command = \"echo 'lock files are generated' >&2; exit 2\"\n"
    )
    write = {"name": "write_file", "input": {"path": "deps.lock", "content": "x"}}
    env = clean_env(ANTHROPIC_API_KEY="test", DROVER_CONFIG=str(config))
    args = ["-p", "go", *base_args(fake_llm, tmp_path), "--sandbox", "off"]

    fake_llm.script({"tool_calls": [write]}, {"text": "Understood."})
    text = run_drover(args, env=env)
    assert text.returncode == 0, text.stderr
    assert f"pre_tool hook ({config} hooks[0]) blocked write_file: lock files are generated" in (
        text.stderr
    )
    assert not (tmp_path / "deps.lock").exists()

    fake_llm.script({"tool_calls": [write]}, {"text": "Understood."})
    streamed = run_drover([*args, "--output-format", "stream-json"], env=env)
    events = [json.loads(line) for line in streamed.stdout.splitlines()]
    [hook] = [e for e in events if e["type"] == "hook"]
    assert (hook["point"], hook["outcome"], hook["exit_code"]) == ("pre_tool", "blocked", 2)
    [denied] = [e for e in events if e["type"] == "tool_state" and e["state"] == "denied"]
    assert denied["output"].startswith(f"Blocked by a pre_tool hook ({config} hooks[0])")
