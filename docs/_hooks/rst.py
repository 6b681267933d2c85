"""The reStructuredText of drover's docstrings, as Markdown the site renders.

drover's docstrings use a small part of reStructuredText: ``literal`` spans, roles such as
:class:`~drover.agent.agent.Agent`, simple tables drawn with ``=`` rules, section titles underlined
with ``-`` or ``=`` (made second-level headings), and paragraphs ending in ``::`` before an
indented block. The site shows docstrings in two places — the library reference
(through the griffe extension in ``griffe_rst.py``) and the HTTP contract, read from the server
package's docstring (``reference.py``) — and both go through :func:`to_markdown`.
"""

from __future__ import annotations

import re

_LITERAL = re.compile(r"``(.+?)``", re.S)
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
_RULE = re.compile(r"^(\s*)(=+)((?:\s+=+)+)\s*$")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _inline(text: str) -> str:
    return _ROLE.sub(_role, _LITERAL.sub(r"`\1`", text))


def _columns(rule: str) -> list[int]:
    return [m.start() for m in re.finditer(r"=+", rule)]


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = [*starts[1:], None]
    return [
        line[a:b].strip() if b is not None else line[a:].strip()
        for a, b in zip(starts, ends, strict=True)
    ]


def _table(lines: list[str], starts: list[int]) -> list[str]:
    """A simple table's lines (its rules included) as a Markdown table.

    A line whose first cell is empty continues the row above it; a rule after the first row
    makes that row the header (otherwise the header is empty)."""
    rows: list[list[str]] = []
    header: list[str] | None = None
    body = lines[1:-1]
    for line in body:
        if _RULE.match(line):
            header, rows = (rows[0] if rows else None), []
            continue
        if not line.strip():
            continue
        cells = _cells(line, starts)
        # (A route's JSON body under it, in the first column, continues the route's row.)
        if rows and (not cells[0] or cells[0].startswith("``{")):
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    width = len(starts)
    head = header or [" "] * width
    out = ["| " + " | ".join(_cell(c) for c in head) + " |", "|" + " --- |" * width]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _cell(text: str) -> str:
    return _inline(text).replace("|", "\\|")


def _next_rule(lines: list[str], start: int) -> int:
    return next((n for n in range(start, len(lines)) if _RULE.match(lines[n])), len(lines) - 1)


def to_markdown(text: str) -> str:
    """``text`` (a docstring, dedented) with its reStructuredText made Markdown."""
    lines = text.splitlines()
    out: list[str] = []
    prose: list[str] = []  # inline markup may run over line ends: converted a paragraph at once
    i = 0
    while i < len(lines):
        if _RULE.match(lines[i]):
            # The table ends at its next rule, unless a row follows that rule at once: then
            # the rule closed a header and the table ends at the rule after it.
            end = _next_rule(lines, i + 1)
            if end + 1 < len(lines) and lines[end + 1].strip():
                end = _next_rule(lines, end + 1)
            out += [_inline("\n".join(prose)), "", *_table(lines[i : end + 1], _columns(lines[i]))]
            out.append("")
            prose = []
            i = end + 1
            continue
        line = lines[i]
        underline = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.strip() and len(underline) >= 3 and set(underline) in ({"-"}, {"="}):
            prose += [f"## {line.strip()}", ""]  # a section title
            i += 2
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            stripped = line.rstrip()[:-2].rstrip()
            line = f"{stripped}:" if stripped else ""
        prose.append(line)
        i += 1
    out.append(_inline("\n".join(prose)))
    return "\n".join(out)
