"""Rebuilding history from stored turns, and repairing it so every provider accepts it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drover.core.events import (
    MAY_HAVE_RUN_TEXT,
    NOT_RUN_TEXT,
    READ_ONLY_CUT_TEXT,
    ToolState,
    TurnStatus,
)
from drover.core.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.journal.history import CallsConsulted, build_history, repair_history
from drover.journal.records import StoredMessage, ToolCallRecord, TurnRecord


def turn(seq: int, status: TurnStatus, prompt: str | None, **kw: Any) -> TurnRecord:
    return TurnRecord(
        id=f"t{seq}",
        session_id="s",
        seq=seq,
        status=status,
        user_message=None if prompt is None else user_message(prompt),
        reason=None,
        error=None,
        usage=None,
        owner=None,
        lease_expires_at=None,
        discarded=kw.get("discarded", False),
        created_at=0.0,
        updated_at=0.0,
        ended_at=None,
    )


def stored(turn_id: str, *messages: Message) -> list[StoredMessage]:
    return [
        StoredMessage(turn_id=turn_id, seq=i + 1, message=m, partial=False, created_at=0.0)
        for i, m in enumerate(messages)
    ]


def call(call_id: str, state: ToolState, *, output: str | None = None, **kw: Any) -> ToolCallRecord:
    return ToolCallRecord(
        turn_id="t1",
        call_id=call_id,
        step=1,
        call_index=0,
        name="bash",
        state=state,
        input={},
        output=output,
        is_error=kw.get("is_error", False),
        outcome_unknown=kw.get("outcome_unknown", False),
        read_only=kw.get("read_only", False),
        created_at=0.0,
        updated_at=0.0,
    )


def use(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="bash", input={"command": call_id})


def result(call_id: str, content: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=content)


def test_pending_work_lands_before_the_next_user_message() -> None:
    t1, t2, t3 = (
        turn(1, "completed", "one"),
        turn(2, "incomplete", "two"),
        turn(3, "completed", "three"),
    )
    a1 = assistant_message([TextBlock(text="done one")])
    a2 = assistant_message([TextBlock(text="working"), use("x")])
    r2 = tool_result_message([result("x")])
    cut = assistant_message([TextBlock(text="then I wi", partial=True)])
    a3 = assistant_message([TextBlock(text="done three")])
    history = build_history(
        [(t3, stored("t3", a3)), (t1, stored("t1", a1)), (t2, stored("t2", a2, r2, cut))]
    )
    assert history == [
        user_message("one"),
        a1,
        user_message("two"),
        a2,
        r2,
        cut,
        user_message("three"),
        a3,
    ]


def test_discarded_and_running_turns_are_skipped_and_resume_turns_have_no_prompt() -> None:
    a = assistant_message([TextBlock(text="a")])
    history = build_history(
        [
            (turn(1, "incomplete", "dropped", discarded=True), stored("t1", a)),
            (turn(2, "interrupted", None), stored("t2", a)),
            (turn(3, "running", "live elsewhere"), stored("t3", a)),
        ]
    )
    assert history == [a]


def test_missing_results_are_rebuilt_from_the_tool_calls() -> None:
    uses = [use(i) for i in ("ran", "cut", "ro", "wait", "fail", "gone", "int")]
    calls = [
        call("ran", "output-available", output="file contents"),
        call("cut", "running"),
        call("ro", "running", read_only=True),
        call("wait", "awaiting-permission"),
        call("fail", "output-error", output="exit 2", is_error=True),
        call("int", "interrupted", outcome_unknown=True),
    ]
    history = repair_history([user_message("go"), assistant_message(uses)], calls)
    assert len(history) == 3
    assert history[2].content == (
        ToolResultBlock(tool_use_id="ran", content="file contents"),
        ToolResultBlock(tool_use_id="cut", content=MAY_HAVE_RUN_TEXT, is_error=True),
        ToolResultBlock(tool_use_id="ro", content=READ_ONLY_CUT_TEXT, is_error=True),
        ToolResultBlock(tool_use_id="wait", content=NOT_RUN_TEXT, is_error=True),
        ToolResultBlock(tool_use_id="fail", content="exit 2", is_error=True),
        ToolResultBlock(tool_use_id="gone", content=MAY_HAVE_RUN_TEXT, is_error=True),
        ToolResultBlock(tool_use_id="int", content=MAY_HAVE_RUN_TEXT, is_error=True),
    )
    assert (
        repair_history([assistant_message([use("n")])], [call("n", "interrupted")])[1]
        .tool_results[0]
        .content
        == NOT_RUN_TEXT
    )


def test_results_are_merged_in_call_order_and_inserted_before_the_next_prompt() -> None:
    a = assistant_message([use("1"), use("2"), use("3")])
    partial_results = Message(
        role="user", content=(TextBlock(text="note"), result("3", "three"), result("1", "one"))
    )
    history = repair_history([a, partial_results, user_message("next")])
    assert history[1].content == (
        result("1", "one"),
        ToolResultBlock(tool_use_id="2", content=MAY_HAVE_RUN_TEXT, is_error=True),
        result("3", "three"),
        TextBlock(text="note"),
    )
    assert history[2] == user_message("next")
    # An assistant message right after one with calls gets the results in between.
    b = assistant_message([TextBlock(text="more")])
    assert [m.role for m in repair_history([a, b])] == ["assistant", "user", "assistant"]


def test_orphan_results_and_empty_content_are_dropped() -> None:
    history = repair_history(
        [
            user_message("hi"),
            tool_result_message([result("nobody")]),
            Message(role="user", content=(result("nobody2"), TextBlock(text="kept"))),
            assistant_message([TextBlock(text=""), TextBlock(text="  \n")]),
            assistant_message([]),
            assistant_message(
                [
                    ThinkingBlock(thinking=""),
                    TextBlock(text=""),
                    TextBlock(text="cut", partial=True),
                ]
            ),
            assistant_message([ThinkingBlock(thinking="", signature="sig")]),
        ]
    )
    assert history == [
        user_message("hi"),
        Message(role="user", content=(TextBlock(text="kept"),)),
        assistant_message([TextBlock(text="cut", partial=True)]),
        assistant_message([ThinkingBlock(thinking="", signature="sig")]),
    ]


# -- properties --------------------------------------------------------------------------------

_ids = st.sampled_from(["a", "b", "c", "d"])
_text = st.sampled_from(["", " ", "word", "partial"])


@st.composite
def _block(draw: st.DrawFn, role: str) -> ContentBlock:
    kind = draw(st.sampled_from(["text", "use"] if role == "assistant" else ["text", "result"]))
    if kind == "text":
        return TextBlock(text=draw(_text), partial=draw(st.booleans()))
    if kind == "use":
        return use(draw(_ids))
    return result(draw(_ids), draw(_text))


@st.composite
def _message(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "assistant"]))
    blocks = draw(st.lists(_block(role), max_size=4))
    if role == "assistant":
        seen: set[str] = set()
        unique = []
        for b in blocks:  # a provider never repeats a call id within one response
            if isinstance(b, ToolUseBlock):
                if b.id in seen:
                    continue
                seen.add(b.id)
            unique.append(b)
        blocks = unique
    return Message(role=role, content=tuple(blocks))  # type: ignore[arg-type]


_calls = st.lists(
    st.builds(
        call,
        _ids,
        st.sampled_from(["input-available", "running", "output-available", "interrupted"]),
        output=st.none() | st.just("out"),
        read_only=st.booleans(),
        outcome_unknown=st.booleans(),
    ),
    max_size=4,
)


def _valid(history: list[Message]) -> None:
    for i, message in enumerate(history):
        for block in message.content:
            assert not (isinstance(block, TextBlock) and not block.text.strip())
        assert message.content
        if message.role == "assistant" and message.tool_uses:
            ids = [u.id for u in message.tool_uses]
            following = history[i + 1]
            assert following.role == "user"
            assert [b.tool_use_id for b in following.content[: len(ids)]] == ids  # type: ignore[union-attr]
        if message.tool_results:
            before = history[i - 1] if i else None
            assert before is not None
            assert before.role == "assistant"
            assert {r.tool_use_id for r in message.tool_results} <= {u.id for u in before.tool_uses}


@settings(max_examples=300, deadline=None)
@given(st.lists(_message(), max_size=8), _calls)
def test_repair_is_valid_deterministic_and_idempotent(
    messages: list[Message], calls: list[ToolCallRecord]
) -> None:
    once = repair_history(messages, calls)
    assert repair_history(messages, calls) == once
    assert repair_history(once, calls) == once
    _valid(once)


def test_a_build_consults_stored_calls_only_for_missing_results() -> None:
    done = turn(1, "completed", "one")
    cut = turn(2, "interrupted", "two")
    answered = stored("t1", assistant_message([use("a")]), tool_result_message([result("a")]))
    consulted = CallsConsulted()
    assert build_history([(done, answered)], consulted) == build_history([(done, answered)])
    assert consulted.ids == set() and consulted.turns([(done, answered)]) == []
    # A call cut off before its result: the build looks it up, in the turn that made it.
    loaded = [(done, answered), (cut, stored("t2", assistant_message([use("b"), use("c")])))]
    build_history(loaded, consulted)
    assert consulted.ids == {"b", "c"}
    assert consulted.turns(loaded) == ["t2"]
