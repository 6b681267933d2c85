"""When traces are on, what the variables and the config file say, the errors an operator gets
for what cannot work, and ``-p`` exporting its spans before it exits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from server.support import BOUND, DROVER, clean_env
from support.otlp import Collector

from drover.config.settings import load_config
from drover.errors import ConfigError
from drover.telemetry import Telemetry, sdk_tracer_provider, traces_wanted
from drover.testing.server import FakeLLMServer


@pytest.mark.parametrize(
    ("asked", "environ", "wanted"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {"OTEL_TRACES_EXPORTER": "otlp"}, True),
        (True, {"OTEL_TRACES_EXPORTER": "none"}, False),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        (False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        (True, {"OTEL_SDK_DISABLED": "true"}, False),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ],
)
def test_traces_are_on_when_asked(asked: bool, environ: dict[str, str], wanted: bool) -> None:
    assert traces_wanted(asked, environ) is wanted


def test_nothing_on_is_no_telemetry() -> None:
    assert Telemetry.from_env(environ={}) is None


def test_capture_is_opt_in() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "console"}
    off = Telemetry.from_env(environ=environ)
    on = Telemetry.from_env(
        environ={**environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    )
    assert off is not None and not off.capture_content
    assert on is not None and on.capture_content


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "unknown exporter 'jaeger'"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "unsupported protocol 'http/json'"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "opentelemetry-exporter-otlp-proto-grpc"),
    ],
)
def test_what_cannot_be_exported_is_one_clear_error(environ: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        sdk_tracer_provider(environ)


def test_the_config_file_says_otel_and_log_format(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('otel = true\nlog_format = "json"\n')
    config = load_config(path, env={})
    assert config.otel and config.log_format == "json"
    path.write_text('otel = "yes"\n')
    with pytest.raises(ConfigError, match="'otel' must be true or false"):
        load_config(path, env={})
    path.write_text('log_format = "xml"\n')
    with pytest.raises(ConfigError, match="'log_format' must be one of text, json"):
        load_config(path, env={})


def test_headless_exports_its_spans_before_it_exits(
    collector: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "hi"})
    env = clean_env(**collector.env())
    env["OTEL_BSP_SCHEDULE_DELAY"] = "60000"  # nothing goes out but at the exit's flush
    run = subprocess.run(
        [
            *DROVER,
            "-p",
            "hello",
            "--otel",
            "--model",
            "anthropic:test",
            "--base-url",
            fake_llm.base_url,
            "--db",
            str(tmp_path / "journal.db"),
            "--workdir",
            str(tmp_path),
            "--sandbox",
            "off",
        ],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=BOUND,
    )
    assert run.returncode == 0, run.stderr
    spans = collector.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    assert {s.name for s in spans} == {"invoke_agent drover", "chat test"}


def test_traces_without_the_extra_say_how_to_get_it(tmp_path: Path) -> None:
    # The SDK cannot be imported (``opentelemetry`` is a namespace package: a portion
    # first on the path whose ``sdk`` fails to import hides the installed one).
    blocker = tmp_path / "block" / "opentelemetry" / "sdk"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no sdk here')")
    env = clean_env(OTEL_TRACES_EXPORTER="otlp", PYTHONPATH=str(tmp_path / "block"))
    run = subprocess.run(
        [*DROVER, "-p", "hello", "--model", "anthropic:test", "--base-url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=BOUND,
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "drover: error: traces need the OpenTelemetry SDK: pip install 'drover[otel]'"
    )
