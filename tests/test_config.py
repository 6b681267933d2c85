"""Configuration: TOML file, then environment, then flags; every problem one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.config.settings import (
    DEFAULT_MODEL,
    Config,
    default_config_path,
    list_models,
    load_config,
)
from drover.errors import ConfigError

FULL = """
default_model = "openai:gpt-4.1"
models = ["anthropic:claude-haiku-4-5", "openai:llama3.1:8b"]
context_limit = 128000
chars_per_token = 3.5
max_turns = 40
redact_patterns = ["sk-[A-Za-z0-9]+"]

[base_urls]
openai = "http://localhost:11434/v1"

[aliases]
fast = "anthropic:claude-haiku-4-5"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file_or_environment(tmp_path: Path) -> None:
    config = load_config(tmp_path / "missing.toml", env={})
    assert config == Config()
    assert config.default_model == DEFAULT_MODEL == "anthropic:claude-sonnet-4-5"
    assert (config.chars_per_token, config.context_limit, config.max_turns) == (4.0, 200_000, 25)
    assert config.models == [] and config.redact_patterns == [] and config.base_urls == {}
    assert config.path is None


def test_a_full_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    config = load_config(path, env={})
    assert config.default_model == "openai:gpt-4.1"
    assert config.models == ["anthropic:claude-haiku-4-5", "openai:llama3.1:8b"]
    assert config.context_limit == 128_000 and config.chars_per_token == 3.5
    assert config.max_turns == 40 and config.redact_patterns == ["sk-[A-Za-z0-9]+"]
    assert config.base_urls == {"openai": "http://localhost:11434/v1"}
    assert config.resolve("fast") == ("anthropic", "claude-haiku-4-5")
    assert config.path == path and config.sources["max_turns"] == str(path)


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    env = {
        "DROVER_MODEL": "openai-responses:gpt-5",
        "DROVER_CHARS_PER_TOKEN": "2.5",
        "DROVER_MAX_TURNS": "7",
        "ANTHROPIC_BASE_URL": "http://proxy:8080",
        "OPENAI_BASE_URL": "http://vllm:8000/v1",
        "ANTHROPIC_API_KEY": "sk-ant-1",
        "OPENAI_API_KEY": "sk-2",
    }
    config = load_config(write(tmp_path, FULL), env=env)
    assert config.default_model == "openai-responses:gpt-5"
    assert config.chars_per_token == 2.5 and config.max_turns == 7
    assert config.base_urls == {
        "anthropic": "http://proxy:8080",
        "openai": "http://vllm:8000/v1",
        "openai-responses": "http://vllm:8000/v1",
    }
    assert config.api_keys == {
        "anthropic": "sk-ant-1",
        "openai": "sk-2",
        "openai-responses": "sk-2",
    }
    assert config.sources["default_model"] == "DROVER_MODEL"


def test_keys_never_show_in_the_repr(tmp_path: Path) -> None:
    config = load_config(tmp_path / "none.toml", env={"ANTHROPIC_API_KEY": "sk-secret"})
    assert config.api_key("anthropic") == "sk-secret"
    assert "sk-secret" not in repr(config)


def test_empty_variables_count_as_unset(tmp_path: Path) -> None:
    config = load_config(tmp_path / "none.toml", env={"OPENAI_API_KEY": "", "DROVER_MODEL": " "})
    assert config.api_keys == {} and config.default_model == DEFAULT_MODEL


def test_drover_config_points_at_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'default_model = "openai:gpt-4.1"\n')
    assert default_config_path({"DROVER_CONFIG": str(path)}) == path
    assert load_config(env={"DROVER_CONFIG": str(path)}).default_model == "openai:gpt-4.1"
    # Pointing it at nothing turns the file off.
    nothing = load_config(env={"DROVER_CONFIG": str(tmp_path / "nothing.toml")})
    assert nothing.default_model == DEFAULT_MODEL


def test_the_default_path_is_in_the_user_config_dir() -> None:
    path = default_config_path({})
    assert path.name == "config.toml" and "drover" in path.parts


def test_a_bare_drover_model_uses_the_default_provider(tmp_path: Path) -> None:
    path = write(tmp_path, 'default_model = "openai:gpt-4.1"\n')
    assert load_config(path, env={"DROVER_MODEL": "gpt-4o"}).default_model == "openai:gpt-4o"
    aliased = load_config(write(tmp_path, FULL), env={"DROVER_MODEL": "fast"})
    assert aliased.default_model == "anthropic:claude-haiku-4-5"


def test_flags_win(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={"DROVER_MAX_TURNS": "7"})
    flagged = config.with_overrides(
        default_model="fast", max_turns=3, base_urls={"anthropic": "http://localhost:9"}
    )
    assert flagged.default_model == "anthropic:claude-haiku-4-5"
    assert flagged.max_turns == 3 and flagged.sources["max_turns"] == "flag"
    assert flagged.base_urls["anthropic"] == "http://localhost:9"
    assert flagged.base_urls["openai"] == "http://localhost:11434/v1"
    assert config.with_overrides() == config
    with pytest.raises(ConfigError, match="max_turns must be a positive integer"):
        config.with_overrides(max_turns=0)
    with pytest.raises(ConfigError, match="unknown provider"):
        config.with_overrides(default_model="nope:x")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("default_model = [", "invalid TOML"),
        ('default_model = "gemini:pro"', "unknown provider 'gemini'"),
        ('default_model = "claude"', "must be PROVIDER:MODEL"),
        ("default_model = 3", "must be a model spec"),
        ("chars_per_token = 0.5", "chars_per_token must be between 1 and 32, got 0.5"),
        ("chars_per_token = 33", "between 1 and 32"),
        ('chars_per_token = "many"', "chars_per_token must be a number"),
        ("max_turns = 0", "max_turns must be a positive integer"),
        ("max_turns = 2.5", "max_turns must be a positive integer"),
        ("max_turns = true", "max_turns must be a positive integer"),
        ("context_limit = -1", "context_limit must be a positive integer"),
        ("stall_timeout = 0", "stall_timeout must be a number of seconds above 0, got 0"),
        ('stall_timeout = "soon"', "stall_timeout must be a number"),
        ("stall_timeout = inf", "stall_timeout must be a finite number"),
        ('models = "openai:gpt"', "models must be a list"),
        ('models = ["openai:"]', "no model name"),
        ('redact_patterns = ["(unclosed"]', "not a valid regular expression"),
        ('[base_urls]\ngemini = "http://x"', "unknown provider 'gemini'"),
        ('[base_urls]\nopenai = "localhost:11434"', "must be an http(s) URL"),
        ('colour = "blue"', "unknown setting 'colour'"),
        ('anthropic_api_key = "sk-ant"', "API keys are read from the environment only"),
        ('[aliases]\nfast = "nope"', "aliases.fast"),
        ('[permissions]\nallow = "bash"', "permissions.allow: expected a list of rules"),
        ('[permissions]\ndeny = ["bash(rm"]', "missing the closing ')'"),
        ('[permissions]\nask = ["bash"]', "unknown setting 'permissions.ask'"),
        ("hooks = 3", "hooks must be [[hooks]] tables"),
        ('[[hooks]]\nevent = "before"\ncommand = "x"', "hooks[0].event: expected one of"),
        ('[[hooks]]\nevent = "pre_tool"', "hooks[0].command: expected the command"),
        ('[[hooks]]\nevent = "turn_end"\ncommand = "x"\ntool = "bash"', "is about no tool"),
        ('[[hooks]]\nevent = "pre_tool"\ncommand = "x"\ntimeout = 0', "positive number"),
        ('[[hooks]]\nevent = "pre_tool"\ncommand = "x"\nwhen = 1', "unknown key 'when'"),
        ('[mcp]\napprove_project = "yes"', "must be true, false or a list of server names"),
        ("[mcp]\napprove = true", "unknown setting 'mcp.approve'"),
        ("retries = 3", "[retries] must be a table"),
        ("[retries]\nmax = -1", "retries.max must be a whole number from 0 to 100"),
        ("[retries]\nmax = 1.5", "retries.max must be a whole number"),
        ("[retries]\nmax = true", "retries.max must be a whole number"),
        ('[retries]\nbackoff = "1s"', "retries.backoff must be a number of seconds"),
        ("[retries]\nbackoff_max = 4000", "retries.backoff_max must be a number of seconds"),
        ("[retries]\nbackoff = 2\nbackoff_max = 1", "backoff_max must not be under"),
        ("[retries]\ntries = 2", "unknown setting 'retries.tries'"),
        ('http_client = "requests"', "'http_client' must be one of httpx, aiohttp"),
        ("http_client = 1", "'http_client' must be one of httpx, aiohttp"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert message.startswith(str(path)) and problem in message
    assert "\n" not in message.strip() or "invalid TOML" in message


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"DROVER_CHARS_PER_TOKEN": "0"}, "DROVER_CHARS_PER_TOKEN: value must be between 1 and 32"),
        ({"DROVER_CHARS_PER_TOKEN": "lots"}, "DROVER_CHARS_PER_TOKEN: value must be a number"),
        ({"DROVER_MAX_TURNS": "-3"}, "DROVER_MAX_TURNS: value must be a positive integer"),
        ({"DROVER_MAX_TURNS": "ten"}, "DROVER_MAX_TURNS: value must be a positive integer"),
        ({"DROVER_MODEL": "gemini:pro"}, "DROVER_MODEL: unknown provider 'gemini'"),
        ({"DROVER_STALL_TIMEOUT": "-1"}, "DROVER_STALL_TIMEOUT: value must be a number of sec"),
        ({"DROVER_STALL_TIMEOUT": "never"}, "DROVER_STALL_TIMEOUT: value must be a number"),
        ({"OPENAI_BASE_URL": "not a url"}, "OPENAI_BASE_URL: base URL for openai"),
    ],
)
def test_bad_variables_name_the_variable(tmp_path: Path, env: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "none.toml", env=env)
    assert str(caught.value).startswith(problem)


def test_the_stall_timeout_from_file_environment_and_flag(tmp_path: Path) -> None:
    assert load_config(tmp_path / "none.toml", env={}).stall_timeout == 30.0
    path = write(tmp_path, "stall_timeout = 12.5\n")
    from_file = load_config(path, env={})
    assert from_file.stall_timeout == 12.5 and from_file.sources["stall_timeout"] == str(path)
    from_env = load_config(path, env={"DROVER_STALL_TIMEOUT": "4"})
    assert from_env.stall_timeout == 4.0
    assert from_env.sources["stall_timeout"] == "DROVER_STALL_TIMEOUT"
    flagged = from_env.with_overrides(stall_timeout=0.5)
    assert flagged.stall_timeout == 0.5 and flagged.sources["stall_timeout"] == "flag"
    with pytest.raises(ConfigError, match="above 0"):
        from_env.with_overrides(stall_timeout=0)


def test_list_models(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    rows = list_models(load_config(path, env={}))
    assert rows == [
        ("openai:gpt-4.1", f"default ({path})"),
        ("anthropic:claude-haiku-4-5", str(path)),
        ("openai:llama3.1:8b", str(path)),
        ("fast", f"alias for anthropic:claude-haiku-4-5 ({path})"),
    ]
    assert list_models(Config()) == [(DEFAULT_MODEL, "default (built-in)")]


def test_permissions_hooks_and_mcp_tables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[permissions]\nallow = ["read_file", "bash(git status*)"]\ndeny = ["bash(rm *)"]\n'
        '[[hooks]]\nevent = "pre_tool"\ntool = "bash(git *)"\ncommand = "./check"\n'
        '[[hooks]]\nevent = "turn_end"\ncommand = "notify-send done"\ntimeout = 5\n'
        '[mcp]\napprove_project = ["github"]\n',
    )
    config = load_config(path, env={})
    assert [r.text for r in config.permissions_allow] == ["read_file", "bash(git status*)"]
    assert [(r.text, r.source) for r in config.permissions_deny] == [("bash(rm *)", str(path))]
    first, second = config.hooks
    assert (first.event, first.command, first.timeout) == ("pre_tool", "./check", 60.0)
    assert first.tool is not None and first.tool.text == "bash(git *)"
    assert (second.event, second.tool, second.timeout) == ("turn_end", None, 5.0)
    assert second.source == f"{path} hooks[1]"
    assert config.mcp_approve_project == frozenset({"github"})


def test_the_retries_table(tmp_path: Path) -> None:
    assert (Config().retries_max, Config().retries_backoff, Config().retries_backoff_max) == (
        4,
        0.5,
        8.0,
    )
    path = write(tmp_path, "[retries]\nmax = 0\nbackoff = 2\nbackoff_max = 30\n")
    config = load_config(path, env={})
    assert (config.retries_max, config.retries_backoff, config.retries_backoff_max) == (0, 2, 30)
    assert config.sources["retries_max"] == str(path)


def test_the_http_client(tmp_path: Path) -> None:
    assert Config().http_client is None  # each command's own choice
    for name in ("httpx", "aiohttp"):
        path = write(tmp_path, f'http_client = "{name}"\n')
        config = load_config(path, env={})
        assert config.http_client == name and config.sources["http_client"] == str(path)
