"""Approval of a project's MCP servers: a workdir's ``.mcp.json`` runs nothing unasked.

The servers of the workdir's ``.mcp.json`` are programs a repository names; a repository
someone cloned must not run them just because drover started in it. So the command line
(``-p``, the REPL, ``serve``, ``drover mcp list``) starts a project server only once it is
approved — the user-level ``mcp.json`` and ``--mcp-config`` files are the user's own, and an
:class:`~drover.agent.agent.Agent` runs what its caller gives it. A server is approved

* by the config file: ``[mcp] approve_project = true`` (every project's servers) or a list of
  server names;
* or by an answer kept in drover's user data (``mcp-approvals.json``), keyed by the workdir and
  the SHA-256 of the file's content: a file that changed asks again. The REPL asks once per
  project and keeps the answer, yes or no; ``drover mcp approve`` keeps a yes and ``drover mcp
  revoke`` forgets the answer.

``-p`` and ``serve`` never ask: they start what is approved and say on stderr which servers
were skipped and how to approve them. The servers taken are handed on as an
:class:`~drover.mcp.config.McpFile` with the content's hash, so a file changed between the
approval and the start is refused rather than run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from drover.config.private import private_dir
from drover.config.settings import Config
from drover.mcp.config import (
    PROJECT_FILE,
    McpFile,
    McpServerConfig,
    parse_config_bytes,
    parse_server,
    read_config_bytes,
)
from drover.tools.project_files import ProjectFileRefused

log = logging.getLogger(__name__)

APPROVALS_FILE = "mcp-approvals.json"
#: How to approve, as the notes say it.
HOW_TO_APPROVE = (
    "approve them with `drover mcp approve{workdir}`, or for every project with "
    "[mcp] approve_project = true (or a list of names) in config.toml"
)


def approvals_path() -> Path:
    """Where the answers are kept: drover's user data directory (hidden from ``bash``)."""
    return Path(platformdirs.user_data_dir("drover")) / APPROVALS_FILE


@dataclass(frozen=True, slots=True)
class Answer:
    """What was answered for one project file's content."""

    approved: frozenset[str]
    declined: frozenset[str]


class Approvals:
    """The kept answers: ``{workdir: {"sha256", "approved", "declined", "at"}}`` in a JSON file.

    A file that cannot be read counts as no answers (nothing is approved by accident); writes
    replace it atomically, one process at a time."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or approvals_path()

    def lookup(self, workdir: Path, sha256: str) -> Answer | None:
        """The answer for this workdir's file with this content (None: none kept)."""
        entry = self._read().get(str(workdir))
        if not isinstance(entry, dict) or entry.get("sha256") != sha256:
            return None
        return Answer(
            approved=frozenset(_names(entry.get("approved"))),
            declined=frozenset(_names(entry.get("declined"))),
        )

    def record(self, workdir: Path, sha256: str, approved: set[str], declined: set[str]) -> None:
        """Keep an answer for this workdir's file with this content (replacing any other)."""
        with self._locked():
            projects = self._read()
            projects[str(workdir)] = {
                "sha256": sha256,
                "approved": sorted(approved),
                "declined": sorted(declined),
                "at": time.time(),
            }
            self._write(projects)

    def forget(self, workdir: Path) -> bool:
        """Drop the answer kept for this workdir (whether there was one)."""
        with self._locked():
            projects = self._read()
            found = projects.pop(str(workdir), None) is not None
            if found:
                self._write(projects)
            return found

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        projects = data.get("projects") if isinstance(data, dict) else None
        return dict(projects) if isinstance(projects, dict) else {}

    def _write(self, projects: dict[str, Any]) -> None:
        private_dir(self.path.parent)
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".mcp-approvals.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"version": 1, "projects": projects}, out, indent=2)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.path.parent)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _names(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class ProjectServers:
    """A workdir's ``.mcp.json`` and which of its servers are approved."""

    workdir: Path
    path: Path
    sha256: str
    #: Every server of the file, as configured (for showing: nothing secret in ``display``).
    servers: tuple[McpServerConfig, ...]
    approved: frozenset[str]
    declined: frozenset[str]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    @property
    def undecided(self) -> list[str]:
        """Servers nobody approved or declined yet (the REPL asks about these)."""
        return [n for n in self.names if n not in self.approved and n not in self.declined]

    @property
    def skipped(self) -> list[str]:
        """Servers that do not start."""
        return [n for n in self.names if n not in self.approved]

    def file(self) -> McpFile:
        """The file as the agent takes it: the approved servers of this very content."""
        return McpFile(self.path, servers=self.approved, sha256=self.sha256)

    def skip_note(self, workdir_flag: bool = True) -> str:
        """What ``-p``, ``serve`` and the REPL say of the servers that do not start."""
        flag = f" --workdir {self.workdir}" if workdir_flag else ""
        declined = [n for n in self.skipped if n in self.declined]
        why = "declined" if declined and len(declined) == len(self.skipped) else "not approved"
        return (
            f"drover: MCP servers of {self.path} not started ({why}): "
            f"{', '.join(self.skipped)}; {HOW_TO_APPROVE.format(workdir=flag)}"
        )

    def question(self) -> str:
        """The REPL's question about the undecided servers."""
        rows = [f"  {s.name}: {s.display}" for s in self.servers if s.name in self.undecided]
        return (
            f"This project's {PROJECT_FILE} ({self.path}) starts these MCP servers, programs "
            "that run with your rights:\n"
            + "\n".join(rows)
            + "\nStart them? (remembered for this project until the file changes) [y/N] "
        )


def project_servers(
    workdir: Path, config: Config, approvals: Approvals | None = None
) -> ProjectServers | None:
    """The workdir's ``.mcp.json`` with what is approved (None: the workdir has none).
    A file that is broken is a :class:`~drover.errors.ConfigError`, as for any config file."""
    path = workdir / PROJECT_FILE
    if not os.path.lexists(path):
        return None
    try:
        content = read_config_bytes(path)
    except ProjectFileRefused as exc:
        log.warning("MCP servers not started: %s", exc)
        return None
    sha256 = hashlib.sha256(content).hexdigest()
    # Parsed with an empty environment: only the names and the text as written are needed,
    # and nothing of the environment belongs in a question about a file someone else wrote.
    servers = tuple(
        parse_server(name, raw, str(path), {}, file=path)
        for name, raw in parse_config_bytes(content, path).items()
    )
    names = {s.name for s in servers}
    setting = config.mcp_approve_project
    approved = set(names) if setting is True else names & set(setting or ())
    declined: set[str] = set()
    answer = (approvals or Approvals()).lookup(workdir, sha256)
    if answer is not None:
        approved |= names & answer.approved
        declined = (names & answer.declined) - approved
    return ProjectServers(
        workdir=workdir,
        path=path,
        sha256=sha256,
        servers=servers,
        approved=frozenset(approved),
        declined=frozenset(declined),
    )


#: Asks one question and returns the answer typed (None: no answer, e.g. end of input).
Ask = Callable[[str], Awaitable[str | None]]


async def ask_once(
    project: ProjectServers, ask: Ask, approvals: Approvals | None = None
) -> ProjectServers:
    """Ask about the undecided servers (the REPL) and keep the answer, yes or no; the project
    as it stands afterwards."""
    undecided = set(project.undecided)
    if not undecided:
        return project
    answer = await ask(project.question())
    yes = answer is not None and answer.strip().lower() in ("y", "yes")
    approved = (set(project.approved) | undecided) if yes else set(project.approved)
    declined = set(project.declined) | (set() if yes else undecided)
    (approvals or Approvals()).record(project.workdir, project.sha256, approved, declined)
    return ProjectServers(
        workdir=project.workdir,
        path=project.path,
        sha256=project.sha256,
        servers=project.servers,
        approved=frozenset(approved),
        declined=frozenset(declined),
    )


def approve_all(project: ProjectServers, approvals: Approvals | None = None) -> None:
    """``drover mcp approve``: every server of the file as it is now."""
    (approvals or Approvals()).record(project.workdir, project.sha256, set(project.names), set())
