"""The docstrings' reStructuredText as the site renders it (``docs/_hooks/rst.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

HOOK = Path(__file__).resolve().parents[2] / "docs" / "_hooks" / "rst.py"


def _rst() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_rst", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_literals_and_roles_become_code_spans_across_line_ends() -> None:
    text = (
        "Use ``a\nb`` and :class:`~drover.agent.agent.Agent` or "
        ":func:`drover.tools.decorator.tool`."
    )
    assert _rst().to_markdown(text) == ("Use `a\nb` and `Agent` or `drover.tools.decorator.tool`.")


def test_a_simple_table_becomes_a_markdown_table() -> None:
    text = """Before::

==========  ===========
``x``       one line
``y``       two lines that
            go on | here
``POST /``  a route
``{"z"}``   its body, under it
==========  ===========

After."""
    assert _rst().to_markdown(text).splitlines() == [
        "Before:",
        "",
        "",
        "|   |   |",
        "| --- | --- |",
        "| `x` | one line |",
        "| `y` | two lines that go on \\| here |",
        '| `POST /` `{"z"}` | a route its body, under it |',
        "",
        "",
        "After.",
    ]


def test_a_header_row_and_a_section_title() -> None:
    text = "Title\n-----\n\n====  ====\nname  what\n====  ====\na     b\n====  ===="
    lines = _rst().to_markdown(text).splitlines()
    assert lines[0] == "## Title"
    assert "| name | what |" in lines
    assert "| a | b |" in lines
