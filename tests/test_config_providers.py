"""The config file's ``[providers]`` tables and ``--header``/``--no-chain``: what a gateway in
front of the model needs (extra headers, no Responses chaining), read as a user writes them —
and a header's value, a secret, never in a ``repr``, an error or a usage message."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.cli.build import with_flags
from drover.cli.parsers import build_parser, build_subparser
from drover.config.provider_tables import ProviderSettings, header_flag
from drover.config.settings import load_config
from drover.errors import ConfigError

SECRET = "gw-secret-7f3a9c1e5b"

GATEWAY = """
[providers.openai]
headers = { "X-Gateway-Key" = "Bearer ${GW_KEY}", "x-route" = "team-a" }

[providers."openai:gpt-4.1"]
headers = { "X-ROUTE" = "team-b", "x-extra" = "1" }

[providers.openai-responses]
chain = false
"""


def test_a_models_headers_are_its_providers_with_its_own_over_them(tmp_path: Path) -> None:
    config = load_config(_file(tmp_path, GATEWAY), env={"GW_KEY": SECRET})
    assert config.provider_settings("openai", "gpt-4o").headers == {
        "X-Gateway-Key": f"Bearer {SECRET}",
        "x-route": "team-a",
    }
    # The model's own table wins for a name spelt in any case.
    assert config.provider_settings("openai", "gpt-4.1").headers == {
        "X-Gateway-Key": f"Bearer {SECRET}",
        "X-ROUTE": "team-b",
        "x-extra": "1",
    }
    assert config.provider_settings("openai", "gpt-4.1").chain is None
    assert config.provider_settings("openai-responses", "gpt-5") == ProviderSettings(chain=False)
    assert config.provider_settings("anthropic", "claude") == ProviderSettings()
    # The value of the variable and the whole header value are both secrets.
    assert set(config.secrets) == {SECRET, f"Bearer {SECRET}"}
    assert SECRET not in repr(config) and "Bearer" not in repr(config)
    assert config.sources["providers"] == str(tmp_path / "config.toml")


def test_the_command_lines_headers_and_no_chain_apply_to_every_model(tmp_path: Path) -> None:
    config = load_config(_file(tmp_path, GATEWAY), env={"GW_KEY": SECRET})
    args = build_parser().parse_args(
        ["-p", "hi", "--header", "x-route: from-flag", "--header", "x-new:v", "--no-chain"]
    )
    flagged = with_flags(args, config)
    assert flagged.provider_settings("openai", "gpt-4.1").headers == {
        "X-Gateway-Key": f"Bearer {SECRET}",
        "x-route": "from-flag",
        "x-extra": "1",
        "x-new": "v",
    }
    assert flagged.provider_settings("openai-responses", "gpt-5").chain is False
    assert flagged.provider_settings("anthropic", "c").headers == {
        "x-route": "from-flag",
        "x-new": "v",
    }
    assert with_flags(build_parser().parse_args(["-p", "hi"]), config) is config


def test_a_header_flag_expands_a_variable_and_keeps_its_value_secret() -> None:
    settings = header_flag("Authorization:Bearer ${GW_KEY}", {"GW_KEY": SECRET})
    assert settings.headers == {"Authorization": f"Bearer {SECRET}"}
    assert SECRET in settings.secrets and SECRET not in repr(settings)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("no-colon", "expected NAME:VALUE"),
        (":value", "expected NAME:VALUE"),
        ("bad name:x", "'bad name' is not a valid HTTP header name"),
        ("x-key:${UNSET_GW_VAR}", "x-key: ${UNSET_GW_VAR} is not set in the environment"),
        ("Content-Length:5", "Content-Length is set by the HTTP client"),
        (f"x-key:{SECRET}\u00e9", "x-key: the value holds a character a header cannot carry"),
        ("x-key:   ", "x-key: the value is empty"),
    ],
)
def test_a_bad_header_flag_is_a_usage_error_without_its_value(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["-p", "hi", "--header", flag])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("drover: error: argument --header: ") and message in err, err
    assert SECRET not in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[providers.openai]\nheaders = { "x-a" = "${NOT_SET_GW}" }',
            "providers.openai.headers.x-a: ${NOT_SET_GW} is not set in the environment",
        ),
        (
            f'[providers.openai]\nheaders = {{ "X-Api-Key" = "{SECRET}" }}',
            "providers.openai.headers.X-Api-Key: a credential is read from the environment only",
        ),
        (
            f'[providers.openai]\nheaders = {{ "Authorization" = "Bearer {SECRET}" }}',
            "headers.Authorization: a credential is read from the environment only",
        ),
        (
            "[providers.anthropic]\nchain = false",
            "providers.anthropic.chain: only openai-responses models chain their requests",
        ),
        ('[providers."openai:gpt-4.1"]\nchain = false', "only openai-responses models chain"),
        ('[providers.openai-responses]\nchain = "no"', "chain: must be true or false"),
        (
            "[providers.gemini]\nheaders = {}",
            "[providers.gemini]: expected a provider (anthropic, "
            "openai, openai-responses) or a model as PROVIDER:MODEL",
        ),
        ('[providers."openai:"]\nheaders = {}', "expected a provider"),
        (
            '[providers.openai]\nbase_url = "http://x"',
            "providers.openai: unknown setting 'base_url' (expected headers, chain)",
        ),
        ('[providers.openai]\nheaders = { "x-a" = 3 }', "headers.x-a: the value must be a string"),
        ('[providers.openai]\nheaders = { "Host" = "x" }', "Host is set by the HTTP client"),
        ("providers = 3", "[providers] must be a table"),
        (
            f'[providers.openai]\nheaders = {{ "x-a" = "{SECRET}\\r\\nx-b: 1" }}',
            "headers.x-a: the value holds a character a header cannot carry",
        ),
    ],
)
def test_a_bad_providers_table_is_one_error_naming_where_never_the_value(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_config(path, env={"GW_KEY": SECRET})
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert SECRET not in str(error.value)


def test_a_credential_header_takes_its_value_from_a_variable(tmp_path: Path) -> None:
    text = '[providers.anthropic]\nheaders = { "cf-aig-authorization" = "Bearer ${GW_KEY}" }'
    config = load_config(_file(tmp_path, text), env={"GW_KEY": SECRET})
    assert config.provider_settings("anthropic", "m").headers == {
        "cf-aig-authorization": f"Bearer {SECRET}"
    }


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_serve_takes_the_same_flags(tmp_path: Path) -> None:
    args = build_subparser("serve").parse_args(["--header", "x-gw:team-a", "--no-chain"])
    config = with_flags(args, load_config(tmp_path / "none.toml", env={}))
    settings = config.provider_settings("openai-responses", "m")
    assert settings == ProviderSettings(headers={"x-gw": "team-a"}, chain=False)
