"""Tab completion at the REPL prompt: slash commands, models after ``/model``, session ids
after ``/resume``, and paths under the working directory (never outside it)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from drover.agent.agent import Agent
from drover.config.settings import list_models

#: Entries of one directory offered at most, so a huge directory cannot stall the prompt.
MAX_ENTRIES = 200

COMMANDS = (
    "/help",
    "/model",
    "/tokens",
    "/compact",
    "/sessions",
    "/resume",
    "/rename",
    "/rm",
    "/delete",
    "/export",
    "/clear",
    "/pending",
    "/discard",
    "/permissions",
    "/fork",
    "/rewind",
    "/exit",
)


def path_completions(workdir: Path, word: str) -> list[str]:
    """Paths under ``workdir`` that complete ``word`` (directories end with ``/``)."""
    head, slash, prefix = word.rpartition("/")
    try:
        base = (workdir / (head + slash if slash else ".")).resolve()
    except (OSError, RuntimeError, ValueError):
        return []
    if not base.is_relative_to(workdir) or not base.is_dir():
        return []
    found: list[str] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        if entry.name.startswith(".") and not prefix.startswith("."):
            continue
        found.append(f"{head}{slash}{entry.name}{'/' if entry.is_dir() else ''}")
        if len(found) >= MAX_ENTRIES:
            break
    return found


class ReplCompleter(Completer):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for name in COMMANDS:
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text))
            return
        if text.startswith("/model ") and " " not in text[7:]:
            typed = text[7:]
            for spec, _source in list_models(self.agent.config):
                if spec.startswith(typed):
                    yield Completion(spec, start_position=-len(typed))
            return
        if not text or text[-1].isspace():
            return
        word = text.split()[-1]
        for path in path_completions(self.agent.workdir, word):
            yield Completion(path, start_position=-len(word))
