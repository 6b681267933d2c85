"""``--header`` and ``--no-chain`` as a user behind a gateway runs them — real processes against
the fake server — and the header's value, a secret, nowhere a user or an operator can read it:
not in stdout or stderr (an error the server echoed it into included), not in the journal, not
in ``drover doctor``."""

from __future__ import annotations

import json
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import clean_env, run_drover
from .test_doctor import _lines

SECRET = "gw-secret-5c0e8a2f19d4"


def _journal_bytes(tmp_path: Path) -> bytes:
    """Every byte the SQLite journal wrote (its WAL too)."""
    return b"".join(p.read_bytes() for p in tmp_path.glob("journal.db*"))


def test_a_header_flag_reaches_the_server_and_its_value_is_kept_out_of_the_journal(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    # The model repeats the secret (a gateway reflected it into the prompt, say): the journal
    # stores it redacted.
    fake_llm.script({"text": f"Your gateway key is {SECRET}, noted."})
    args = [
        "-p",
        "hi",
        "--model",
        "openai:m",
        "--base-url",
        fake_llm.openai_base_url,
        "--db",
        str(tmp_path / "journal.db"),
        "--workdir",
        str(tmp_path),
        "--header",
        "x-gw-key:${GW_KEY}",
        "--header",
        "x-route: team-a",
        "--output-format",
        "json",
    ]
    done = run_drover(args, env=clean_env(OPENAI_API_KEY="k", GW_KEY=SECRET))
    assert done.returncode == 0, done.stderr
    headers = fake_llm.requests[0].headers
    assert headers["x-gw-key"] == SECRET and headers["x-route"] == "team-a"
    assert SECRET not in done.stderr and SECRET not in " ".join(args)
    assert SECRET.encode() not in _journal_bytes(tmp_path)
    shown = run_drover(
        [
            "show",
            json.loads(done.stdout)["session_id"],
            "--json",
            "--db",
            str(tmp_path / "journal.db"),
        ]
    )
    assert shown.returncode == 0 and "[REDACTED]" in shown.stdout
    assert SECRET not in shown.stdout


def test_an_error_the_server_echoed_the_header_into_is_shown_without_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"http_error": {"status": 401, "message": f"unknown gateway key {SECRET}"}})
    args = [
        "-p",
        "hi",
        "--model",
        "anthropic:m",
        "--base-url",
        fake_llm.anthropic_base_url,
        "--db",
        str(tmp_path / "journal.db"),
        "--header",
        "x-gw-key:${GW_KEY}",
    ]
    done = run_drover(args, env=clean_env(ANTHROPIC_API_KEY="k", GW_KEY=SECRET))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("drover: error:")]
    assert len(errors) == 1 and "unknown gateway key [REDACTED]" in errors[0], done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert SECRET.encode() not in _journal_bytes(tmp_path)


def test_no_chain_sends_the_whole_history_on_the_next_turn(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "First answer."}, {"text": "Second answer."})
    base = [
        "--model",
        "openai-responses:m",
        "--base-url",
        fake_llm.openai_base_url,
        "--db",
        str(tmp_path / "journal.db"),
        "--session",
        "s1",
        "--no-chain",
    ]
    env = clean_env(OPENAI_API_KEY="k")
    assert run_drover(["-p", "turn one", *base], env=env).returncode == 0
    assert run_drover(["-p", "turn two", *base], env=env).returncode == 0
    body = fake_llm.requests[1].body
    assert "previous_response_id" not in body
    sent = json.dumps(body["input"])
    assert "turn one" in sent and "First answer." in sent and "turn two" in sent


def test_doctor_names_the_configured_headers_never_their_values(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[providers.openai]\nheaders = { "x-portkey-api-key" = "${GW_KEY}", '
        '"x-portkey-provider" = "openai" }\n'
        "[providers.openai-responses]\nchain = false\n"
    )
    env = clean_env(DROVER_CONFIG=str(config), GW_KEY=SECRET)
    done = run_drover(["doctor", "--db", str(tmp_path / "j.db"), "--sandbox", "off"], env=env)
    found = _lines(done.stdout)
    assert found["config"][0] == "ok", done.stdout
    assert found["network"][1].endswith(
        "; [providers] openai sends x-portkey-api-key, x-portkey-provider; openai-responses "
        "does not chain (header values never shown)"
    )
    assert SECRET not in done.stdout + done.stderr


def test_a_missing_variable_in_the_config_stops_drover_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[providers.anthropic]\nheaders = { "x-gw-key" = "${GW_KEY_UNSET}" }\n')
    env = clean_env(DROVER_CONFIG=str(config), ANTHROPIC_API_KEY="k")
    done = run_drover(["-p", "hi", "--db", str(tmp_path / "j.db")], env=env)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        f"drover: error: {config}: providers.anthropic.headers.x-gw-key: ${{GW_KEY_UNSET}} is "
        "not set in the environment"
    )
