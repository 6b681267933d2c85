"""The page's Markdown renderer (static/md.js) run in chromium on hostile and tricky input:
whatever the model writes, no element or attribute reaches the DOM except the renderer's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page

from .harness import DroverServe

RENDER = """async (source) => {
  const { renderMarkdown } = await import('/static/md.js');
  const box = document.createElement('div');
  box.innerHTML = renderMarkdown(source);
  const tags = [...box.querySelectorAll('*')].map((e) => e.tagName.toLowerCase());
  const attrs = [...box.querySelectorAll('*')].flatMap((e) =>
    [...e.attributes].map((a) => `${e.tagName.toLowerCase()}.${a.name}=${a.value}`));
  return { tags, attrs, text: box.textContent };
}"""
ALLOWED_TAGS = {
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "ul", "ol",
    "li", "blockquote", "hr", "a", "div", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
#: Attributes the renderer writes, with the values they may take (None: checked below).
ALLOWED_ATTRS = {
    "a.href": None,
    "a.target": {"_blank"},
    "a.rel": {"noopener noreferrer"},
    "code.class": None,
    "ol.start": None,
    "div.class": {"table-wrap"},
    "th.class": {"align-center", "align-right"},
    "td.class": {"align-center", "align-right"},
}


@pytest.fixture(scope="module")
def served_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``drover serve`` for the module (its URL): the renderer is one of its static files,
    and no test here runs a turn (so no model is called: any base URL lets it start)."""
    tmp = tmp_path_factory.mktemp("markdown")
    (tmp / "work").mkdir()
    server = DroverServe(
        model_base_url="http://127.0.0.1:9",
        workdir=tmp / "work",
        db=tmp / "journal.db",
        log=tmp / "serve.log",
    )
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def render(page: Page, served_page: str) -> Callable[[str], dict[str, list[str] | str]]:
    page.goto(served_page + "/")

    def run(source: str) -> dict[str, list[str] | str]:
        result: dict[str, list[str] | str] = page.evaluate(RENDER, source)
        return result

    return run


HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "**<b onmouseover=alert(1)>x</b>**",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    '[x](https://a.example/" onclick="alert(1))',
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    '<https://a.example/"onmouseover=alert(1)>',
    '```"><svg onload=alert(1)>\n<iframe src=x>\n```',
    '```js" onload="alert(1)\ncode\n```',
    "`<style>body{display:none}</style>`",
    "> <a href=javascript:alert(1)>quote</a>",
    "- <svg/onload=alert(1)>\n- item",
    "# <h1 onclick=alert(1)>",
    "\u0000 0 \u0000<script>x</script>",
    "| <script>alert(1)</script> | <img src=x onerror=alert(1)> |\n|---|---|\n"
    "| [x](javascript:a) | b |",
    '| a" onclick="x | b |\n|:--:|--:|\n| `</td><td>` | \\| |',
]


def test_no_markup_from_the_source_survives(
    render: Callable[[str], dict[str, list[str] | str]],
) -> None:
    for source in HOSTILE:
        result = render(source)
        assert set(result["tags"]) <= ALLOWED_TAGS, (source, result)
        for attr in result["attrs"]:
            name, _, value = str(attr).partition("=")
            assert name in ALLOWED_ATTRS, result
            assert ALLOWED_ATTRS[name] is None or value in ALLOWED_ATTRS[name], result
            if name == "a.href":
                assert value.startswith(("https://", "http://", "mailto:")), (source, result)
                assert not set(value) & set("\"'<> "), (source, result)


def test_what_it_renders(render: Callable[[str], dict[str, list[str] | str]]) -> None:
    result = render(
        "# Title\n\nSome **bold**, *it*, ~~gone~~ and `x < y`.\n\n"
        "1. one\n2. two\n\n> quoted\n\n---\n\n```py\nif a < b:\n    pass\n```\n\n"
        "snake_case_name and 2*3*4 stay as they are; [docs](https://example.com)"
    )
    assert result["tags"] == [
        "h1", "p", "strong", "em", "del", "code", "ol", "li", "li", "blockquote", "p", "hr",
        "pre", "code", "p", "a",
    ]  # fmt: skip
    assert "snake_case_name and 2*3*4 stay as they are" in str(result["text"])
    assert "if a < b:\n    pass" in str(result["text"])


def test_an_unclosed_fence_still_streaming_renders_as_code(
    render: Callable[[str], dict[str, list[str] | str]],
) -> None:
    result = render("Here:\n\n```python\ndef f():\n    return '<x>'")
    assert result["tags"] == ["p", "pre", "code"]
    assert result["text"] == "Here:def f():\n    return '<x>'"


TABLE_SCRIPT = """async (source) => {
  const { renderMarkdown } = await import('/static/md.js');
  const box = document.createElement('div');
  box.innerHTML = renderMarkdown(source);
  return [...box.querySelectorAll('tr')].map((tr) =>
    [...tr.children].map((c) => [c.tagName.toLowerCase(), c.className, c.innerHTML]));
}"""


def test_tables_are_rendered_as_tables(
    page: Page, render: Callable[[str], dict[str, list[str] | str]]
) -> None:
    source = (
        "Results:\n"
        "| name | **count** | note |\n"
        "|:-----|------:|:----:|\n"
        "| `a|b` | 12 | x \\| y |\n"
        "| c | 3 |\n"
        "\n"
        "After the table."
    )
    result = render(source)
    assert result["tags"] == [
        "p", "div", "table", "thead", "tr", "th", "th", "strong", "th", "tbody", "tr", "td",
        "code", "td", "td", "tr", "td", "td", "td", "p",
    ], result  # fmt: skip
    rows = page.evaluate(TABLE_SCRIPT, source)
    assert rows == [
        [["th", "", "name"], ["th", "align-right", "<strong>count</strong>"],
         ["th", "align-center", "note"]],
        [["td", "", "<code>a|b</code>"], ["td", "align-right", "12"],
         ["td", "align-center", "x | y"]],
        [["td", "", "c"], ["td", "align-right", "3"], ["td", "align-center", ""]],
    ]  # fmt: skip
    # Still streaming: a header row alone is a paragraph; with its rule row, an empty table.
    assert render("| a | b |")["tags"] == ["p"]
    assert render("| a | b |\n|---|---|")["tags"] == [
        "div", "table", "thead", "tr", "th", "th",
    ]  # fmt: skip
    # A rule row of another width is no table; nor is a lone rule.
    assert "table" not in render("| a | b |\n|---|")["tags"]
    assert render("---")["tags"] == ["hr"]
