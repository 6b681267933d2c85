"""Fork and rewind from the library: ``agent.fork``/``session.fork``, ``agent.rewind`` with the
files its tools wrote put back byte for byte, refused after an outside change, and what a
rewind cannot undo named."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover import Agent
from drover.agent.rewind import RewindConflict
from drover.config.settings import Config
from drover.errors import DroverError, ToolError
from drover.journal.file_images import MAX_IMAGE_BYTES, TurnFiles
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems
from drover.tools.base import ToolContext
from drover.tools.builtin.files import edit_file, read_file, write_file

ORIGINAL = b"keep me\r\nline two\n\xe2\x82\xac\n"


def agent_for(provider: ScriptedProvider, tmp_path: Path) -> Agent:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Agent(
        provider,
        tools=[read_file, write_file, edit_file],
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        permission_mode="allow",
    )


def user_texts(provider: ScriptedProvider, request: int) -> list[str]:
    return [m.text for m in provider.requests[request].messages if m.role == "user" and m.text]


def three_turns() -> list[Reply]:
    """Turn 1 creates notes.txt; turn 2 edits it, overwrites orig.txt and creates new.txt;
    turn 3 answers."""
    return [
        Reply(calls=[call("write_file", path="notes.txt", content="first\n")]),
        Reply(text="created"),
        Reply(
            calls=[
                call("edit_file", path="notes.txt", old_string="first", new_string="second"),
                call("write_file", path="orig.txt", content="replaced\n"),
                call("write_file", path="sub/new.txt", content="new\n"),
            ]
        ),
        Reply(calls=[call("edit_file", path="orig.txt", old_string="replaced", new_string="x")]),
        Reply(text="changed"),
        Reply(text="third"),
    ]


async def test_rewind_restores_the_files_byte_for_byte_and_the_conversation(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([*three_turns(), Reply(text="after the rewind")])
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    async with agent_for(provider, tmp_path) as agent:
        first = await agent.run("one")
        session = await agent.session(first.session_id)
        second = await session.run("two")
        await session.run("three")
        assert (work / "notes.txt").read_text() == "second\n"
        assert (work / "orig.txt").read_bytes() == b"x\n"

        plan = await agent.plan_rewind(session.id, second.turn_id)
        assert {f.shown: f.action for f in plan.files} == {
            "notes.txt": "restore",
            "orig.txt": "restore",
            "sub/new.txt": "delete",
        }
        assert "-second\n+first\n" in plan.diff()
        assert plan.prompt == "two"
        assert len(plan.turns) == 2  # the turn and the one after it

        result = await session.rewind(second.turn_id)
        assert sorted(result.restored) == ["notes.txt", "orig.txt", "sub/new.txt"]
        assert (work / "notes.txt").read_bytes() == b"first\n"
        assert (work / "orig.txt").read_bytes() == ORIGINAL
        assert not (work / "sub/new.txt").exists()

        # The conversation goes on from before turn two; the rewound turns stay, marked.
        await session.run("again")
        assert user_texts(provider, len(provider.requests) - 1) == ["one", "again"]
        assert not any(request_problems(provider.requests[-1].messages).values())
        turns = await agent.store.turns(session.id)
        assert [(t.rewound, t.discarded) for t in turns] == [
            (False, False),
            (True, True),
            (True, True),
            (False, False),
        ]
        # A rewound turn cannot be rewound again.
        with pytest.raises(DroverError, match="rewound already"):
            await session.rewind(second.turn_id)


async def test_a_rewind_is_refused_after_an_outside_change_unless_forced(tmp_path: Path) -> None:
    provider = ScriptedProvider(three_turns()[:5])
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        await session.run("one")
        second = await session.run("two")
        (work / "notes.txt").write_text("changed by hand\n")

        with pytest.raises(RewindConflict, match=r"'notes\.txt' changed outside drover"):
            await session.rewind(second.turn_id)
        # Nothing was touched: neither a file nor the journal.
        assert (work / "orig.txt").read_bytes() == b"x\n"
        assert not any(t.rewound for t in await agent.store.turns(session.id))

        # Without files the conversation alone goes back.
        kept = await session.rewind(second.turn_id, files=False)
        assert kept.restored == ()
        assert (work / "orig.txt").read_bytes() == b"x\n"


async def test_force_overwrites_an_outside_change(tmp_path: Path) -> None:
    provider = ScriptedProvider(three_turns()[:5])
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        await session.run("one")
        second = await session.run("two")
        (work / "notes.txt").write_text("changed by hand\n")
        await session.rewind(second.turn_id, force=True)
        assert (work / "notes.txt").read_bytes() == b"first\n"
        assert (work / "orig.txt").read_bytes() == ORIGINAL


async def test_a_file_over_the_cap_is_written_with_a_note_and_named_unrestorable(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(
        [Reply(calls=[call("write_file", path="big.txt", content="small\n")]), Reply(text="ok")]
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.txt").write_bytes(b"x" * (MAX_IMAGE_BYTES + 1))
    async with agent_for(provider, tmp_path) as agent:
        result = await agent.run("shrink it")
        (output,) = provider.requests[1].messages[-1].tool_results
        assert "a rewind cannot restore its previous content" in output.content
        plan = await agent.plan_rewind(result.session_id, result.turn_id)
        assert plan.unrestorable == ("big.txt",)
        done = await agent.rewind(result.session_id, result.turn_id)
        assert done.unrestorable == ("big.txt",)
        assert (work / "big.txt").read_bytes() == b"small\n"


async def test_content_is_kept_once(tmp_path: Path) -> None:
    same = "same\n"
    provider = ScriptedProvider(
        [
            Reply(calls=[call("write_file", path="a.txt", content=same)]),
            Reply(calls=[call("write_file", path="b.txt", content=same)]),
            Reply(calls=[call("write_file", path="a.txt", content="other\n")]),
            Reply(calls=[call("write_file", path="b.txt", content="other\n")]),
            Reply(text="done"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        result = await agent.run("go")
        images = await agent.store.file_images(result.session_id, 1)
        kept = [i.before_hash for i in images if i.before == "kept"]
        assert len(kept) == 2 and kept[0] == kept[1]  # both held "same\n": one blob


async def test_fork_then_diverge(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [Reply(text="a1"), Reply(text="a2"), Reply(text="fork says"), Reply(text="source says")]
    )
    async with agent_for(provider, tmp_path) as agent:
        source = await agent.session()
        first = await source.run("one")
        await source.run("two")

        fork = await source.fork(first.turn_id)
        assert fork.id != source.id
        assert fork.record.forked_from == source.id
        assert fork.record.forked_turn == first.turn_id
        await fork.run("fork only")
        assert user_texts(provider, 2) == ["one", "fork only"]
        await source.run("source only")
        assert user_texts(provider, 3) == ["one", "two", "source only"]

        whole = await agent.fork(source.id)
        assert [
            t.user_message and t.user_message.text for t in await agent.store.turns(whole.id)
        ] == [
            "one",
            "two",
            "source only",
        ]
        with pytest.raises(DroverError, match="no turn"):
            await agent.fork(source.id, turn_id="nope")


async def test_rewinding_a_completed_turn_makes_the_work_before_it_pending_again(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(
        [
            Reply(text="a"),
            Reply(calls=[call("write_file", path="x.txt", content="x")]),  # then the limit
            Reply(text="c"),
        ]
    )
    work = tmp_path / "work"
    work.mkdir()
    agent = Agent(
        provider,
        tools=[write_file],
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        permission_mode="allow",
        max_turns=1,
    )
    async with agent:
        session = await agent.session()
        await session.run("one")
        second = await session.run("two")
        assert second.status == "incomplete"
        third = await session.run("three")
        assert third.completed and session.pending == ()

        await session.rewind(third.turn_id, files=False)
        # Turn two's unfinished work is pending again, and can be dropped.
        assert [m.role for m in session.pending] == ["user", "assistant", "user"]
        assert await session.discard() == 3
        turns = await agent.store.turns(session.id)
        assert [(t.discarded, t.rewound) for t in turns] == [
            (False, False),
            (True, False),
            (True, True),
        ]


async def test_a_write_recorded_but_never_made_is_left_alone(tmp_path: Path) -> None:
    """The record of a write comes first: when the write then fails (here: the file has a second
    hard link), a rewind finds the file as it was and leaves it."""
    provider = ScriptedProvider(
        [
            Reply(calls=[call("write_file", path="linked.txt", content="new")]),
            Reply(calls=[call("write_file", path="plain.txt", content="new")]),
            Reply(text="done"),
        ]
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "linked.txt").write_bytes(b"old")
    (work / "other-name.txt").hardlink_to(work / "linked.txt")
    async with agent_for(provider, tmp_path) as agent:
        result = await agent.run("write both")
        assert (work / "linked.txt").read_bytes() == b"old"  # refused: two links
        plan = await agent.plan_rewind(result.session_id, result.turn_id)
        assert {f.shown: f.action for f in plan.files} == {
            "linked.txt": "unchanged",
            "plain.txt": "delete",
        }
        done = await agent.rewind(result.session_id, result.turn_id)
        assert done.restored == ("plain.txt",)
        assert (work / "linked.txt").read_bytes() == b"old"


async def test_a_rewind_cut_off_after_the_files_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(three_turns()[:5])
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        await session.run("one")
        second = await session.run("two")
        # What a rewind cut off between the files and the journal leaves: files back, turns not.
        (work / "notes.txt").write_bytes(b"first\n")
        (work / "orig.txt").write_bytes(ORIGINAL)
        (work / "sub/new.txt").unlink()
        result = await session.rewind(second.turn_id)
        assert result.rewound == (second.turn_id,) and result.restored == ()
        assert (work / "notes.txt").read_bytes() == b"first\n"


async def test_no_record_no_write(tmp_path: Path) -> None:
    """When the journal cannot record the content before (the turn is no longer running), the
    tool does not write."""
    store_path = str(tmp_path / "journal.db")
    async with Agent(
        ScriptedProvider([Reply(text="hi")]), store=store_path, config=Config()
    ) as agent:
        result = await agent.run("hello")
        files = TurnFiles(agent.store, result.turn_id)
        ctx = ToolContext(workdir=tmp_path, call_id="c1", files=files)
        with pytest.raises(ToolError, match="was not written: the journal could not keep"):
            await write_file.run({"path": "f.txt", "content": "x"}, ctx)
    assert not (tmp_path / "f.txt").exists()


async def test_another_agent_holding_the_session_sees_each_rewind(tmp_path: Path) -> None:
    """A process that opened the session before a rewind goes on from the rewound history,
    also after a second rewind (of an earlier turn) that leaves the last turn's flags alone."""
    provider = ScriptedProvider([Reply(text=n) for n in ("a", "b", "c", "d")])
    async with agent_for(provider, tmp_path) as first:
        session = await first.session()
        one = await session.run("one")
        two = await session.run("two")
        three = await session.run("three")
        await session.rewind(three.turn_id, files=False)
        async with agent_for(provider, tmp_path) as other:
            held = await other.session(session.id)  # opened after the first rewind
            await session.rewind(two.turn_id, files=False)
            await held.run("four")
    assert one.completed
    assert user_texts(provider, 3) == ["one", "four"]
