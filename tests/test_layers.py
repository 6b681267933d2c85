"""The import direction of ../shared/ARCHITECTURE.md, enforced: each layer imports only the
layers below it. Imports inside functions count too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drover

SRC = Path(drover.__file__).parent

#: Layer of each top-level module or package of drover, bottom (0) to top.
LAYERS: dict[str, int] = {
    # the neutral core: types, conversation state, no I/O
    "errors": 0,
    "messages": 0,
    "events": 0,
    "model_stream": 0,
    "conversation": 0,
    "accumulate": 0,
    "sinks": 0,
    "summaries": 0,
    # text from others made safe to show on a terminal
    "visible": 0,
    "config": 0,
    "config_tables": 0,
    "config_providers": 0,
    "expand": 0,
    # what only its owner may read: drover's directories and files
    "private": 0,
    "rules": 0,
    "shell": 0,
    "output": 0,
    # adapters and the journal's domain, side by side: none imports another
    "providers": 1,
    "tools": 1,
    "journal": 1,
    # the journal's SQL backends, over its protocol
    "store": 2,
    # the project files drover reads itself, confined as the tools' paths are (over tools)
    "project_files": 2,
    # the system prompt's files (AGENTS.md), read from the working directory up
    "instructions": 2,
    # images read from files into prompts
    "images": 1,
    # the working directory a run is given, checked
    "workdir": 1,
    # one turn
    "permissions": 3,
    "compact": 3,
    "toolrun": 3,
    "hooks": 3,
    "loop": 3,
    # the model call a turn has in progress, and what is kept of it when the turn breaks
    "loop_step": 3,
    "session": 3,
    "workers": 3,
    # MCP servers' tools (over the tool seam and the config)
    "mcp": 3,
    # what an operator sees of turns: spans, metrics, log ids (over events and the journal)
    "telemetry": 3,
    # turns over the journal, the handle of one running in this process, and the queued
    # messages it runs after them
    "runner": 4,
    "running": 4,
    "turn_queue": 4,
    # sessions held between turns (a rewind, a message that replaces the running turn)
    "session_hold": 4,
    # the library's entry point, over the runner: the agent, its session handles and streams
    "result": 4,
    "handle": 5,
    "stream": 5,
    "resources": 5,
    "agent": 5,
    # the session handles an open agent keeps
    "agent_sessions": 5,
    "control": 5,
    # front doors, what several server processes share, and the test kit
    "cli": 6,
    "server": 6,
    "cluster": 6,
    "testing": 6,
}
#: Peers that may import each other (the front doors share the runtime; the server and the
#: cluster it runs in serve each other: the relay feeds the server's hub, the server follows it).
PEERS = {
    frozenset({"runner", "turn_queue"}),
    frozenset({"cli", "server"}),
    frozenset({"cli", "testing"}),
    frozenset({"cli", "cluster"}),
    frozenset({"server", "cluster"}),
}


def _module_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name.split(".")[1] for name in found if name.startswith("drover.")}


def _unit(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if _unit(p) != "__init__")


def test_every_module_has_a_layer() -> None:
    units = {_unit(p) for p in _sources()}
    assert units <= set(LAYERS), f"place these in LAYERS: {sorted(units - set(LAYERS))}"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    unit = _unit(path)
    level = LAYERS[unit]
    wrong = []
    for target in _module_imports(path):
        if target == unit or target not in LAYERS:
            continue
        if frozenset({unit, target}) in PEERS:
            continue
        above = LAYERS[target] > level
        sideways = LAYERS[target] == level and level in (1, 6)
        if above or sideways:
            wrong.append(target)
    assert not wrong, f"{path.relative_to(SRC)} imports {sorted(wrong)} (layer {level})"


#: What the journal's domain never imports: it is independent of SQL and of its backends.
NOT_IN_THE_JOURNAL = ("sqlite3", "psycopg", "psycopg_pool", "drover.store")


@pytest.mark.parametrize(
    "path", sorted((SRC / "journal").glob("*.py")), ids=lambda p: str(p.relative_to(SRC))
)
def test_the_journal_imports_no_sql(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    wrong = sorted(
        name
        for name in names
        for banned in NOT_IN_THE_JOURNAL
        if name == banned or name.startswith(banned + ".")
    )
    assert not wrong, f"{path.relative_to(SRC)} imports {wrong}"
