"""Neutral history → OpenAI Responses input items, and when to chain on a stored response."""

from __future__ import annotations

from typing import Any

from drover.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    tool_result_message,
    user_message,
)
from drover.providers.convert_openai_responses import (
    _Digest,
    items_digest,
    plan_input,
    to_responses_input,
    to_responses_tools,
)
from drover.providers.ids import RESPONSES_IDS, fit_id
from drover.testing import validate_responses

from .conftest import READ_FILE
from .histories import LONG_ID, ODD_ID, REASONING_ITEM, mixed_history

RESPONSES = "openai-responses"


def test_mixed_history_items_while_the_server_stores() -> None:
    items = to_responses_input(mixed_history(), stored=True)
    assert validate_responses({}, items) == []
    long_id = fit_id(LONG_ID, RESPONSES_IDS)
    assert items == [
        {"role": "user", "content": "read the files"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Reading a.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "toolu_01A",
            "name": "read_file",
            "arguments": '{"path": "a"}',
        },
        {"type": "function_call_output", "call_id": "toolu_01A", "output": "AAA"},
        {
            "type": "function_call",
            "call_id": ODD_ID,
            "name": "read_file",
            "arguments": '{"path": "b"}',
        },
        {"type": "function_call_output", "call_id": ODD_ID, "output": "Error: no such file"},
        REASONING_ITEM,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Reading c.", "annotations": []}],
            "id": "msg_1",
            "status": "completed",
        },
        {
            "type": "function_call",
            "call_id": long_id,
            "name": "read_file",
            "arguments": '{"path": "c"}',
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": long_id, "output": "CCC"},
        {"role": "user", "content": "thanks; now summarise"},
    ]


def test_without_storage_item_ids_are_left_out() -> None:
    items = to_responses_input(mixed_history(), stored=False)
    assert REASONING_ITEM in items  # it carries encrypted_content, so it can go back
    assert not any("id" in item for item in items if item.get("type") != "reasoning")


def _responses_turn(
    *blocks: Any, response_id: str | None = "resp_1", digest: str | None = None
) -> Message:
    meta: dict[str, Any] = {"provider": RESPONSES}
    if response_id:
        meta["response_id"] = response_id
    if digest:
        meta["input_digest"] = digest
    return Message(role="assistant", content=tuple(blocks), meta=meta)


def _reasoning(item: dict[str, Any]) -> ThinkingBlock:
    return ThinkingBlock(thinking="s", meta={"provider": RESPONSES, "item": item})


def test_reasoning_needs_storage_or_encrypted_content_and_a_following_item() -> None:
    bare = {"id": "rs_2", "type": "reasoning", "summary": []}
    text = TextBlock(text="ok", meta={"provider": RESPONSES, "item_id": "msg_2"})
    history = [user_message("q"), _responses_turn(_reasoning(bare), text)]
    assert bare in to_responses_input(history, stored=True)
    assert bare not in to_responses_input(history, stored=False)
    alone = [user_message("q"), _responses_turn(text, _reasoning(REASONING_ITEM))]
    assert REASONING_ITEM not in to_responses_input(alone, stored=True)


def test_ids_only_from_completed_responses_of_this_api() -> None:
    text = TextBlock(text="cut", partial=True, meta={"provider": RESPONSES, "item_id": "msg_9"})
    partial = [user_message("q"), _responses_turn(text, response_id=None)]
    assert "id" not in to_responses_input(partial, stored=True)[1]
    foreign = Message(
        role="assistant",
        content=(
            ToolUseBlock(
                id="c1", name="x", input={}, meta={"provider": "anthropic", "item_id": "fc_x"}
            ),
        ),
        meta={"provider": "anthropic", "response_id": "resp_x"},
    )
    items = to_responses_input(
        [
            user_message("q"),
            foreign,
            tool_result_message([ToolResultBlock(tool_use_id="c1", content="r")]),
        ],
        stored=True,
    )
    assert "id" not in items[1]
    not_fc = _responses_turn(
        ToolUseBlock(id="c2", name="x", input={}, meta={"provider": RESPONSES, "item_id": "call_2"})
    )
    items = to_responses_input([user_message("q"), not_fc], stored=True)
    assert "id" not in items[1]


def _first_turn() -> tuple[list[Message], Message]:
    history = [user_message("read a")]
    digest = items_digest(to_responses_input(history, stored=True))
    call = ToolUseBlock(
        id="call_1",
        name="read_file",
        input={"path": "a"},
        meta={"provider": RESPONSES, "item_id": "fc_1"},
    )
    return history, _responses_turn(call, digest=digest)


def test_plan_chains_on_the_last_response_when_the_history_matches() -> None:
    history, turn = _first_turn()
    results = tool_result_message([ToolResultBlock(tool_use_id="call_1", content="AAA")])
    plan = plan_input([*history, turn, results], stored=True)
    assert plan.previous_response_id == "resp_1"
    assert plan.items == [{"type": "function_call_output", "call_id": "call_1", "output": "AAA"}]
    full = to_responses_input([*history, turn, results], stored=True)
    assert plan.digest == items_digest(full)


def test_plan_sends_everything_when_chaining_is_not_safe() -> None:
    history, turn = _first_turn()
    results = tool_result_message([ToolResultBlock(tool_use_id="call_1", content="AAA")])
    full = to_responses_input([*history, turn, results], stored=True)
    # Not storing.
    assert plan_input([*history, turn, results], stored=False).previous_response_id is None
    # The history before the response changed (compacted, edited, repaired).
    edited = [user_message("read a, please"), turn, results]
    assert plan_input(edited, stored=True).previous_response_id is None
    # Nothing new after the response.
    said = _responses_turn(TextBlock(text="done"), digest=turn.meta["input_digest"])
    assert plan_input([*history, said], stored=True).previous_response_id is None
    # The last assistant message is another provider's.
    other = Message(role="assistant", content=(TextBlock(text="hi"),), meta={"provider": "openai"})
    plan = plan_input([*history, turn, results, other, user_message("more")], stored=True)
    assert plan.previous_response_id is None
    # No digest recorded (e.g. a message from before drover recorded one).
    bare_turn = _responses_turn(*turn.content)
    assert plan_input([*history, bare_turn, results], stored=True).previous_response_id is None
    assert plan_input([*history, turn, results], stored=True).items != full


def test_tools() -> None:
    assert to_responses_tools([READ_FILE]) == [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file.",
            "parameters": dict(READ_FILE.input_schema),
            "strict": False,
        }
    ]


def test_the_running_digest_is_the_digest_of_every_prefix() -> None:
    # One pass gives the digest of the whole input and of the part before the last assistant
    # message; both must equal items_digest, which earlier processes stored as input_digest.
    items = [
        {"type": "message", "role": "assistant", "content": [{"text": "é😀" * i}], "n": i}
        for i in range(6)
    ]
    running = _Digest()
    for k, item in enumerate(items):
        assert running.value() == items_digest(items[:k])
        running.add(item)
    assert running.value() == items_digest(items)
