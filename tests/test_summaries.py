"""One-line summaries of tool inputs and outputs (seed 002 §2.5)."""

from __future__ import annotations

import pytest

from drover.core.summaries import INPUT_SUMMARY_LIMIT, summarise_input, summarise_output


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("bash", {"command": "ls -la"}, "bash: ls -la"),
        ("read_file", {"path": "src/a.py"}, "read_file: src/a.py"),
        ("search", {"query": "q", "path": "p"}, "search: p"),
        ("grep", {"pattern": "TODO", "path": ""}, "grep: TODO"),
        ("fetch", {"url": "https://example.com"}, "fetch: https://example.com"),
        ("bash", {"command": "echo a\n  echo b"}, "bash: echo a echo b"),
        ("probe", {"name": "first", "n": 2}, 'probe {"name":"first","n":2}'),
        ("probe", {"command": 3}, 'probe {"command":3}'),
        ("probe", {}, "probe {}"),
        ("write_file", {"content": "é"}, 'write_file {"content":"é"}'),
    ],
)
def test_input_summary(name: str, args: dict[str, object], expected: str) -> None:
    assert summarise_input(name, args) == expected


def test_input_summary_is_truncated_with_an_ellipsis() -> None:
    summary = summarise_input("bash", {"command": "x" * 300})
    assert len(summary) == INPUT_SUMMARY_LIMIT == 100
    assert summary.startswith("bash: xxx")
    assert summary.endswith("…")
    long_json = summarise_input("probe", {"data": "y" * 300})
    assert len(long_json) == 100
    assert long_json.endswith("…")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("  \n\n", ""),
        ("ok", "ok"),
        ("\n  first   line \nsecond", "first line…"),
        ("a\tb", "a b"),
    ],
)
def test_output_summary(text: str, expected: str) -> None:
    assert summarise_output(text) == expected


def test_output_summary_is_truncated() -> None:
    summary = summarise_output("z" * 200)
    assert len(summary) == 80
    assert summary.endswith("…")
    assert summarise_output("z" * 200, limit=10) == "z" * 9 + "…"
    assert summarise_output("abcdefghij\nmore", limit=10) == "abcdefghi…"
