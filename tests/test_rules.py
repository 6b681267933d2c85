"""Permission rules: their syntax, and which calls each covers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from drover.core.rules import Rule, always_rule, main_argument
from drover.errors import ConfigError

WORKDIR = "/work/project"


def allows(rule: str, tool: str, **input: Any) -> bool:
    parsed = Rule.parse(rule)
    return parsed.matches(tool, input, argument=_argument(tool), workdir=WORKDIR)


def denies(rule: str, tool: str, **input: Any) -> bool:
    parsed = Rule.parse(rule)
    return parsed.matches(tool, input, argument=_argument(tool), workdir=WORKDIR, anywhere=True)


def _argument(tool: str) -> str | None:
    return main_argument(_Tool(tool))


@dataclass
class _Tool:
    name: str
    input_schema: Mapping[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "expected TOOL or TOOL(GLOB)"),
        ("bash(git", "missing the closing ')'"),
        ("bash()", "empty glob"),
        ("ba sh", "expected TOOL or TOOL(GLOB)"),
        ("(x)", "expected TOOL or TOOL(GLOB)"),
    ],
)
def test_a_malformed_rule_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        Rule.parse(text, "here")


def test_a_bare_name_covers_every_call_and_a_star_in_it_many_tools() -> None:
    assert allows("read_file", "read_file", path="anything")
    assert not allows("read_file", "write_file", path="x")
    assert allows("mcp__github__get_*", "mcp__github__get_issue")
    assert not allows("mcp__github__get_*", "mcp__github__create_issue")
    # A server's name alone covers all its tools, and no other server's.
    assert allows("mcp__github", "mcp__github__create_issue")
    assert not allows("mcp__github", "mcp__githubber__x")


@pytest.mark.parametrize(
    ("rule", "path", "covered"),
    [
        ("write_file(src/**)", "src/a.py", True),
        ("write_file(src/**)", "src/deep/er/a.py", True),
        ("write_file(src/**)", "./src/a.py", True),
        ("write_file(src/**)", f"{WORKDIR}/src/a.py", True),
        ("write_file(src/**)", "tests/a.py", False),
        ("write_file(src/**)", "src/../tests/a.py", False),
        ("write_file(src/)", "src/x/y", True),
        ("write_file(src/*.py)", "src/a.py", True),
        ("write_file(src/*.py)", "src/x/a.py", False),
        ("edit_file(*.md)", "README.md", True),
        ("edit_file(*.md)", "docs/guide/intro.md", True),
        ("edit_file(*.md)", "notes.md.bak", False),
        ("read_file(.env)", "config/.env", True),
        ("read_file(.env)", "/elsewhere/.env", True),
        ("write_file(/tmp/**)", "/tmp/x", True),
        ("write_file(/tmp/**)", "tmp/x", False),
        # A relative glob with a directory never covers a path outside the workdir.
        ("write_file(src/**)", "/other/src/a.py", False),
    ],
)
def test_path_globs(rule: str, path: str, covered: bool) -> None:
    tool = rule.partition("(")[0]
    assert allows(rule, tool, path=path) is covered


@pytest.mark.parametrize(
    ("rule", "command", "covered"),
    [
        ("bash(git status*)", "git status", True),
        ("bash(git status*)", "git status --short", True),
        ("bash(git status*)", "git statusx", True),
        ("bash(git status*)", "git log", False),
        ("bash(npm test)", "npm test", True),
        ("bash(npm test)", "  npm test ", True),
        ("bash(npm test)", "npm test && rm -rf /", False),
        ("bash(npm test)", "npm testing", False),
        # Every part of a compound command must be covered...
        ("bash(git status*)", "git status; rm -rf x", False),
        ("bash(git status*)", "git status && git status -s", True),
        ("bash(git *)", "git status | git log", True),
        # ...and a substitution or an output redirection never is, unless the glob says '>'.
        ("bash(git *)", "git log $(rm -rf x)", False),
        ("bash(git *)", "git log `rm x`", False),
        ("bash(git *)", "git log > out.txt", False),
        ("bash(git * > *)", "git log > out.txt", True),
        # Operators inside quotes are text.
        ("bash(echo *)", "echo 'a; rm -rf x'", True),
        ("bash(echo *)", 'echo "a $(rm x)"', False),
        # A backslash makes a star plain: only that exact command.
        (r"bash(ls \*.py)", "ls *.py", True),
        (r"bash(ls \*.py)", "ls a.py", False),
    ],
)
def test_allow_rules_on_commands(rule: str, command: str, covered: bool) -> None:
    assert allows(rule, "bash", command=command) is covered


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ("rm -rf x", True),
        ("ls; rm -rf x", True),
        ("ls && rm -rf x", True),
        ("echo $(rm -rf x)", True),
        ("echo `rm -rf x`", True),
        ("(cd /; rm -rf x)", True),
        ("FOO=1 rm -rf x", True),
        ("ls -l", False),
        ("echo rm -rf x", False),
    ],
)
def test_deny_rules_on_commands_look_at_every_part(command: str, refused: bool) -> None:
    assert denies("bash(rm *)", "bash", command=command) is refused


def test_a_glob_never_covers_a_call_without_the_argument() -> None:
    assert not allows("bash(git *)", "bash")
    assert not allows("bash(git *)", "bash", command=3)
    assert not allows("grep(src/**)", "grep", pattern="x")


def test_the_main_argument_of_other_tools() -> None:
    schema = {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "query": {"type": "string"}},
        "required": ["count", "query"],
    }
    assert main_argument(_Tool("search", schema)) == "query"
    assert main_argument(_Tool("nothing", {"type": "object", "properties": {}})) is None
    declared = _Tool("lookup", schema)
    declared.rule_argument = "count"  # type: ignore[attr-defined]
    assert main_argument(declared) == "count"
    assert Rule.parse("search(drover *)").matches(
        "search", {"query": "drover rules", "count": 1}, argument="query"
    )


def test_always_on_bash_is_that_exact_command_and_reads_back() -> None:
    granted = always_rule("bash", {"command": " ls *.py | wc -l "})
    assert granted == r"bash(ls \*.py | wc -l)"
    assert allows(granted, "bash", command="ls *.py | wc -l")
    assert not allows(granted, "bash", command="ls a.py | wc -l")
    assert not allows(granted, "bash", command="ls *.py | wc -l; rm -rf x")
    # Parentheses in the command survive: the glob ends at the rule's last ")".
    parens = always_rule("bash", {"command": "echo (a) (b)"})
    assert allows(parens, "bash", command="echo (a) (b)")
    assert always_rule("write_file", {"path": "a"}) == "write_file"
    assert always_rule("bash", {}) == "bash"


@pytest.mark.parametrize(
    ("rule", "path", "targets", "allowed", "denied"),
    [
        # A link under src/ that leads out of it: the allow rule does not cover where it leads.
        ("write_file(src/**)", "src/ci/run", [f"{WORKDIR}/.ci/run"], False, True),
        ("write_file(src/**)", "src/a.py", [f"{WORKDIR}/src/a.py"], True, True),
        # A link named nothing the rule names, leading to .env: a deny rule sees the target.
        ("read_file(.env)", "notes.txt", [f"{WORKDIR}/.env"], False, True),
        ("read_file(.env)", "notes.txt", [f"{WORKDIR}/notes.txt"], False, False),
        # A path that cannot be resolved: no allow rule covers it; deny reads it as written.
        ("write_file(src/**)", "src/loop", None, False, True),
    ],
)
def test_a_path_is_matched_as_written_and_where_it_leads(
    rule: str, path: str, targets: list[str] | None, allowed: bool, denied: bool
) -> None:
    parsed = Rule.parse(rule)
    tool = parsed.name
    kwargs: dict[str, Any] = {"argument": "path", "workdir": WORKDIR, "targets": targets}
    assert parsed.matches(tool, {"path": path}, **kwargs) is allowed
    assert parsed.matches(tool, {"path": path}, anywhere=True, **kwargs) is denied
