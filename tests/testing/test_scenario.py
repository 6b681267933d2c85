"""Scenario files: the documented format, and one-line errors for everything else."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from drover.testing import (
    HttpError,
    Scenario,
    ScenarioOptions,
    ScriptedResponse,
    StreamError,
    ToolCall,
    load_scenario,
)

FULL = """
options: {ping: false, chunk_size: 4, json_chunk: 3, delay: 0.5, store_responses: false,
          model: m1}
responses:
  - text: "Hello"
    thinking: "pondering"
    tool_calls:
      - {name: read_file, input: {path: a.txt}}
      - {name: bash, input: {command: ls}, id: toolu_x}
      - {name: broken, raw_input: '{"path": "a'}
    stop_reason: max_tokens
    usage: {input_tokens: 12, output_tokens: 5}
    quirks: [args_whole, no_ids]
  - empty: true
  - http_error: {status: 529, type: overloaded_error, message: Overloaded, retry_after: 0}
  - {text: cut, error_after: 5, error: {type: overloaded_error, message: Overloaded}}
  - {text: gone, drop_after: 5}
  - {text: slow, stall_after: 5, delay: 0.01}
"""


def test_full_format(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(FULL)
    scenario = load_scenario(path)
    assert scenario.options == ScenarioOptions(
        ping=False, chunk_size=4, json_chunk=3, delay=0.5, store_responses=False, model="m1"
    )
    first, empty, http, cut, gone, slow = scenario.responses
    assert first.text == "Hello"
    assert first.thinking == "pondering"
    assert first.tool_calls == (
        ToolCall(name="read_file", input={"path": "a.txt"}),
        ToolCall(name="bash", input={"command": "ls"}, id="toolu_x"),
        ToolCall(name="broken", raw_input='{"path": "a'),
    )
    assert first.resolved_stop_reason == "max_tokens"
    assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 5)
    assert first.quirks == {"args_whole", "no_ids"}
    assert empty.empty
    assert empty.resolved_stop_reason == "end_turn"
    assert http.http_error == HttpError(
        status=529, type="overloaded_error", message="Overloaded", retry_after=0
    )
    assert cut.error_after == 5
    assert cut.error == StreamError()
    assert gone.drop_after == 5
    assert slow.stall_after == 5
    assert slow.delay == 0.01


def test_json_file_and_top_level_list(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('[{"text": "a"}, {"tool_calls": [{"name": "x"}]}]')
    scenario = load_scenario(path)
    assert scenario.options == ScenarioOptions()
    assert [r.resolved_stop_reason for r in scenario.responses] == ["end_turn", "tool_use"]


def test_python_data() -> None:
    scenario = Scenario.from_data({"responses": [{"text": "hi"}]})
    assert scenario.responses == (ScriptedResponse(text="hi"),)
    assert Scenario.from_data([]) == Scenario()


def test_tool_arguments_text() -> None:
    call = ToolCall(name="x", input={"a": "é", "b": [1]})
    assert call.arguments() == '{"a":"é","b":[1]}'
    assert call.arguments(spaced=True) == '{"a": "é", "b": [1]}'
    assert ToolCall(name="x", raw_input='{"a').parsed_input() == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"respones": []}, "scenario: unknown key 'respones'"),
        ({"options": {"pings": True}}, "options: unknown key 'pings'"),
        ({"options": {"chunk_size": 0}}, "options.chunk_size: must be at least 1, got 0"),
        ({"options": {"ping": "yes"}}, "options.ping: expected true or false, got str"),
        ({"options": {"delay": -1}}, "options.delay: must be a finite number >= 0"),
        ([{"txt": "a"}], "responses[0]: unknown key 'txt'"),
        ([{"text": 3}], "responses[0].text: expected a string, got int"),
        ([{"tool_calls": {}}], "responses[0].tool_calls: expected a list, got dict"),
        ([{"tool_calls": [{"input": {}}]}], "responses[0].tool_calls[0]: 'name' is required"),
        ([{"tool_calls": [{"name": "x", "args": {}}]}], "responses[0].tool_calls[0]: unknown key"),
        (
            [{"tool_calls": [{"name": "x", "input": {}, "raw_input": "{}"}]}],
            "give either 'input' or 'raw_input'",
        ),
        ([{"tool_calls": [{"name": "x", "input": []}]}], "input: expected a mapping, got list"),
        ([{"stop_reason": "done"}], "responses[0].stop_reason: unknown stop reason 'done'"),
        ([{"usage": {"tokens": 1}}], "responses[0].usage: unknown key 'tokens'"),
        ([{"usage": {"input_tokens": True}}], "usage.input_tokens: expected an integer, got bool"),
        ([{"http_error": {"type": "x"}}], "responses[0].http_error: 'status' is required"),
        ([{"http_error": {"status": 200}}], "http_error.status: must be at least 400, got 200"),
        ([{"error_after": 1, "drop_after": 2}], "choose one of error_after / drop_after"),
        ([{"http_error": {"status": 500}, "stall_after": 1}], "'http_error' cannot be combined"),
        ([{"error": {"type": "x"}}], "'error' only applies together with 'error_after'"),
        ([{"error_after": 1, "error": {"kind": "x"}}], "responses[0].error: unknown key 'kind'"),
        ([{"empty": True, "text": "a"}], "'empty' cannot be combined with text"),
        ([{"quirks": ["fast"]}], "responses[0].quirks: unknown quirk 'fast'"),
        ([{"quirks": "no_ids"}], "responses[0].quirks: expected a list, got str"),
        ("text", "scenario: expected a mapping, got str"),
        ({"responses": {"text": "a"}}, "scenario.responses: expected a list, got dict"),
    ],
)
def test_bad_data_is_a_clear_value_error(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        Scenario.from_data(data)
    assert "\n" not in str(caught.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ValueError, match=r"missing\.yaml: cannot read scenario"):
        load_scenario(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("responses: [\n  - text: 'a\n")
    with pytest.raises(ValueError, match=r"broken\.yaml: not valid YAML") as caught:
        load_scenario(broken)
    assert "\n" not in str(caught.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"responses": [{"txt": 1}]}')
    with pytest.raises(ValueError, match=r"bad\.json: responses\[0\]: unknown key 'txt'"):
        load_scenario(bad)


def test_demo_scenario_ships_with_the_package() -> None:
    demo = resources.files("drover.testing") / "scenarios" / "demo.yaml"
    with resources.as_file(demo) as path:
        scenario = load_scenario(path)
    names = [[call.name for call in r.tool_calls] for r in scenario.responses]
    assert names[0] == ["glob", "write_file"]
    assert scenario.responses[0].tool_calls[1].input["path"] == "notes.txt"
    broken = [r for r in scenario.responses if r.error_after is not None]
    assert len(broken) == 3
    assert all(r.error == StreamError() for r in broken)
    assert names[4] == ["read_file"]
    assert scenario.responses[5].text
