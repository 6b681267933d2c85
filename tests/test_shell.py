"""How drover.core.shell reads a command: the plain view allow rules match, and every command a deny
rule or a hook's scope looks at."""

from __future__ import annotations

import pytest

from drover.core.shell import Statement, command_words, parse_command


def plain(command: str) -> list[str] | None:
    statements = parse_command(command).plain
    return None if statements is None else [s.text for s in statements]


@pytest.mark.parametrize(
    ("command", "statements"),
    [
        ("git status", ["git status"]),
        ("git status --short && git diff | head -5", ["git status --short", "git diff", "head -5"]),
        ("git status; git log\ngit diff # what changed", ["git status", "git log", "git diff"]),
        (
            "echo 'a; rm -rf x' \"$HOME\" ${USER} $'tab\\t'",
            ["echo 'a; rm -rf x' \"$HOME\" ${USER} $'tab\\t'"],
        ),
        ("X=1 make test", ["X=1 make test"]),
        ("git status\\\n  --short", ["git status\\\n  --short"]),
        ("git statusé", ["git statusé"]),
        # A comment hides nothing: what follows its line is a command of its own.
        ("git status #'\ntouch x\n#'", ["git status", "touch x"]),
        ("git status $'\\'' ; touch x #'", ["git status $'\\''", "touch x"]),
        # \<CR> is an escaped CR to bash, and the newline after it ends the command (the
        # grammar alone reads a line continuation there).
        ("git status\\\r\nid", ["git status\\\r", "id"]),
    ],
)
def test_a_plain_command_is_its_simple_commands(command: str, statements: list[str]) -> None:
    assert plain(command) == statements


@pytest.mark.parametrize(
    "command",
    [
        "echo $(id)",
        "echo `id`",
        'echo "$(id)"',
        "cat <(id)",
        "echo ${x:-$(id)}",
        "echo $((1 + 2))",
        "(cd x; make)",
        "{ make; }",
        "for f in *; do rm $f; done",
        "f() { id; }",
        "sleep 1 &",
        "cat <<E\nhi\nE",
        "! make",
        "export A=1",
        "git status $(",  # unfinished
        "git status @(a|b)",  # extglob: no syntax bash knows here
        "git status\x00; id",
        "echo a\n\\rm x",  # the grammar took the newline into a word
        "git status\\\n#;id",  # a comment to the grammar, a word to bash
        "",
        "   # only a comment",
    ],
)
def test_what_is_not_plain(command: str) -> None:
    assert parse_command(command).plain is None


def test_redirections_say_their_direction() -> None:
    assert parse_command("git log > out.txt 2>&1").plain == (
        Statement("git log > out.txt 2>&1", frozenset({">"})),
    )
    assert parse_command("wc -l < a.txt").plain == (Statement("wc -l < a.txt", frozenset({"<"})),)


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf x",
        "ls && rm -rf x",
        "echo $(rm -rf x)",
        "echo ${x:-$(rm -rf x)}",
        "(cd /; rm -rf x)",
        "X=1 rm -rf x",
        '"rm" -rf x',
        "r\\m -rf x",
        "/bin/rm -rf x",
        "$''rm -rf x",
        "$x rm -rf x",
        "env -u HOME X=1 rm -rf x",
        "sudo -u root nice -n 5 timeout 10 rm -rf x",
        "xargs -n 1 rm -rf x",
        "bash -c 'cd / && rm -rf x'",
        "sh -ec 'rm -rf x'",
        "eval 'rm -rf x'",
        "find . -exec rm -rf x \\;",
        "for f in a; do rm -rf x; done",
        "f() { rm -rf x; }",
        "if true; then rm -rf x; fi",
    ],
)
def test_every_command_is_seen_wherever_it_runs(command: str) -> None:
    assert "rm -rf x" in parse_command(command).anywhere


def test_the_words_of_every_command() -> None:
    assert command_words("./check --strict && python3 'lint.py' | sh -c 'gate x'") == (
        ("./check", "--strict"),
        ("python3", "lint.py"),
        ("sh", "-c", "gate x"),
        ("gate", "x"),
    )
