"""The server itself: recording, the shared queue, unexpected requests, lifecycle, CLI, fixture."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

from drover.testing import NO_SCRIPT_LEFT, FakeLLMServer, Scenario

from .conftest import USER


async def test_requests_are_recorded(
    fake_llm: FakeLLMServer, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    fake_llm.script({"text": "a"})
    await anthropic_client.messages.create(
        model="claude-test", max_tokens=7, messages=USER, system="be brief"
    )
    (recorded,) = fake_llm.requests
    assert (recorded.protocol, recorded.path) == ("anthropic", "/v1/messages")
    assert recorded.body == {
        "max_tokens": 7,
        "messages": USER,
        "model": "claude-test",
        "system": "be brief",
    }
    assert recorded.headers["content-type"] == "application/json"
    assert "anthropic-version" in recorded.headers


async def test_one_queue_serves_every_protocol_in_order(
    fake_llm: FakeLLMServer,
    anthropic_client: anthropic.AsyncAnthropic,
    openai_client: openai.AsyncOpenAI,
) -> None:
    fake_llm.script({"text": "first"}, {"text": "second"})
    fake_llm.script({"text": "third"})
    assert fake_llm.remaining == 3
    chat = await openai_client.chat.completions.create(model="g", messages=USER)
    message = await anthropic_client.messages.create(model="c", max_tokens=5, messages=USER)
    response = await openai_client.responses.create(model="g", input="hi")
    assert chat.choices[0].message.content == "first"
    assert message.content[0].text == "second"  # type: ignore[union-attr]
    assert response.output_text == "third"
    assert [r.protocol for r in fake_llm.requests] == [
        "openai-chat",
        "anthropic",
        "openai-responses",
    ]
    assert fake_llm.remaining == 0


async def test_empty_queue_is_a_500_and_recorded_as_unexpected(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.allow_unexpected = True
    with pytest.raises(openai.InternalServerError) as caught:
        await openai_client.chat.completions.create(model="g", messages=USER)
    assert NO_SCRIPT_LEFT in caught.value.message
    assert fake_llm.unexpected == [
        f"openai-chat request #1 (POST /v1/chat/completions): {NO_SCRIPT_LEFT}"
    ]


async def test_script_accepts_a_scenario_with_its_options(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        Scenario.from_data({"options": {"chunk_size": 2}, "responses": [{"text": "abcd"}]})
    )
    async with anthropic.AsyncAnthropic(base_url=fake_llm.base_url, api_key="k") as client:
        stream = await client.messages.create(model="c", max_tokens=5, messages=USER, stream=True)
        deltas = [
            e.delta.text  # type: ignore[union-attr]
            async for e in stream
            if e.type == "content_block_delta"
        ]
    assert deltas == ["ab", "cd"]


def test_script_rejects_bad_responses_at_once(fake_llm: FakeLLMServer) -> None:
    with pytest.raises(ValueError, match=r"script response 1: unknown key 'txt'"):
        fake_llm.script({"txt": "a"})


async def test_bad_json_and_unknown_paths(fake_llm: FakeLLMServer) -> None:
    fake_llm.allow_violations = True
    async with httpx2.AsyncClient() as client:
        bad = await client.post(fake_llm.base_url + "/v1/messages", content=b"{nope")
        missing = await client.post(fake_llm.base_url + "/v1/other", json={})
        wrong_method = await client.get(fake_llm.base_url + "/v1/responses")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert (missing.status_code, wrong_method.status_code) == (404, 405)
    assert len(fake_llm.violations) == 1


def test_lifecycle_and_addresses() -> None:
    server = FakeLLMServer()
    with server:
        assert server.port > 0
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        assert server.anthropic_base_url == server.base_url
        assert server.openai_base_url == f"{server.base_url}/v1"
        with pytest.raises(RuntimeError):
            server.start()
        with pytest.raises(OSError):  # noqa: PT011 - the port is taken
            FakeLLMServer(port=server.port).start()
    server.stop()  # a second stop is harmless
    server.start()  # and the server can start again
    server.stop()


def test_cli_serve_prints_one_line_and_stops_on_signal(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("responses: [{text: from the cli}]\n")
    code = (
        "import sys; from pathlib import Path; from drover.testing.server import serve; "
        "serve(Path(sys.argv[1]), '127.0.0.1', 0)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(scenario)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("fake-llm listening on http://127.0.0.1:")
        base_url = line.split()[-1]
        with httpx2.Client() as client:
            reply = client.post(
                f"{base_url}/v1/chat/completions", json={"model": "m", "messages": USER}
            )
            extra = client.post(
                f"{base_url}/v1/chat/completions", json={"model": "m", "messages": USER}
            )
        assert reply.json()["choices"][0]["message"]["content"] == "from the cli"
        assert extra.status_code == 500
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0
    assert out == ""
    assert (
        f"unexpected: openai-chat request #2 (POST /v1/chat/completions): {NO_SCRIPT_LEFT}" in err
    )


def test_fixture_fails_tests_with_violations_or_unexpected_requests(tmp_path: Path) -> None:
    test_file = tmp_path / "test_uses_fake_llm.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import httpx2

            def post(server, body):
                return httpx2.post(server.base_url + "/v1/chat/completions", json=body)

            BAD = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": ""}]}
            OK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

            def test_violation(fake_llm):
                post(fake_llm, BAD)

            def test_violation_allowed(fake_llm):
                fake_llm.allow_violations = True
                post(fake_llm, BAD)

            def test_unexpected(fake_llm):
                post(fake_llm, OK)

            def test_unexpected_allowed(fake_llm):
                fake_llm.allow_unexpected = True
                post(fake_llm, OK)

            def test_clean(fake_llm):
                fake_llm.script({"text": "hi"})
                assert post(fake_llm, OK).status_code == 200
            """
        )
    )
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", str(test_file), "-q", "--rootdir", str(tmp_path)),
            *("-p", "no:cacheprovider", "-p", "no:asyncio", "-o", "addopts="),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    # A failing fixture teardown shows as an error of the (otherwise passing) test.
    assert "5 passed, 2 errors" in result.stdout, result.stdout
    assert "ERROR at teardown of test_violation " in result.stdout
    assert "ERROR at teardown of test_unexpected " in result.stdout
    assert "must be a response to a preceeding message with 'tool_calls'" in result.stdout
