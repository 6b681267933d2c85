"""The house's floors, enforced: each package of drover imports only the packages on floors
below its own, never one beside it, and nothing imports upwards. Imports inside functions count
too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drover

SRC = Path(drover.__file__).parent

#: The floors of the house, bottom to top (see docs/architecture.md); the packages of one
#: floor stand side by side and import none of each other.
FLOORS: list[tuple[str, ...]] = [
    ("errors",),
    # the neutral core: types, events, the stream reducer, conversation state; no I/O
    ("core",),
    # settings, the config file's tables, drover's own private files
    ("config",),
    # adapters: one module per wire protocol; the tools and their sandbox
    ("providers", "tools"),
    # MCP servers' tools (over the tool seam); the test kit: fake LLM servers speaking each
    # wire protocol and a scripted provider
    ("mcp", "testing"),
    # the journal's domain (no SQL), then its SQL backends
    ("journal",),
    ("store",),
    # what an operator sees of turns (over events and the journal)
    ("telemetry",),
    # one turn: loop, step, tool batch, permissions, hooks, compaction
    ("turn",),
    # the one owner of a turn's life: runner, running turns, queue, holds, workers, hub
    ("runtime",),
    # the public surface: Agent, Session, stream, result, rewind
    ("agent",),
    # what several server processes share: claims, relay, takeover, remote stop
    ("cluster",),
    # the front doors: the server, then the command line that also serves it
    ("server",),
    ("cli",),
]
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}


def _module_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "drover":
                found.update(f"drover.{alias.name}" for alias in node.names)
    return {name.split(".")[1] for name in found if name.startswith("drover.")}


def _unit(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if _unit(p) != "__init__")


def test_every_package_has_a_floor() -> None:
    units = {_unit(p) for p in _sources()}
    assert units <= set(FLOOR), f"place these on a floor: {sorted(units - set(FLOOR))}"


def test_the_top_level_holds_only_packages_and_the_error_tree() -> None:
    modules = sorted(p.name for p in SRC.glob("*.py") if p.name != "__init__.py")
    assert modules == ["errors.py"]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    unit = _unit(path)
    wrong = sorted(
        target
        for target in _module_imports(path)
        if target != unit and target in FLOOR and FLOOR[target] >= FLOOR[unit]
    )
    assert not wrong, f"{path.relative_to(SRC)} imports {wrong} (floor {FLOOR[unit]})"


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
