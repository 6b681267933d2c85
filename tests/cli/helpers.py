"""Running ``drover`` as a user does: a real subprocess, a clean environment, the fake server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from drover.testing.server import FakeLLMServer

DROVER = [sys.executable, "-m", "drover.cli.main"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("DROVER_DB", None)
    env["DROVER_CONFIG"] = "/nonexistent/drover-config.toml"
    env.update(extra)
    return env


def run_drover(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    return subprocess.run(
        [*DROVER, *args],
        capture_output=True,
        text=True,
        env=env or clean_env(ANTHROPIC_API_KEY="test"),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def base_args(server: FakeLLMServer, tmp_path: Path) -> list[str]:
    return [
        "--model",
        "anthropic:test",
        "--base-url",
        server.base_url,
        "--db",
        str(tmp_path / "journal.db"),
        "--workdir",
        str(tmp_path),
        "--permission-mode",
        "allow",
    ]
