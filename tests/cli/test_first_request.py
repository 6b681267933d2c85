"""What actually goes out: the first request of a new session, as the fake API received it."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import base_args, clean_env, run_drover


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("anthropic:test", "ANTHROPIC_API_KEY"),
        ("openai:test", "OPENAI_API_KEY"),
        ("openai-responses:test", "OPENAI_API_KEY"),
    ],
)
def test_the_first_request_of_a_new_session_carries_the_system_prompt(
    fake_llm: FakeLLMServer, tmp_path: Path, model: str, key: str
) -> None:
    fake_llm.script({"text": "hello"})
    args = base_args(fake_llm, tmp_path)
    args[args.index("anthropic:test")] = model
    if not model.startswith("anthropic"):
        args[args.index(fake_llm.base_url)] = fake_llm.openai_base_url
    result = run_drover(["-p", "hi", *args], env=clean_env(**{key: "test"}))
    assert result.returncode == 0, result.stderr
    (request,) = fake_llm.requests
    body = request.body
    if model.startswith("anthropic"):
        system = body["system"]
    elif model.startswith("openai-responses"):
        system = body["instructions"]
    else:
        assert body["messages"][0]["role"] == "system"
        system = body["messages"][0]["content"]
    assert "You are drover, a coding agent" in str(system)
    assert str(tmp_path) in str(system)
