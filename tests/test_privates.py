"""No module of drover reaches into another's privates.

A name that starts with one underscore is private to the module that defines it. This test
walks every module of ``src/drover`` and fails, listing each offender, when one

- reads or writes ``x._name`` where ``x`` is not ``self``, ``cls`` or ``super()`` and ``_name``
  is not defined in the same module (as a function, class, attribute, variable or slot);
- imports a private name from another drover module (``from drover.x import _name``);
- names a private attribute by string (``getattr(x, "_name")`` and its kin) on something other
  than ``self`` or ``cls``.

What another module needs is a public name (a method, a protocol, a parameter): the store's
connection, the cluster's claims and the journal's write API are reached that way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drover

SRC = Path(drover.__file__).parent

#: ``path:name`` pairs let through, each with the reason it cannot be otherwise.
ALLOWED: dict[str, str] = {}

_BY_STRING = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """Every name the module defines: functions, classes, assigned attributes and variables,
    class-level annotations, imports, ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return names


def _own(node: ast.expr) -> bool:
    """Whether ``node`` is the object itself: ``self``, ``cls`` or ``super()``."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
    )


def reach_ins(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each reach into another module's privates in ``source``."""
    tree = ast.parse(source)
    defined = _defined(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if _private(node.attr) and node.attr not in defined and not _own(node.value):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drover"):
            found += [
                (node.lineno, f"from {node.module} import {alias.name}")
                for alias in node.names
                if _private(alias.name)
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _BY_STRING
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in defined
            and not _own(node.args[0])
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _offenders() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, what in reach_ins(path.read_text(encoding="utf-8")):
            name = what.rsplit(".", 1)[-1].split()[-1]
            if f"{rel}:{name}" not in ALLOWED:
                out.append(f"{rel}:{line}: {what}")
    return out


def test_no_module_reaches_into_another_modules_privates() -> None:
    offenders = _offenders()
    assert not offenders, "private names used outside their module:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("store._perform(plan)", ["store._perform"]),
        ("def f(s):\n    return s._select('x')", ["s._select"]),
        ("from drover.store.sql.log import _row", ["from drover.store.sql.log import _row"]),
        ("getattr(store, '_conn')", ["getattr(store, '_conn')"]),
        # Its own privates, and another object's of a class this module defines, are its own.
        ("class A:\n    def f(self, other):\n        return self._x + other._y\n    _y = 1", []),
        ("class A:\n    __slots__ = ('_n',)\ndef f(a):\n    return a._n", []),
        ("class B(A):\n    def f(self):\n        return super()._g()", []),
        ("x.__class__, x.__dict__", []),
    ],
)
def test_the_check_finds_what_it_should(source: str, expected: list[str]) -> None:
    assert [what for _, what in reach_ins(source)] == expected
