"""The frameworks' own clients of the Responses door, run as their users run them: the examples
``docs/doors.md`` shows (``examples/responses_*``, included in the page as they are) and the
scripts in ``frameworks/`` — the Python ones with this interpreter (``openai-agents`` and
``pydantic-ai-slim`` are dev dependencies), the Node ones on the packages
``frameworks/package-lock.json`` pins, which ``scripts/ci-deps`` installs into
``.cache/npm-frameworks`` (skipped, saying so, without them; failed under
``DROVER_REQUIRE_NODE=1``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..support import BOUND, clean_env
from .support import ROOT, require_node_packages

EXAMPLES = ROOT / "examples"
SCRIPTS = Path(__file__).parent / "frameworks"
NODE_MODULES = ROOT / ".cache" / "npm-frameworks" / "node_modules"


def run_client(script: Path, url: str, token: str, tmp: Path) -> str:
    """What ``script`` (``.py`` or ``.mjs``) prints, run against the server at ``url`` with
    ``token`` (``DROVER_URL``, ``DROVER_TOKEN``); the test fails when it fails."""
    if script.suffix == ".mjs":
        require_node_packages(
            NODE_MODULES, "@openai/agents/package.json", "the frameworks of the door's tests (npm)"
        )
        # A script imports its packages by name, as its users write it: from a folder whose
        # node_modules are the installed ones.
        place = tmp / f"node-{script.stem}"
        place.mkdir()
        (place / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
        argv = ["node", str(shutil.copy(script, place))]
    else:
        argv = [sys.executable, str(script)]
    done = subprocess.run(
        argv,
        env=clean_env(DROVER_URL=url, DROVER_TOKEN=token),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
