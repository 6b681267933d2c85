"""The server's "always": kept per session in the journal, so it outlives a restart, never
answers for another session, and can be listed and withdrawn over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.support import TERMINAL, Served, read_events, start_server

from drover.testing.server import FakeLLMServer


def _write(name: str) -> list[dict[str, Any]]:
    call = {"name": "write_file", "input": {"path": f"{name}.txt", "content": name}}
    return [{"tool_calls": [call]}, {"text": f"wrote {name}"}]


def _turn(served: Served, sid: str, answer: str | None) -> list[str]:
    """Post a message; answer its permission question with ``answer`` (None: expect none).
    The event types of the turn."""
    with served.client() as c:
        after = c.get(f"/v1/sessions/{sid}").json()["last_event_id"]
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}).status_code == 202

        def until(ev: Any, _: Any) -> bool:
            if ev.event == "permission_request":
                assert answer is not None, "asked, though a grant should have answered"
                url = f"/v1/sessions/{sid}/permissions/{ev.data['request_id']}"
                assert c.post(url, json={"decision": answer}).status_code == 200
            return ev.event in TERMINAL

        return [e.event for e in read_events(c, sid, after=after, until=until)]


def _serve(fake: FakeLLMServer, tmp_path: Path) -> Served:
    return start_server(fake, tmp_path, "--permission-mode", "ask", "--sandbox", "off")


def test_always_is_kept_per_session_across_a_restart_and_withdrawn(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    served = _serve(fake_llm, tmp_path)
    try:
        with served.client() as c:
            mine = c.post("/v1/sessions", json={}).json()["id"]
            other = c.post("/v1/sessions", json={}).json()["id"]
        fake_llm.script(*_write("a"), *_write("b"))
        assert "permission_request" in _turn(served, mine, "always")
        with served.client() as c:
            listed = c.get(f"/v1/sessions/{mine}/permissions").json()
            assert listed["mode"] == "ask"
            assert [g["rule"] for g in listed["grants"]] == ["write_file"]
            assert c.get(f"/v1/sessions/{other}/permissions").json()["grants"] == []
        # Another session still asks (and is refused here).
        assert "permission_request" in _turn(served, other, "deny")
    finally:
        served.close()

    again = _serve(fake_llm, tmp_path)
    try:
        fake_llm.script(*_write("c"), *_write("d"))
        events = _turn(again, mine, None)  # the stored grant answers after the restart
        assert "permission_request" not in events and events[-1] == "done"
        assert (tmp_path / "work" / "c.txt").read_text() == "c"
        with again.client() as c:
            gone = c.delete(f"/v1/sessions/{mine}/permissions", params={"rule": "write_file"})
            assert gone.json() == {"revoked": ["write_file"]}
            assert c.get(f"/v1/sessions/{mine}/permissions").json()["grants"] == []
        assert "permission_request" in _turn(again, mine, "deny")
    finally:
        again.close()


def test_the_rules_that_apply_are_listed_with_where_they_come_from(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    served = start_server(
        fake_llm, tmp_path, "--sandbox", "off", "--deny", "bash(rm *)", "--allow", "read_file"
    )
    try:
        with served.client() as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            listed = c.get(f"/v1/sessions/{sid}/permissions").json()
        assert listed["rules"] == [
            {"kind": "deny", "rule": "bash(rm *)", "source": "--deny"},
            {"kind": "allow", "rule": "read_file", "source": "--allow"},
        ]
    finally:
        served.close()
