"""Redaction: the patterns, streamed text split anywhere, and the bytes on disk."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drover.core.events import (
    AssistantMessage,
    Incomplete,
    StepStarted,
    TextDelta,
    ToolResults,
    ToolStateChanged,
    TurnStarted,
)
from drover.core.messages import (
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import ConfigError
from drover.journal.journal import Journal
from drover.journal.redact import (
    _BUILTIN_MARKS,
    _BUILTIN_PATTERNS,
    REDACTED,
    Redactor,
    StreamRedactor,
    _has_mark,
)
from drover.store.sqlite.store import SqliteStore

from .helpers import FakeClock

ANTHROPIC = "sk-ant-api03-Qm9vYmFyQmF6UXV4X2FudGhyb3BpY19rZXlfMTIz"
OPENAI = "sk-proj-T3BlbkFJ0penAIpr0jectKeyXYZ1234567890abcd"
GITHUB = "ghp_R2l0SHViVG9rZW5Gb3JUZXN0aW5nMTIzNDU2"
GITHUB_PAT = "github_pat_11AAAAAAA0FineGrainedTokenForTestingPurposes99"
AWS = "AKIAZ7EXAMPLE3QW9XYZ"
SLACK = "xoxb-1234567890-0987654321-SlackBotTokenValue"
GOOGLE = "AIzaSyD3GoogleApiKeyForTesting_1234567-x"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz"
PASSWORD = "hunter2Correct-Horse"
CORP = "CORP-884213"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
PEM = (
    f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[::-1]}\n-----END RSA PRIVATE KEY-----"
)
SECRETS = [
    ANTHROPIC,
    OPENAI,
    GITHUB,
    GITHUB_PAT,
    AWS,
    SLACK,
    GOOGLE,
    BEARER,
    PASSWORD,
    CORP,
    PEM_BODY,
]


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([r"CORP-[0-9]{6}", r"pin=(?P<secret>\d{4})"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key {ANTHROPIC}.", f"key {REDACTED}."),
        (f"OPENAI_API_KEY={OPENAI}", f"OPENAI_API_KEY={REDACTED}"),
        (f"{GITHUB} and {GITHUB_PAT}", f"{REDACTED} and {REDACTED}"),
        (f"aws_access_key_id = {AWS}", f"aws_access_key_id = {REDACTED}"),
        (f"token: {SLACK}", f"token: {REDACTED}"),
        (f'"{GOOGLE}"', f'"{REDACTED}"'),
        (f"Authorization: Bearer {BEARER}", f"Authorization: Bearer {REDACTED}"),
        (f"postgresql://admin:{PASSWORD}@db:5432/x", f"postgresql://admin:{REDACTED}@db:5432/x"),
        (f"before\n{PEM}\nafter", f"before\n{REDACTED}\nafter"),
        (f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}", REDACTED),  # cut off: redacted to the end
        (f"ticket {CORP} pin=1234", f"ticket {REDACTED} pin={REDACTED}"),
    ],
)
def test_patterns(redactor: Redactor, text: str, expected: str) -> None:
    assert redactor.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn; the sk-learn-is-a-great-library-name stays",
        "task-list-management-and-more-words",
        "Bearer authentication is described in RFC 6750",
        "see https://example.com/path:with@colons and http://host:8080/",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "AKIA is a prefix; ghp_ too; AIza alone",
    ],
)
def test_ordinary_text_is_left_alone(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


def test_invalid_pattern_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid redaction pattern"):
        Redactor(["("])


def test_redact_obj_and_message(redactor: Redactor) -> None:
    obj = {"cmd": f"curl -H 'Authorization: Bearer {BEARER}'", "n": 1, "l": [AWS, None, True]}
    assert redactor.redact_obj(obj) == {
        "cmd": f"curl -H 'Authorization: Bearer {REDACTED}'",
        "n": 1,
        "l": [REDACTED, None, True],
    }
    signed = ThinkingBlock(thinking="plain thoughts", signature="sig")
    message = assistant_message(
        [
            signed,
            ThinkingBlock(thinking=f"the key is {AWS}", signature="sig2"),
            TextBlock(text=f"use {GITHUB}", partial=True),
            ToolUseBlock(id="t", name="bash", input={"command": f"export K={OPENAI}"}),
            ToolResultBlock(tool_use_id="t", content=f"{SLACK}"),
        ]
    )
    out = redactor.redact_message(message)
    assert out.content == (
        signed,
        ThinkingBlock(thinking=f"the key is {REDACTED}", signature=None),
        TextBlock(text=f"use {REDACTED}", partial=True),
        ToolUseBlock(id="t", name="bash", input={"command": f"export K={REDACTED}"}),
        ToolResultBlock(tool_use_id="t", content=REDACTED),
    )
    clean = assistant_message([TextBlock(text="nothing here")])
    assert redactor.redact_message(clean) is clean


# -- streaming ---------------------------------------------------------------------------------

_pieces = st.sampled_from(
    [
        "word ",
        "more text ",
        "\n",
        "  ",
        "key=",
        "Authorization: Bearer ",
        "sk-",
        "AKIA",
        "https://",
        "user:",
        "@host ",
        "-----BEGIN RSA PRIVATE KEY-----\n",
        "-----END RSA PRIVATE KEY-----\n",
        "x" * 300,
        *(f"{s} " for s in SECRETS),
        f"postgres://me:{PASSWORD}@db/x ",
        f"Bearer {BEARER}",
        PEM,
    ]
)
#: A text made of those pieces, the sizes its deltas are cut to in turn, and after which
#: deltas a flush comes (in turn).
_STREAMED = (
    st.lists(_pieces, max_size=14).map("".join),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60),
    st.lists(st.booleans(), min_size=1, max_size=60),
)


@settings(max_examples=250, deadline=None)
@given(*_STREAMED)
def test_streamed_text_redacts_like_the_whole(
    text: str, sizes: list[int], flushes: list[bool]
) -> None:
    redactor = Redactor([r"CORP-[0-9]{6}"])
    stream = StreamRedactor(redactor)
    written: list[str] = []
    pos = i = 0
    while pos < len(text):
        size = sizes[i % len(sizes)]
        stream.feed(text[pos : pos + size])
        pos += size
        if flushes[i % len(flushes)]:
            written.append(stream.take())
        i += 1
    written.append(stream.take(final=True))
    # Equal to redacting the whole text at once: no flush ever wrote part of a secret.
    assert "".join(written) == redactor.redact(text)


@settings(max_examples=250, deadline=None)
@given(*_STREAMED)
def test_streamed_text_written_in_whole_deltas_redacts_like_the_whole(
    text: str, sizes: list[int], flushes: list[bool]
) -> None:
    """Told where the deltas end, a flush writes whole deltas only (the journal's rows), and
    still never part of a secret."""
    redactor = Redactor([r"CORP-[0-9]{6}"])
    stream = StreamRedactor(redactor)
    written: list[str] = []
    ends: list[int] = []  # where each delta fed ends, in the whole text
    done = pos = i = 0  # raw characters written, fed
    while pos < len(text):
        pos = min(pos + sizes[i % len(sizes)], len(text))
        stream.feed(text[ends[-1] if ends else 0 : pos])
        ends.append(pos)
        if flushes[i % len(flushes)]:
            written.append(stream.take(ends=[end - done for end in ends if end > done]))
            done = pos - stream.held_chars
            assert done == 0 or done in ends, "a flush ended inside a delta"
        i += 1
    written.append(stream.take(final=True))
    assert "".join(written) == redactor.redact(text)


async def test_no_secret_reaches_the_database_file(tmp_path: Path) -> None:
    redactor = Redactor([r"CORP-[0-9]{6}"])
    clock = FakeClock()
    path = tmp_path / "j.db"
    store = SqliteStore(path)
    await store.open()
    session = await store.create_session(workdir="/w", model="m")
    prompt = user_message(f"deploy with {ANTHROPIC} and ticket {CORP}")
    # The runner hands the store a redacted user message.
    turn = await store.begin_turn(session.id, redactor.redact_message(prompt), "h:1:1", 30)
    journal = Journal(store, session.id, clock=clock, sleep=clock.sleep, redactor=redactor)
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=prompt))
    await journal.send(StepStarted(step=1))
    answer = (
        f"Your key {OPENAI} and {GITHUB}, {GITHUB_PAT}, {AWS}, {SLACK}, {GOOGLE}; "
        f"curl -H 'Authorization: Bearer {BEARER}' postgresql://admin:{PASSWORD}@db/x "
        f"ticket {CORP}\n{PEM}\ndone "
    )
    # 3-byte deltas and a time gate on every one: every secret is split across flushes.
    for i in range(0, len(answer), 3):
        clock.advance(0.3)
        await journal.send(TextDelta(text=answer[i : i + 3]))
    await journal.send(
        ToolStateChanged(
            call_id="c",
            call_index=0,
            name="bash",
            state="input-available",
            input={"command": f"export TOKEN={GITHUB}"},
        )
    )
    await journal.send(
        ToolStateChanged(
            call_id="c",
            call_index=0,
            name="bash",
            state="output-available",
            output=f"AWS_ACCESS_KEY_ID={AWS}\n{PEM}",
        )
    )
    message = assistant_message(
        [TextBlock(text=answer), ToolUseBlock(id="c", name="bash", input={"k": SLACK})]
    )
    await journal.send(AssistantMessage(message=message))
    await journal.send(
        ToolResults(message=tool_result_message([ToolResultBlock(tool_use_id="c", content=BEARER)]))
    )
    await journal.send(StepStarted(step=2))
    await journal.send(TextDelta(text=f"and again {GOOGLE[:9]}"))
    clock.advance(0.3)
    await journal.send(TextDelta(text=f"{GOOGLE[9:]} "))
    await journal.send(
        Incomplete(reason="error", error=f"HTTP 401 for key {OPENAI}", usage=Usage())
    )
    await journal.aclose()

    def raw() -> bytes:
        return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("j.db"))

    def assert_clean(data: bytes) -> None:
        for secret in SECRETS:
            for start in range(len(secret) - 8):
                fragment = secret[start : start + 9].encode()
                assert fragment not in data, f"{secret!r} leaked: {fragment!r}"

    assert (tmp_path / "j.db-wal").exists()
    assert_clean(raw())
    assert b"[REDACTED]" in raw()
    await store.close()
    assert_clean(raw())


def test_every_builtin_match_holds_a_mark_the_quick_check_looks_for() -> None:
    """Text without any of ``_BUILTIN_MARKS`` skips the built-in patterns: each of them must
    contain one in every match, or a credential would slip through unredacted."""
    corpus = "\n".join(
        [
            *SECRETS,
            PEM,
            "ASIAZ7EXAMPLE3QW9XYZ gho_R2l0SHViVG9rZW5Gb3JUZXN0aW5nMTIzNDU2 xapp-1-A0123456789-x",
            f"Authorization: bearer token1234 BEARER {'x' * 24}",
            f"postgresql://admin:{PASSWORD}@db:5432/x",
            "-----BEGIN EC PRIVATE KEY-----\nunterminated",
        ]
    )
    for pattern in _BUILTIN_PATTERNS:
        matches = list(re.finditer(pattern, corpus))
        assert matches, f"the corpus does not exercise {pattern!r}"
        for m in matches:
            assert _BUILTIN_MARKS.search(m.group(0)), (pattern, m.group(0))
    assert Redactor().redact("nothing secret here, 12345 words.") == (
        "nothing secret here, 12345 words."
    )


@settings(max_examples=500, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from("bBeEaArR sk-gh_pAKIxo:/eyJ-BEGIN\u0130\u212aİ\u017f"), max_size=40
    )
)
def test_the_quick_check_finds_the_marks_the_marks_pattern_finds(text: str) -> None:
    assert _has_mark(text) == (_BUILTIN_MARKS.search(text) is not None)


def test_the_quick_check_finds_bearer_in_any_case() -> None:
    for text in ("Bearer x", "BEARER", "a bEaReR", "bearer", "xbearerx", "Authorization: BeArEr t"):
        assert _has_mark(text) and _BUILTIN_MARKS.search(text)
    for text in ("bear er", "beare", "nothing here", "", "B E A R E R"):
        assert not _has_mark(text) and not _BUILTIN_MARKS.search(text)


def _redact_each(redactor: Redactor, value: object) -> object:
    """What redact_obj must give: every string through redact, every container gone through."""
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, dict):
        return {k: _redact_each(redactor, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_each(redactor, v) for v in value]
    return value


_PIECES = st.sampled_from(
    [*SECRETS, f"Bearer {BEARER}", "bearer", "BEARER ", "sk-", "://", "a", " ", "\n", "id_1", "İ"]
)
_TEXTS = st.lists(_PIECES, max_size=4).map("".join)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXTS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXTS, _JSON, max_size=6), st.booleans())
def test_redact_obj_redacts_a_dict_as_redacting_each_string_does(
    value: dict[str, object], extra: bool
) -> None:
    """A dict's strings are checked for marks all at once: the result is the same as going
    through them one by one, with the built-in patterns alone or with extra ones."""
    redactor = Redactor([CORP]) if extra else Redactor()
    assert redactor.redact_obj(value) == _redact_each(redactor, value)
