"""The permission policy: who asks, who is refused, and "always" grants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from drover.tools.base import ToolContext, ToolOutput
from drover.turn.permissions import PERMISSION_MODES, PermissionMode, PermissionPolicy


@dataclass
class FakeTool:
    name: str
    read_only: bool
    description: str = "fake"
    input_schema: Mapping[str, Any] = field(default_factory=dict)

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="")


READER = FakeTool("read_file", read_only=True)
WRITER = FakeTool("write_file", read_only=False)


@pytest.mark.parametrize(
    ("mode", "tool", "asks", "refused"),
    [
        ("ask", READER, False, False),
        ("ask", WRITER, True, False),
        ("allow", READER, False, False),
        ("allow", WRITER, False, False),
        ("deny", READER, False, False),
        ("deny", WRITER, False, True),
    ],
)
def test_policy_matrix(mode: PermissionMode, tool: FakeTool, asks: bool, refused: bool) -> None:
    policy = PermissionPolicy(mode)
    assert policy.mode == mode
    assert policy.needs_prompt(tool) is asks
    assert policy.denied_outright(tool) is refused


def test_default_mode_is_ask() -> None:
    assert PermissionPolicy().mode == "ask"
    assert PERMISSION_MODES == ("ask", "allow", "deny", "sandboxed")


def test_always_stops_asking_for_that_tool_only() -> None:
    policy = PermissionPolicy("ask")
    bash = FakeTool("bash", read_only=False)
    policy.grant_always("write_file")
    assert policy.always == frozenset({"write_file"})
    assert not policy.needs_prompt(WRITER)
    assert policy.needs_prompt(bash)


def test_always_can_be_given_up_front_and_is_a_snapshot() -> None:
    policy = PermissionPolicy("ask", always=["write_file"])
    snapshot = policy.always
    policy.grant_always("bash")
    assert snapshot == frozenset({"write_file"})
    assert policy.always == frozenset({"write_file", "bash"})


def test_always_does_not_override_deny() -> None:
    policy = PermissionPolicy("deny", always=["write_file"])
    assert policy.denied_outright(WRITER)
    assert not policy.needs_prompt(WRITER)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown permission mode 'sometimes'"):
        PermissionPolicy("sometimes")  # type: ignore[arg-type]


BASH = FakeTool("bash", read_only=False)


def test_the_order_of_decision() -> None:
    policy = PermissionPolicy(
        "ask", allow=["bash(git *)", "write_file"], deny=["bash(git push*)", "read_file(.env)"]
    )
    assert policy.verdict(BASH, {"command": "git log"}).action == "run"
    refused = policy.verdict(BASH, {"command": "git push origin"})
    assert refused.action == "refuse" and refused.rule is not None
    assert refused.refusal == 'Not run: the deny rule "bash(git push*)" (deny=) refuses this call.'
    assert policy.verdict(BASH, {"command": "ls"}).action == "ask"
    assert policy.verdict(READER, {"path": "a/.env"}).action == "refuse"  # read-only or not
    assert policy.verdict(READER, {"path": "a.txt"}).action == "run"
    # An allow rule does not lift deny mode, whose promise is no side effects at all.
    strict = PermissionPolicy("deny", allow=["write_file"])
    assert strict.verdict(WRITER, {"path": "x"}).action == "refuse"
    assert strict.verdict(WRITER).refusal.startswith("Not run: the permission mode is deny")
    # A deny rule refuses in allow mode.
    loose = PermissionPolicy("allow", deny=["write_file(*.lock)"])
    assert loose.verdict(WRITER, {"path": "deps/x.lock"}).action == "refuse"
    assert loose.verdict(WRITER, {"path": "x.txt"}).action == "run"


def test_grants_are_rules_and_a_broken_stored_one_is_skipped() -> None:
    policy = PermissionPolicy("ask", always=["bash(npm test)", "bash(", "write_file"])
    assert policy.always == frozenset({"bash(npm test)", "write_file"})
    assert not policy.needs_prompt(BASH, {"command": "npm test"})
    assert policy.needs_prompt(BASH, {"command": "npm run evil"})
    policy.revoke("bash(npm test)")
    assert policy.needs_prompt(BASH, {"command": "npm test"})
