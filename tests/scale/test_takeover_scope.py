"""A dead process's turn is resumed, not ended by a bystander.

Two or three real ``drover serve`` processes on one PostgreSQL journal (with Redis). A process
killed with SIGKILL leaves its turn ``running``. A message posted to *another* session must
not end that turn (it would end ``interrupted`` and never be resumed, its followers never
told): only the takeover resumes it. A message posted to the *same* session recovers it and
continues its work, and followers on other processes see the recovered turn's end.
"""

from __future__ import annotations

from collections.abc import Callable

from server.support import TERMINAL, Served, Sse

from drover.testing.server import FakeLLMServer

from .test_scale import Follower, _check_final, _post, _session, _snapshot, _turn_ended

LONG = " ".join(f"w{i:04d}" for i in range(1500))


def _ended_in_order(events: list[Sse], turn_ids: list[str]) -> list[str]:
    """The turns a follower saw end, in order: by their terminal event, or by a ``reset`` (its
    last id fell in the hole the killed process left) whose snapshot shows them ended."""
    ended: list[str] = []
    for event in events:
        if event.event in TERMINAL:
            found = [str(event.data["turn_id"])]
        elif event.event == "reset":
            found = [t["id"] for t in event.data["turns"] if t["status"] != "running"]
        else:
            continue
        ended += [t for t in found if t in turn_ids and t not in ended]
    return ended


def _streaming(follower: Follower, count: int = 150) -> None:
    follower.wait_for(lambda got: sum(e.event == "text_delta" for e in got) >= count)


def test_a_post_to_another_session_leaves_the_dead_turn_to_its_takeover(
    fake: FakeLLMServer, spawn: Callable[..., Served]
) -> None:
    victim = spawn()
    # Its startup look is over before the victim dies; it never looks again.
    bystander = spawn("--takeover-interval", "3600")
    fake.script(
        {"text": LONG, "delay": 0.004},
        {"text": "A reply for the other session."},
        {"text": "Resumed after the cut."},
    )
    dead_sid, other_sid = _session(bystander), _session(bystander)
    first = _post(victim, dead_sid)
    follower = Follower(bystander, dead_sid, until=_turn_ended(first))
    follower.start()
    _streaming(follower)
    victim.stop(9)
    # The victim's pid is gone: its turn may be recovered by anyone now. A bystander's post
    # to another session must leave it alone.
    _post(bystander, other_sid)
    other = Follower(bystander, other_sid)
    other.start()
    assert other.result(bystander)[-1].event == "done"
    assert [t["status"] for t in _snapshot(bystander, dead_sid)["turns"]] == ["running"]
    # The takeover (a process starting: its first look) ends it and resumes it; the
    # follower on the bystander sees both, over Redis and the log.
    taker = spawn()
    events = follower.result(bystander)
    snap = _snapshot(bystander, dead_sid)
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed"]
    assert "cut off" in snap["turns"][1]["user_message"]["content"][0]["text"]
    both = [first, snap["turns"][1]["id"]]
    assert _ended_in_order(events, both) == both
    _check_final(events, snap)
    # The processes share the module's journal: none of them may take over the next test's
    # dead turn (the taker looks every few seconds).
    for served in (bystander, taker):
        served.close()


def test_a_post_to_the_dead_turns_session_recovers_and_continues_it(
    fake: FakeLLMServer, spawn: Callable[..., Served]
) -> None:
    victim = spawn()
    bystander = spawn("--takeover-interval", "3600")
    watcher = spawn("--takeover-interval", "3600")
    fake.script({"text": LONG, "delay": 0.004}, {"text": "Carried on from the cut."})
    sid = _session(bystander)
    first = _post(victim, sid)
    follower = Follower(watcher, sid, until=_turn_ended(first))
    follower.start()
    _streaming(follower)
    victim.stop(9)
    second = _post(bystander, sid, "go on")
    events = follower.result(watcher, bystander)
    snap = _snapshot(watcher, sid)
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed"]
    assert snap["turns"][1]["id"] == second
    # The follower on a third process saw the recovered turn end, then the new one.
    assert _ended_in_order(events, [first, second]) == [first, second]
    # The new turn carried the dead turn's flushed text before the new message.
    kept = snap["turns"][0]["messages"]
    assert kept and kept[0]["partial"]
    request = fake.requests[-1].body["messages"]
    assert LONG.startswith(request[1]["content"][0]["text"][:20])
    assert request[-1]["content"][-1]["text"] == "go on"
    _check_final(events, snap)
