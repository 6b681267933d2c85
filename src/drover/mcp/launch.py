"""Where a stdio MCP server starts, and with what environment: never in code the workdir holds.

A stdio server is a program run with the user's full rights, outside ``bash``'s sandbox. What
it loads must not come from the working directory unless the user chose that: ``python3 -m
NAME`` imports ``NAME.py`` from its current directory first, ``npx -y PKG`` runs the
``node_modules/.bin`` of the directory it starts in, and a relative or workdir entry of
``PATH`` makes a plain ``node`` the repository's. A cloned repository, or a file a sandboxed
command wrote, would otherwise run with the user's rights — even under ``--permission-mode
deny``, since starting a server asks nobody. So:

* a server's ``cwd``, when its entry names one, is where it starts (relative to the file that
  defines it; for the library's ``mcp_servers``, to the workdir): the user wrote it;
* otherwise a server of a project's file (``.mcp.json``, whose servers the command line starts
  only once approved) starts in that file's directory — the project it belongs to;
* every other server (the user-level ``mcp.json``, ``--mcp-config``, ``mcp_servers``) starts in
  :func:`neutral_dir`, an empty directory of drover's own (mode 700, in its data directory,
  which sandboxed commands can neither see nor write);
* the environment is the few variables the MCP SDK passes on (``HOME``, ``LOGNAME``, ``PATH``,
  ``SHELL``, ``TERM``, ``USER``: nothing like ``PYTHONPATH`` or ``NODE_PATH``) and the entry's
  ``env``; ``PATH`` loses every entry that is relative (it would be looked up from the server's
  directory) or lies in the workdir — unless the workdir is the home directory or holds it:
  commands that may write there may write the shell's start-up files anyway, and the user's
  own tools (``~/.local/bin``, ``~/.nvm``) must stay found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from drover.config.private import private_dir
from drover.mcp.config import McpServerConfig

#: drover's environment variables a server gets (the MCP SDK's own choice), before its ``env``.
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


def neutral_dir() -> Path:
    """Where servers that name no directory of theirs start (see the module docstring)."""
    return Path(platformdirs.user_data_dir("drover")) / "mcp-cwd"


@dataclass(frozen=True, slots=True)
class Launch:
    """How one stdio server is started."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: Path


def launch_of(
    config: McpServerConfig,
    workdir: Path,
    *,
    neutral: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Launch:
    """How ``config`` starts for an agent in ``workdir`` (the neutral directory is made when
    it is the one chosen)."""
    environ = os.environ if environ is None else environ
    root = workdir.resolve()
    if config.cwd is not None:
        cwd = root / config.cwd  # (an absolute cwd stays itself)
    elif config.project_dir is not None:
        cwd = Path(config.project_dir)
    else:
        cwd = private_dir(neutral or neutral_dir())
    env = {
        name: environ[name]
        for name in INHERITED
        if name in environ and not environ[name].startswith("()")  # (a shell function)
    }
    if "PATH" in env:
        env["PATH"] = outside_path(env["PATH"], None if _holds_home(root, environ) else root)
    env.update(config.env)
    return Launch(command=config.command, args=config.args, env=env, cwd=cwd)


def _holds_home(workdir: Path, environ: Mapping[str, str]) -> bool:
    """Whether the workdir is the home directory or holds it. Commands that may write there
    may write the shell's start-up files too: nothing is kept from them by a ``PATH``, and the
    user's own tools (``~/.local/bin``, ``~/.nvm``) must stay found."""
    home = environ.get("HOME")
    if not home:
        return False
    try:
        resolved = Path(home).resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == workdir or resolved.is_relative_to(workdir)


def outside_path(path: str, workdir: Path | None) -> str:
    """``PATH`` without its relative entries and those in ``workdir`` (when given)."""
    kept = []
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if workdir is None:
            kept.append(entry)
            continue
        try:
            # As written too: a link in the workdir may lead elsewhere now and back later.
            spellings = (Path(os.path.normpath(entry)), Path(entry).resolve())
        except (OSError, RuntimeError):
            continue
        if any(p == workdir or p.is_relative_to(workdir) for p in spellings):
            continue
        kept.append(entry)
    return os.pathsep.join(kept)
