"""The LiteLLM proxy (PyPI ``litellm[proxy]``, unpatched) run by a test as its own process, in
front of drover's fake model, with the configuration ``docs/gateways.md`` documents.

LiteLLM pins many packages, none of which may enter drover's environment: it lives in a venv of
its own, ``.cache/litellm``, which ``scripts/ci-deps`` builds from
``tests/providers/litellm/requirements.txt``. Where that venv is missing the tests skip, saying
so (``-ra`` prints it); under ``DROVER_REQUIRE_LITELLM=1`` (CI) they fail instead.

:func:`documented_blocks` reads a section's code blocks of that page, so the tests run exactly
what a reader copies; :func:`start_litellm` changes only what must differ on a test machine —
every model's ``api_base``, aimed at the fake server — writes the proxy's config, starts
``litellm --config`` on a free loopback port with its network lookups off (the model cost map
bundled with the package) and no wait before its own retries, and returns once its liveliness
probe answers;
:meth:`LiteLLM.stop` stops it by its pid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from drover.testing.server import FakeLLMServer

from .ports import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "litellm"
PAGE = ROOT / "docs" / "gateways.md"
REQUIRE_ENV = "DROVER_REQUIRE_LITELLM"
#: The key the tests' proxy takes (its ``LITELLM_MASTER_KEY``).
MASTER_KEY = "sk-litellm-test-5e1c0b7a93d2"
#: The failure bound of the proxy's start (its imports take ~10 s on an idle machine).
START_BOUND = 180.0
STOP_BOUND = 20.0


def litellm_binary() -> Path:
    """The proxy's program in its venv; skips the test when it is not installed, or fails it
    under ``DROVER_REQUIRE_LITELLM=1``."""
    binary = VENV / "bin" / "litellm"
    if binary.exists():
        return binary
    why = f"the LiteLLM proxy is not installed in {VENV}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1): run scripts/ci-deps", pytrace=False)
    pytest.skip(f"GATEWAY TESTS SKIPPED: {why} — run scripts/ci-deps")


def documented_blocks(section: str, language: str) -> list[str]:
    """The ``language`` code blocks of the section of ``docs/gateways.md`` headed
    ``## {section}``, in order."""
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    found = [p for p in parts if p.startswith(section + "\n")]
    assert len(found) == 1, f"{PAGE} must have one section '## {section}'"
    fence = rf"^```{re.escape(language)}\n(.*?)^```$"
    return [str(block) for block in re.findall(fence, found[0], re.M | re.S)]


@dataclass
class LiteLLM:
    """A running proxy."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        """The proxy's root: Anthropic's base URL; ``/v1`` under it for the OpenAI APIs."""
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM (uvicorn's graceful stop), SIGKILL when it hangs; by pid."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_BOUND)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def aimed_at(config: dict[str, Any], upstream: FakeLLMServer) -> dict[str, Any]:
    """The proxy's ``config``, every model's upstream the fake server (Anthropic models at its
    root, OpenAI ones under ``/v1``)."""
    models = config["model_list"]
    assert models, "the documented LiteLLM config names no model"
    for entry in models:
        params = entry["litellm_params"]
        assert "api_base" not in params, "the documented config names a real upstream"
        anthropic = str(params["model"]).startswith("anthropic/")
        params["api_base"] = upstream.base_url if anthropic else upstream.openai_base_url
    return config


def start_litellm(root: Path, config: dict[str, Any]) -> LiteLLM:
    """The proxy serving ``config`` on a free loopback port, once it answers its probe."""
    binary = litellm_binary()
    root.mkdir(parents=True, exist_ok=True)
    path = root / "litellm.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log = root / "litellm.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        # The model cost map shipped in the package, not the one LiteLLM would download.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # Its retries at once: the tests count them, they need not wait for them.
        "INITIAL_RETRY_DELAY": "0",
        "JITTER": "0",
        "LITELLM_MASTER_KEY": MASTER_KEY,
        # The upstream keys the documented config reads (the fake server takes any).
        "ANTHROPIC_API_KEY": "upstream-anthropic-key",
        "OPENAI_API_KEY": "upstream-openai-key",
        "NO_PROXY": "*",
    }
    argv = [str(binary), "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root
        )
    proxy = LiteLLM(proc=proc, port=port, log=log)
    deadline = time.monotonic() + START_BOUND
    while not _alive(proxy):
        if proc.poll() is not None:
            pytest.fail(f"litellm exited ({proc.returncode}):\n{proxy.output()[-3000:]}")
        if time.monotonic() > deadline:
            proxy.stop()
            pytest.fail(f"litellm did not answer on {port}:\n{proxy.output()[-3000:]}")
        time.sleep(0.1)  # polling a readiness probe, bounded above
    return proxy


def _alive(proxy: LiteLLM) -> bool:
    try:
        answer = httpx2.get(f"{proxy.base_url}/health/liveliness", timeout=2)
    except httpx2.HTTPError:
        return False
    return answer.status_code == 200
