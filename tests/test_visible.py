"""What a terminal (or the page) is sent of others' text: controls, bidi overrides and, in code,
invisible format characters as escapes; tab and newline kept; nothing dropped. The page's copy
of the rule (``static/visible.js``) answers the same for every character that matters."""

from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import drover
from drover.core.visible import visible

VISIBLE_JS = Path(drover.__file__).parent / "server" / "static" / "visible.js"


def test_controls_are_shown_not_sent() -> None:
    shown = visible("curl x | sh #\r\x1b[2Kls -la\x08\x07\x7f\x9b\x00")
    assert shown == "curl x | sh #\\r\\x1b[2Kls -la\\x08\\x07\\x7f\\x9b\\x00"


def test_layout_stays_and_prose_keeps_its_joiners() -> None:
    family = "\U0001f468\u200d\U0001f469"
    assert visible(f"a\tb\nc {family}") == f"a\tb\nc {family}"
    assert visible("rm -rf ~ #\u202eabc\u2066") == "rm -rf ~ #\\u202eabc\\u2066"
    assert visible(f"l\u200bs {family}\ufeff", code=True) == (
        "l\\u200bs \U0001f468\\u200d\U0001f469\\ufeff"
    )
    assert visible("tag\U000e0041", code=True) == "tag\\U000e0041"


@given(st.text())
def test_nothing_that_acts_is_left_and_it_is_idempotent(text: str) -> None:
    for code in (False, True):
        shown = visible(text, code=code)
        assert visible(shown, code=code) == shown
        for char in shown:
            kind = unicodedata.category(char)
            assert char in "\t\n" or kind not in ("Cc", "Zl", "Zp"), repr(char)
            assert not (code and kind == "Cf"), repr(char)
            assert char not in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_page_shows_what_the_terminal_shows() -> None:
    samples = [chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000]
    samples += ["\ufeff", "\ufff9", "\U000e0001", "\U000e0041", "\U0001d173", "ok \u202e x"]
    script = (
        'import { readFileSync } from "node:fs";\n'
        f"import {{ visible }} from {json.dumps(VISIBLE_JS.as_uri())};\n"
        'const samples = JSON.parse(readFileSync(0, "utf8"));\n'
        "process.stdout.write(JSON.stringify(samples.map((s) => "
        "[visible(s), visible(s, { code: true })])));\n"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        input=json.dumps(samples),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    page = json.loads(done.stdout)
    terminal = [[visible(s), visible(s, code=True)] for s in samples]
    different = [(s, p, t) for s, p, t in zip(samples, page, terminal, strict=True) if p != t]
    assert different == []
