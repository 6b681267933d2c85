"""Permission rules: a tool name, optionally with a glob on the call's main argument.

A rule is written ``NAME`` or ``NAME(GLOB)``::

    read_file               every call of read_file
    bash(git status*)       bash commands that start with "git status"
    bash(npm test)          exactly "npm test"
    write_file(src/**)      writes anywhere under src/
    edit_file(*.md)         edits of Markdown files, in any directory
    mcp__github             every tool of the MCP server "github" (also mcp__github__*)

``NAME`` may hold ``*`` (``mcp__github__get_*``). The glob applies to the call's *main
argument*: ``command`` for ``bash``, ``path`` for the file tools and ``grep``, ``pattern`` for
``glob``, ``prompt`` for ``task``; for any other tool the argument its ``rule_argument``
attribute names, else the first required string property of its input schema. A rule with a
glob never matches a call without that argument. A backslash makes the next character plain
(``bash(ls \\*.py)`` is only ``ls *.py``).

How the glob reads depends on the argument:

* a path (``path``, ``file_path``): ``*`` and ``?`` stay within one directory, ``**`` crosses
  directories, a trailing ``/`` means everything below. A glob without ``/`` matches the file
  name at any depth, as in ``.gitignore`` (``*.md``, ``.env``); one with ``/`` is taken from
  the working directory (``src/**``), or from the root when it starts with ``/`` or ``~``.
  The call's path is made relative to the working directory first (``./src/a.py`` and
  ``/work/src/a.py`` are ``src/a.py``). A path is read both as written and where it leads
  (``targets``: the caller resolves its symbolic links, see
  :func:`drover.turn.permissions.call_targets`): an *allow* rule covers it only when it covers
  both — ``write_file(src/**)`` does not allow ``src/link`` when the link leads to ``.ci/run``
  — and a *deny* rule refuses it when it covers either.
* a command (``command``): read as bash reads it (:mod:`drover.core.shell`). A glob without ``*``
  or ``?`` allows exactly that command (leading and trailing spaces aside). Otherwise an
  *allow* rule covers a command only when it is *plain* — simple commands of plain words
  joined by ``;``, ``&&``, ``||``, ``|`` and newlines, nothing that the parse cannot account
  for, no substitution, subshell or compound command — and the glob covers every one of those
  simple commands, none of which redirects (``>``, ``<``) unless the glob itself has that
  character: ``bash(git status*)`` does not allow ``git status; rm -rf x``, ``git status >
  notes`` nor ``git status #'⏎touch x⏎#'``. A *deny* rule refuses a command when it matches
  any simple command anywhere in it — after ``&&``, inside ``$(…)`` or a subshell, under a
  wrapper such as ``env`` or ``sudo``, in the text of ``bash -c`` or ``eval`` — spelled as
  written or with its quotes removed (:attr:`drover.core.shell.ShellCommand.anywhere`), or any
  part of its text cut at operators, parentheses and backquotes, quoting ignored: better
  refused than run. A hook's scope reads commands as a deny rule does. The check cannot be
  complete (a program can run any text it is given); the sandbox is what contains commands.
* anything else: ``*`` matches anything, ``?`` one character.

Rules come from the config file (``[permissions] allow``/``deny``), the command line
(``--allow``/``--deny``) and a session's "always" answers (:func:`always_rule`); each keeps
where it came from (:attr:`Rule.source`) so ``/permissions`` can say.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import Any, Literal, TypeAlias

from drover.core.shell import parse_command
from drover.errors import ConfigError

ArgumentKind: TypeAlias = Literal["path", "command", "text"]

#: The main argument of the built-in tools.
MAIN_ARGUMENTS: Mapping[str, str] = {
    "bash": "command",
    "read_file": "path",
    "write_file": "path",
    "edit_file": "path",
    "grep": "path",
    "glob": "pattern",
    "task": "prompt",
}
_PATH_KEYS = frozenset({"path", "file_path", "filepath", "file", "filename"})
_COMMAND_KEYS = frozenset({"command", "cmd"})
_NAME = re.compile(r"^[A-Za-z0-9_.*\-]+$")
#: Characters a glob gives a meaning to (escaped in a rule that must match text exactly).
_GLOB_CHARS = frozenset("*?\\")


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule; ``text`` is the rule as written, ``source`` where it came from."""

    text: str
    name: str
    glob: str | None = None
    source: str = ""
    _compiled: dict[ArgumentKind, re.Pattern[str]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def parse(cls, text: str, source: str = "") -> Rule:
        """A rule from its text; :class:`~drover.errors.ConfigError` saying what is wrong."""
        raw = text.strip()
        where = f"{source}: " if source else ""
        name, paren, rest = raw.partition("(")
        name = name.strip()
        if not name or not _NAME.match(name):
            raise ConfigError(
                f"{where}permission rule {text!r}: expected TOOL or TOOL(GLOB), the tool name "
                "of letters, digits, '_', '-', '.' and '*'"
            )
        glob = None
        if paren:
            if not rest.endswith(")"):
                raise ConfigError(f"{where}permission rule {text!r}: missing the closing ')'")
            glob = rest[:-1]
            if not glob.strip():
                raise ConfigError(
                    f"{where}permission rule {text!r}: empty glob (write {name} for every call)"
                )
        return cls(text=raw, name=name, glob=glob, source=source)

    def with_source(self, source: str) -> Rule:
        return Rule(self.text, self.name, self.glob, source)

    def names(self, tool: str) -> bool:
        """Whether the rule is about the tool named ``tool``."""
        if fnmatchcase(tool, self.name):
            return True
        # ``mcp__server`` stands for every tool of that server.
        return self.name.startswith("mcp__") and tool.startswith(self.name + "__")

    def matches(
        self,
        tool: str,
        input: Mapping[str, Any] | None,
        *,
        argument: str | None,
        workdir: str | None = None,
        anywhere: bool = False,
        targets: Sequence[str] | None = (),
    ) -> bool:
        """Whether the rule covers a call of ``tool`` with ``input``. ``argument`` is the
        tool's main argument (:func:`main_argument`); ``anywhere`` reads the call as a deny
        rule and a hook's scope do, else as an allow rule does (module docstring). For a path
        argument, ``targets`` are the absolute paths it leads to (None: it could not be
        resolved, which no allow rule covers; empty: read as written only)."""
        if not self.names(tool):
            return False
        if self.glob is None:
            return True
        if argument is None or input is None:
            return False
        value = input.get(argument)
        if not isinstance(value, str):
            return False
        kind = argument_kind(argument)
        if kind == "path":
            return self._path_matches(value, workdir, targets, anywhere=anywhere)
        if kind == "command":
            return self._command_matches(value, anywhere=anywhere)
        return self._regex("text").fullmatch(value) is not None

    # -- by kind of argument -------------------------------------------------------------------

    def _regex(self, kind: ArgumentKind) -> re.Pattern[str]:
        compiled = self._compiled.get(kind)
        if compiled is None:
            assert self.glob is not None
            compiled = self._compiled[kind] = _glob_regex(self.glob, kind)
        return compiled

    def _path_matches(
        self,
        value: str,
        workdir: str | None,
        targets: Sequence[str] | None,
        *,
        anywhere: bool,
    ) -> bool:
        base = workdir or os.getcwd()
        candidates = [_normalise_path(value, base)]
        if targets is None:
            if not anywhere:
                return False  # where it leads is unknown: no allow rule covers it
        else:
            candidates += [_normalise_path(t, base) for t in targets]
        hits = (self._covers_path(relative, absolute) for relative, absolute in candidates)
        return any(hits) if anywhere else all(hits)

    def _covers_path(self, relative: str | None, absolute: str) -> bool:
        assert self.glob is not None
        glob = self.glob.strip()
        regex = self._regex("path")
        if glob.startswith(("/", "~")):
            return regex.fullmatch(absolute) is not None
        if "/" not in glob:
            # A bare name: at any depth, like .gitignore.
            return regex.fullmatch(absolute.rsplit("/", 1)[-1]) is not None
        return relative is not None and regex.fullmatch(relative) is not None

    def _command_matches(self, command: str, *, anywhere: bool) -> bool:
        regex = self._regex("command")
        assert self.glob is not None
        if not anywhere and not has_wildcard(self.glob):
            # Exactly this command, whatever it holds (an "always" answer's rule).
            return regex.fullmatch(command.strip()) is not None
        if anywhere:
            return any(regex.fullmatch(part) for part in _deny_spellings(command))
        parsed = parse_command(command)
        if parsed.plain is None:
            return False
        for statement in parsed.plain:
            if any(direction not in self.glob for direction in statement.redirects):
                return False
            if regex.fullmatch(statement.text) is None:
                return False
        return True


def parse_rules(texts: object, source: str) -> tuple[Rule, ...]:
    """A config file's list of rule strings, each checked."""
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ConfigError(f'{source}: expected a list of rules like "bash(git status*)"')
    return tuple(Rule.parse(text, source) for text in texts)


def main_argument(tool: object) -> str | None:
    """The input key a rule's glob applies to for ``tool`` (None: it has none)."""
    name = getattr(tool, "name", "")
    if name in MAIN_ARGUMENTS:
        return MAIN_ARGUMENTS[name]
    declared = getattr(tool, "rule_argument", None)
    if isinstance(declared, str):
        return declared
    schema = getattr(tool, "input_schema", None)
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    for key in required:
        spec = properties.get(key)
        if isinstance(spec, Mapping) and spec.get("type") == "string":
            return str(key)
    return None


def argument_kind(argument: str) -> ArgumentKind:
    if argument in _PATH_KEYS:
        return "path"
    if argument in _COMMAND_KEYS:
        return "command"
    return "text"


def escape_glob(text: str) -> str:
    """``text`` as a glob that matches only itself."""
    return "".join("\\" + ch if ch in _GLOB_CHARS else ch for ch in text)


def always_rule(tool: str, input: Mapping[str, Any] | None) -> str:
    """The rule an "always" answer grants: ``bash(<that exact command>)`` for ``bash`` — one
    "always" for ``git status`` must not let ``rm -rf`` through — and the tool's name for any
    other tool (every later call of it)."""
    command = None if input is None else input.get("command")
    if tool == "bash" and isinstance(command, str) and command.strip():
        return f"bash({escape_glob(command.strip())})"
    return tool


def always_scope(tool: str) -> str:
    """What an "always" answer for ``tool`` covers, as a question says it."""
    return "this command" if tool == "bash" else "this tool"


def has_wildcard(glob: str) -> bool:
    """Whether ``glob`` has a ``*`` or ``?`` that is not escaped."""
    escaped = False
    for ch in glob:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "*?":
            return True
    return False


# -- globs --------------------------------------------------------------------------------------


def _glob_regex(glob: str, kind: ArgumentKind) -> re.Pattern[str]:
    """The regular expression of ``glob`` for an argument of ``kind`` (module docstring)."""
    text = glob.strip() if kind == "path" else glob
    if kind == "path":
        if text.startswith("~"):
            text = os.path.expanduser(text)
        if text.endswith("/"):
            text += "**"
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(re.escape(text[i + 1]))
            i += 2
            continue
        if kind == "path" and text.startswith("**", i):
            if text.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            else:
                out.append(".*")
                i += 2
            continue
        if ch == "*":
            out.append("[^/]*" if kind == "path" else ".*")
        elif ch == "?":
            out.append("[^/]" if kind == "path" else ".")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _normalise_path(value: str, base: str) -> tuple[str | None, str]:
    """``(relative to the workdir or None when outside it, absolute)``, both lexical."""
    path = os.path.expanduser(value.strip())
    absolute = os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))
    absolute = PurePosixPath(absolute).as_posix()
    root = os.path.normpath(base)
    if absolute == root:
        return ".", absolute
    if absolute.startswith(root.rstrip("/") + "/"):
        return absolute[len(root.rstrip("/")) + 1 :], absolute
    return None, absolute


# -- commands -----------------------------------------------------------------------------------

_DENY_CUTS = re.compile(r"[;&|\n()`{}]|\$\(")
_ASSIGNMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
#: What quoting adds to a word: a backslash before a character, quote characters.
_QUOTING = re.compile(r"\\(.)|\$?['\"]", re.DOTALL)


@functools.lru_cache(maxsize=512)
def _deny_spellings(command: str) -> frozenset[str]:
    """Everything a deny rule matches against for ``command`` (cached: every deny rule asks
    about the same call): its text, each simple command the parse finds, the textual parts."""
    parts = {command.strip(), *parse_command(command).anywhere, *_deny_parts(command)}
    return frozenset(part for part in parts if part)


def _deny_parts(command: str) -> list[str]:
    """Every piece a deny rule looks at in the text itself, whatever a parse made of it: parts
    cut at operators, braces, parentheses and backquotes (quoting ignored), each also without
    leading assignments, without quotes and backslashes, and with its program's directory
    dropped (``\\rm``, ``"rm"`` and ``/bin/rm`` are ``rm``)."""
    out: set[str] = set()
    for part in _DENY_CUTS.split(command):
        part = part.strip()
        if not part:
            continue
        bare = _ASSIGNMENT.sub("", part)
        plain = _QUOTING.sub(lambda m: m.group(1) or "", bare).strip()
        program, space, rest = plain.partition(" ")
        out.update((part, bare, plain, program.rsplit("/", 1)[-1] + space + rest))
    return sorted(out)
