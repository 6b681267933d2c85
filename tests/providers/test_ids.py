"""Tool-call ids fitted to each API's rule: deterministic, pairs matched, unique."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from drover.providers.ids import (
    ANTHROPIC_IDS,
    CHAT_IDS,
    RESPONSES_IDS,
    IdRule,
    ToolIdMapper,
    fit_id,
    synthetic_call_id,
    unique_id,
)

ANTHROPIC_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.mark.parametrize("rule", [ANTHROPIC_IDS, CHAT_IDS, RESPONSES_IDS])
@pytest.mark.parametrize("tool_id", ["toolu_01ABC", "call_abc123", "x"])
def test_valid_ids_are_left_alone(rule: IdRule, tool_id: str) -> None:
    assert fit_id(tool_id, rule) == tool_id


@pytest.mark.parametrize(
    "tool_id",
    [
        "functions.read_file:0",  # Kimi / some vLLM parsers
        "call:with spaces/and.dots",
        "ü-ñícode",
        "a" * 100,
        "",
    ],
)
def test_anthropic_ids_are_sanitised_with_a_stable_suffix(tool_id: str) -> None:
    fitted = fit_id(tool_id, ANTHROPIC_IDS)
    assert ANTHROPIC_RE.match(fitted)
    assert fitted == fit_id(tool_id, ANTHROPIC_IDS)  # same input, same output


def test_fitting_is_stable_across_runs() -> None:
    # A fixed expectation: a hash that changed between processes would break resumed sessions.
    assert fit_id("functions.read_file:0", ANTHROPIC_IDS) == "functions_read_file_0_f9cc2c7822"


def test_different_ids_that_sanitise_alike_stay_different() -> None:
    assert fit_id("a.b", ANTHROPIC_IDS) != fit_id("a:b", ANTHROPIC_IDS)


def test_chat_ids_are_cut_to_40() -> None:
    long_id = "toolu_" + "x" * 60
    fitted = fit_id(long_id, CHAT_IDS)
    assert len(fitted) == 40
    assert fitted != fit_id("toolu_" + "x" * 61, CHAT_IDS)


def test_responses_call_ids_are_cut_to_64() -> None:
    assert len(fit_id("c" * 65, RESPONSES_IDS)) == 64
    assert fit_id("any: string goes", RESPONSES_IDS) == "any: string goes"


def test_mapper_keeps_pairs_matched() -> None:
    ids = ToolIdMapper(ANTHROPIC_IDS)
    first = ids.call("functions.read:0")
    second = ids.call("functions.read:1")
    assert ids.result("functions.read:1") == second
    assert ids.result("functions.read:0") == first
    assert first != second


def test_mapper_makes_repeated_ids_unique_and_results_follow_the_latest_call() -> None:
    ids = ToolIdMapper(CHAT_IDS)
    first = ids.call("call_1")
    assert ids.result("call_1") == first == "call_1"
    again = ids.call("call_1")  # a later response reused the id
    assert again == "call_1_2"
    assert ids.result("call_1") == again


def test_mapper_avoids_collisions_with_ids_that_look_mapped() -> None:
    ids = ToolIdMapper(CHAT_IDS)
    assert ids.call("x") == "x"
    assert ids.call("x_2") == "x_2"
    assert ids.call("x") == "x_3"


def test_mapper_gives_empty_ids_distinct_values() -> None:
    ids = ToolIdMapper(ANTHROPIC_IDS)
    first, second = ids.call(""), ids.call("")
    assert first != second and ANTHROPIC_RE.match(first) and ANTHROPIC_RE.match(second)
    assert ids.result("") == second


def test_unique_id_respects_the_length_limit() -> None:
    taken = {"c" * 40}
    assert unique_id("c" * 40, taken, CHAT_IDS) == "c" * 38 + "_2"


def test_synthetic_ids_are_deterministic_and_distinct() -> None:
    # The same in another process (another hash seed): a resumed history keeps its ids.
    code = "from drover.providers.ids import synthetic_call_id as s; print(s('chatcmpl-1', 0))"
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    other = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == synthetic_call_id("chatcmpl-1", 0)
    assert re.fullmatch(r"call_[A-Za-z0-9_-]{1,35}", synthetic_call_id("chatcmpl-1", 0))
    assert synthetic_call_id("chatcmpl-1", 0) != synthetic_call_id("chatcmpl-1", 1)
    assert synthetic_call_id("chatcmpl-1", 0) != synthetic_call_id("chatcmpl-2", 0)
    assert len(synthetic_call_id("x", 3)) <= 40
