"""The wheel installs anywhere: ``python -m build`` makes an sdist and a wheel from it, the wheel
goes into a fresh virtual environment outside the checkout, and the installed ``drover`` runs
``--version``, ``demo`` and ``serve`` (the web page and every one of its static files load over
HTTP) with nothing of the checkout on its path.

Slow (a build and an install: about half a minute), and real: it is how a user gets drover.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import httpx2
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the package needs beside its modules (``[tool.setuptools.package-data]``).
DATA_FILES = (
    "drover/py.typed",
    "drover/testing/scenarios/demo.yaml",
    "drover/server/static/index.html",
    "drover/server/static/app.js",
    "drover/server/static/style.css",
)


def _project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The built wheel installed into a new venv: (its bin directory, an environment)."""
    top = tmp_path_factory.mktemp("wheel")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY")
        and k not in ("PYTHONPATH", "VIRTUAL_ENV", "DROVER_DB", "DROVER_MODEL", "DROVER_CONFIG")
    }
    env.update(XDG_DATA_HOME=str(top / "data"), XDG_CONFIG_HOME=str(top / "config"))
    # From a copy of the files git would commit: nothing generated in the checkout (an old
    # egg-info's file list) can fill in for a file the package data rules leave out.
    source = top / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (os.fsdecode(n) for n in listed)):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = top / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)], cwd=top, env=env)
    (wheel,) = dist.glob("drover-*.whl")
    (sdist,) = dist.glob("drover-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(DATA_FILES) <= names, set(DATA_FILES) - names
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {f"src/{name}" for name in DATA_FILES} <= members
    venv = top / "venv"
    # A venv without pip of its own (ensurepip's install of pip is seconds, and drover needs no
    # pip): this environment's pip installs into it (``--python``), as the venv's would.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=top, env=env)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    pip += ["install", "--quiet"]
    _run([*pip, "-c", str(ROOT / "constraints.txt"), str(wheel)], cwd=top, env=env)
    return venv / "bin", env


def test_the_installed_package_is_not_the_checkout(installed: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = installed
    where = _run(
        [str(bin_dir / "python"), "-c", "import drover; print(drover.__file__)"],
        cwd=bin_dir.parent,
        env=env,
    )
    assert Path(where.strip()).is_relative_to(bin_dir.parent)
    version = _run([str(bin_dir / "drover"), "--version"], cwd=bin_dir.parent, env=env)
    assert version == f"drover {_project_version()}\n"


def test_the_installed_demo_runs(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    argv = [str(bin_dir / "drover"), "demo", "--workdir", str(tmp_path)]
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "ended incomplete; nothing was lost" in out
    assert "final status: completed" in out


def _listening(proc: subprocess.Popen[bytes], *, timeout: float) -> str:
    """The URL ``drover serve`` says it listens on (it prints the line once it accepts)."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if ready and not chunk:
            break  # it exited
        seen += chunk
        if found := re.search(rb"listening on (http://\S+)", seen):
            return found.group(1).decode()
    pytest.fail(f"drover serve did not start:\n{seen.decode(errors='replace')}")


def test_the_installed_server_serves_the_web_page(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    argv = [str(bin_dir / "drover"), "serve", "--port", "0", "--db", str(tmp_path / "serve.db")]
    # No model call is made: any base URL lets it start without a key.
    argv += ["--model", "anthropic:none", "--base-url", "http://127.0.0.1:9"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        base = _listening(proc, timeout=60)
        site = next((bin_dir.parent / "lib").glob("python3*/site-packages/drover"))
        static = sorted(p.name for p in (site / "server" / "static").iterdir())
        assert {"index.html", "app.js", "style.css"} <= set(static)
        with httpx2.Client(base_url=base, timeout=30) as client:
            page = client.get("/")
            assert page.status_code == 200
            assert '<script type="module" src="static/app.js">' in page.text
            for name in static:
                got = client.get(f"/static/{name}")
                assert got.status_code == 200, name
                assert got.content == (site / "server" / "static" / name).read_bytes(), name
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)  # (drains and closes the pipe)
    assert proc.returncode == 0, rest
