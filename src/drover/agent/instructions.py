"""Project instructions: the ``AGENTS.md`` (or ``CLAUDE.md``) files a coding agent reads.

Where they are looked for, in this order:

1. the working directory, then each parent up to the repository root (the nearest directory
   with a ``.git``); outside a repository, the working directory alone (a walk up to ``/``
   would pick up whatever lies in the home directory);
2. the user-level file next to drover's ``config.toml`` (``~/.config/drover/AGENTS.md``).

In each place ``AGENTS.md`` is read, and ``CLAUDE.md`` only when there is no ``AGENTS.md``.
They join the system prompt in that order (the workdir's first), each under a heading naming
its file; the prompt says that the file nearest the working directory wins where they
disagree. A file above :data:`MAX_CHARS` characters is cut there (saying so); one that cannot
be read as UTF-8 text is skipped with a warning. Nothing here runs anything: the files are
text the model reads.

A project's file is read only when it resolves inside the project (the repository root, or the
working directory outside a repository) and is a regular file of at most 1 MiB
(:func:`~drover.tools.project_files.read_project_file`): a link to ``/proc/self/environ`` or into
``~/.ssh`` is refused with a warning, and so is a FIFO. The user-level file is the user's own
and may lead anywhere. What the files say is no more trusted than whoever could write them: a
repository's author, or the model itself in an earlier turn (``AGENTS.md`` is an ordinary file
of the working directory); they shape what the model is told, never what it may do.

The system prompt is drover's own (or the ``system_prompt`` that replaces it), then the
instructions, then an ``append_system_prompt`` (:class:`PromptParts`). ``/context`` in the
REPL shows each part (:meth:`PromptParts.describe`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from drover.config.settings import default_config_path
from drover.tools.project_files import ProjectFileRefused, read_project_file, read_user_file

#: The names read in each place, the first found winning.
NAMES = ("AGENTS.md", "CLAUDE.md")
#: Characters of one file kept in the prompt (about 16k tokens).
MAX_CHARS = 64_000

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InstructionFile:
    """One instruction file as it joins the prompt."""

    path: Path
    text: str
    #: Characters of the file (``text`` may be cut: :data:`MAX_CHARS`).
    chars: int
    #: ``project`` (the workdir or a parent) or ``user`` (next to config.toml).
    scope: str

    @property
    def truncated(self) -> bool:
        return self.chars > len(self.text)


def repository_root(workdir: Path) -> Path | None:
    """The nearest directory at or above ``workdir`` holding a ``.git`` (None: none)."""
    for directory in (workdir, *workdir.parents):
        if (directory / ".git").exists():
            return directory
    return None


def instruction_places(workdir: Path, user_dir: Path | None = None) -> list[tuple[Path, str]]:
    """The directories looked in, in order, with their scope."""
    root = repository_root(workdir)
    places: list[tuple[Path, str]] = [(workdir, "project")]
    if root is not None and root != workdir:
        for parent in workdir.parents:
            places.append((parent, "project"))
            if parent == root:
                break
    places.append((user_dir or default_config_path().parent, "user"))
    return places


def find_instructions(workdir: Path, user_dir: Path | None = None) -> list[InstructionFile]:
    """The instruction files of ``workdir``, in the order they join the prompt."""
    found: list[InstructionFile] = []
    seen: set[Path] = set()
    project = repository_root(workdir) or workdir
    for directory, scope in instruction_places(workdir, user_dir):
        for name in NAMES:
            path = directory / name
            if not os.path.lexists(path):
                continue
            try:
                where = path.resolve()
            except (OSError, RuntimeError):
                where = path
            if where not in seen:  # (the user-level directory may be a parent too)
                seen.add(where)
                loaded = _read(path, scope, project)
                if loaded is not None:
                    found.append(loaded)
            break
    return found


def _read(path: Path, scope: str, project: Path) -> InstructionFile | None:
    try:
        data = read_project_file(path, project) if scope == "project" else read_user_file(path)
        if data is None:
            return None
        text = data.decode("utf-8")
    except ProjectFileRefused as exc:
        log.warning("instructions skipped: %s", exc)
        return None
    except UnicodeDecodeError as exc:
        log.warning("instructions %s skipped: %s", path, exc)
        return None
    return InstructionFile(path=path, text=text[:MAX_CHARS], chars=len(text), scope=scope)


def instructions_section(files: Sequence[InstructionFile]) -> str:
    """The instructions as a part of the system prompt ("" without any)."""
    if not files:
        return ""
    parts = [
        "Instructions from the project and the user follow, each under the path of its file; "
        "where they disagree, the one nearer the working directory wins (the user's own file "
        "comes last and yields to the project's)."
    ]
    for item in files:
        cut = (
            f"\n[cut: the file has {item.chars:,} characters; only the first {MAX_CHARS:,} are "
            "shown]"
            if item.truncated
            else ""
        )
        parts.append(f"# Instructions from {item.path}\n\n{item.text.strip()}{cut}")
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class PromptParts:
    """The parts of an agent's system prompt: ``base`` (drover's, or the ``system_prompt``
    that replaced it — ``replaced``), the instruction files, then ``append``."""

    base: str
    replaced: bool = False
    files: tuple[InstructionFile, ...] = ()
    append: str | None = None

    def text(self) -> str:
        """The whole system prompt."""
        parts = [self.base.strip(), instructions_section(self.files), (self.append or "").strip()]
        return "\n\n".join(part for part in parts if part)

    def describe(self, chars_per_token: float) -> list[str]:
        """What ``/context`` says of the prompt: each part, its size and where it is from."""

        def size(chars: int) -> str:
            return f"{chars:,} characters, ~{round(chars / chars_per_token):,} tokens"

        origin = "replaced by --system-prompt" if self.replaced else "drover's own"
        lines = [f"system prompt ({origin}): {size(len(self.base))}"]
        if not self.files:
            lines.append(
                "instructions: none (AGENTS.md or CLAUDE.md in the workdir, its parents up to "
                "the repository root, or next to config.toml)"
            )
        for item in self.files:
            cut = f", cut from {item.chars:,}" if item.truncated else ""
            lines.append(f"instructions ({item.scope}): {item.path} — {size(len(item.text))}{cut}")
        if self.append:
            lines.append(f"appended (--append-system-prompt): {size(len(self.append))}")
        return lines
