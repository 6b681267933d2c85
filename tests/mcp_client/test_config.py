"""``.mcp.json`` read as users write it: shapes, ``${VAR}`` expansion, secrets, precedence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drover.errors import ConfigError
from drover.journal.redact import Redactor
from drover.mcp.config import (
    McpServerConfig,
    default_config_files,
    load_servers,
    parse_server,
    redact_patterns,
    user_config_file,
)

ENV = {"TOKEN": "tok-0123456789abcdef", "HOME": "/home/u", "EMPTY": ""}


def server(raw: dict[str, Any], env: dict[str, str] = ENV) -> McpServerConfig:
    return parse_server("s", raw, "f.json", env)


def write(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_a_stdio_server_as_claude_code_writes_it() -> None:
    config = server({"command": "npx", "args": ["-y", "pkg", "${HOME}/x"], "env": {"A": "1"}})
    assert config.transport == "stdio"
    assert (config.command, config.args, dict(config.env)) == (
        "npx",
        ("-y", "pkg", "/home/u/x"),
        {"A": "1"},
    )
    assert config.display == "npx -y pkg ${HOME}/x"
    assert config.error is None
    assert not config.is_trusted("anything") and not config.is_read_only("anything")


def test_an_http_server_with_a_header_from_the_environment() -> None:
    config = server(
        {
            "type": "http",
            "url": "https://mcp.example/x",
            "headers": {"Authorization": "Bearer ${TOKEN}"},
        }
    )
    assert config.transport == "http"
    assert config.headers == {"Authorization": "Bearer tok-0123456789abcdef"}
    assert "tok-0123456789abcdef" not in repr(config)
    assert "Bearer tok-0123456789abcdef" in config.secrets


def test_defaults_apply_to_unset_and_empty_variables() -> None:
    config = server({"command": "${NOPE:-node}", "args": ["${EMPTY:-fallback}", "${EMPTY}"]})
    assert (config.command, config.args) == ("node", ("fallback", ""))


def test_an_unset_variable_keeps_the_server_out_with_a_reason() -> None:
    config = server({"command": "node", "env": {"KEY": "${MISSING_ONE}"}})
    assert config.error == "${MISSING_ONE} is not set in the environment"


def test_what_counts_as_a_secret() -> None:
    config = server(
        {
            "command": "x",
            "args": ["--token", "${TOKEN}"],
            "env": {
                "API_KEY": "literal-key-value",
                "LOG_LEVEL": "debug-verbose",
                "SHORT": "${HOME}",
            },
        }
    )
    assert set(config.secrets) == {"tok-0123456789abcdef", "literal-key-value"}
    assert "tok-0123456789abcdef" not in repr(config) and "literal-key-value" not in repr(config)
    assert config.scrub("x tok-0123456789abcdef y") == "x [REDACTED] y"
    # Short values (here HOME, 7 characters) are never redacted: they would blank out text.
    assert "/home/u" not in config.secrets


def test_secrets_reach_the_journal_redactor_as_literal_patterns() -> None:
    config = server({"command": "x", "env": {"PASSWORD": "a.b*c+d?e(f)"}})
    redactor = Redactor(redact_patterns([config]))
    assert redactor.redact("pw=a.b*c+d?e(f) end") == "pw=[REDACTED] end"
    assert redactor.redact("pw=aXb*c") == "pw=aXb*c"


def test_trust_and_read_only_marks() -> None:
    config = server({"command": "x", "trust": ["write"], "readOnly": True, "timeout": 5})
    assert config.is_trusted("write") and not config.is_trusted("delete")
    assert config.is_read_only("anything")
    assert config.timeout == 5.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"args": []}, 'expected "command" (stdio) or "type": "http" with "url"'),
        ({"type": "sse", "url": "http://x"}, 'the "sse" transport is not supported'),
        ({"type": "http"}, "mcpServers.s.url: expected a non-empty string"),
        ({"type": "http", "url": "ftp://x"}, "expected an http:// or https:// URL"),
        ({"command": "x", "args": "a b"}, "mcpServers.s.args: expected a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "mcpServers.s.env: expected an object of strings"),
        ({"command": "x", "trust": "yes"}, "expected true, false or a list of tool names"),
        ({"command": "x", "timeout": 0}, "expected a positive number of seconds"),
        ({"command": "x", "type": "ws"}, 'expected "stdio" or "http"'),
    ],
)
def test_bad_shapes_are_one_line_errors_naming_where(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^f\.json: mcpServers\.s") as caught:
        server(raw)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_files_that_are_not_mcp_configs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        load_servers([bad])
    bad.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON: nested too deeply"):
        load_servers([bad])
    bad.write_text('{"servers": {}}', encoding="utf-8")
    with pytest.raises(ConfigError, match='expected an object with "mcpServers"'):
        load_servers([bad])
    with pytest.raises(ConfigError, match="no such MCP config file"):
        load_servers([tmp_path / "missing.json"])


def test_unknown_keys_of_other_clients_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", {"s": {"command": "x", "disabled": False, "oauth": {}}})
    assert [c.name for c in load_servers([path], env={})] == ["s"]


def test_a_later_definition_wins(tmp_path: Path) -> None:
    first = write(tmp_path / "user.json", {"a": {"command": "one"}, "b": {"command": "b"}})
    second = write(tmp_path / "project.json", {"a": {"command": "two"}})
    configs = load_servers([first, second], {"b": {"command": "param"}}, env={})
    assert {c.name: (c.command, c.source) for c in configs} == {
        "a": ("two", str(second)),
        "b": ("param", "mcp_servers"),
    }


def test_default_files_are_next_to_the_config_and_in_the_workdir(tmp_path: Path) -> None:
    env = {"DROVER_CONFIG": str(tmp_path / "conf" / "config.toml")}
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert user_config_file(env) == tmp_path / "conf" / "mcp.json"
    assert default_config_files(workdir, env) == []
    (tmp_path / "conf").mkdir()
    user = write(tmp_path / "conf" / "mcp.json", {})
    project = write(workdir / ".mcp.json", {})
    assert default_config_files(workdir, env) == [user, project]
