"""How bash reads a command: the parse that permission rules and hooks match commands on.

A rule's glob applied to a command's *text* can be fooled by quoting: ``git status #'⏎touch
x⏎#'`` starts with ``git status`` and, to a splitter that takes ``'`` for a quote, is one
command, while bash sees a comment, then ``touch x``. So commands are read with a real bash
grammar (tree-sitter's, from the ``tree-sitter-bash`` wheel) and :func:`parse_command` gives
the two views a rule needs:

* :attr:`ShellCommand.plain` — what an *allow* rule may cover: the command's simple commands
  (with their redirections), when the command is nothing but those, joined by ``;``, ``&&``,
  ``||``, ``|`` and newlines, each made of plain words (literal or quoted text, ``$NAME`` and
  ``${NAME}``). Anything else — a substitution (``$(…)``, backquotes, ``<(…)``), an
  arithmetic or parameter expansion with operators, a subshell, a compound command (``{ }``,
  ``if``, ``for``…), a function definition, a background ``&``, a here-document, or text the
  grammar does not account for (a syntax error, a NUL) — makes it None: the command is not
  plain, no prefix rule allows it. The grammar is not bash and can misread (a backslash before
  CR-LF, a newline before ``\rm``: the property tests against real bash found both), so each
  piece of a plain command — every word, quoted string, blank and comment — is read again with
  bash's own rules for that piece, and one that does not read the same makes it not plain.
* :attr:`ShellCommand.anywhere` — what a *deny* rule or a hook's scope looks at: every simple
  command anywhere in it (after ``&&``, inside ``$(…)``, a subshell, a loop's body, a function,
  a here-document), each spelled several ways: as written, without its leading ``NAME=value``
  assignments, with quotes and backslashes removed (``"rm" -rf``, ``\\rm``), with a path's
  directory dropped from the program (``/bin/rm``), without a wrapper or a leading expansion
  that may be empty in front (``env``, ``command``, ``nice -n 5``, ``timeout 5``, ``sudo``,
  ``xargs``, ``$x``…); and the commands given as text to ``eval``, ``bash -c``/``sh -c`` and
  ``find -exec``, parsed in turn. (:mod:`drover.core.rules` adds the parts of the text itself, for
  what the grammar misreads.)

Reading what bash *would* run cannot be complete (a program can run any text it is given:
``python -c``, ``git -c alias…``, a script written first); the sandbox is what contains
commands. This module does no I/O.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias

import tree_sitter
import tree_sitter_bash

#: Which way a redirection goes: ``<`` reads (``<``, ``<<``, ``<<<``), ``>`` writes or
#: duplicates (``>``, ``>>``, ``&>``, ``2>&1``…).
Direction: TypeAlias = Literal["<", ">"]

#: How deep ``eval``/``sh -c`` texts are parsed in turn.
MAX_NESTING = 4
#: Commands longer than this are not parsed (a rule then reads only their text).
MAX_PARSED = 256 * 1024

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
#: Control characters bash reads as part of a word (all but tab and newline).
_CONTROLS = re.compile(rb"[\x01-\x08\x0b-\x1f\x7f]")

#: Operators that join the simple commands of a plain command.
_JOINS = frozenset({";", "&&", "||", "|", "|&"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_READS = frozenset({"<", "<<", "<<-", "<<<", "<&", "<&-"})
_WRITES = frozenset({">", ">>", "&>", "&>>", ">&", ">|", ">&-"})

#: Programs that run the command that follows their options, and their options that take a
#: value (``nice -n 5 rm`` runs ``rm``).
_WRAPPERS: dict[str, frozenset[str]] = {
    "builtin": frozenset(),
    "busybox": frozenset(),
    "command": frozenset(),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "exec": frozenset({"-a"}),
    "ionice": frozenset({"-c", "-n", "-p", "--class", "--classdata"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "unbuffer": frozenset(),
    "xargs": frozenset({"-I", "-n", "-P", "-d", "-L", "-a", "-s", "-E", "--delimiter"}),
}
#: Wrappers whose first operand is theirs, not the command's (``timeout 5 rm``).
_WRAPPER_OPERAND = frozenset({"timeout"})
#: Shells whose ``-c`` option takes a command as text.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: A word that is one expansion: it may expand to nothing, leaving the next word first.
_EXPANSION = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9*@#?$!_-]|\{[^}]*\})")
_EXPANSIONS = re.compile(_EXPANSION.pattern)
_ANSI_C = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)
_UNESCAPE_WORD = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPE_QUOTED = re.compile(r'\\([$`"\\\n])')
#: What bash reads between the words of a command, and between commands and operators: a
#: blank (a line continuation alone is no gap to bash: it joins what it stands between).
_BLANKS = re.compile(rb"(?:(?:\\\n)*[ \t](?:[ \t]|\\\n)*)?")
_BETWEEN = re.compile(rb"(?:(?:\\\n)*[ \t\n](?:[ \t\n]|\\\n)*)?")
_COMMENT = re.compile(rb"#[^\n]*")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
#: Each kind of plain word, as bash reads it: no blank, operator, quote, ``$`` or backquote
#: that is not escaped or inside its quotes.
_PLAIN = rb"(?:[^ \t\n|&;()<>'\"`$\\]|\\[\s\S])+"
_WORDS: dict[str, re.Pattern[bytes]] = {
    "word": re.compile(_PLAIN),
    "number": re.compile(_PLAIN),
    "raw_string": re.compile(rb"'[^']*'"),
    "ansi_c_string": re.compile(rb"\$'(?:[^'\\]|\\[\s\S])*'"),
    "string": re.compile(
        rb'"(?:[^"\\`$]|\\[\s\S]|\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}'
        rb"|[0-9*@#?$!_-]))*\""
    ),
    "simple_expansion": re.compile(rb"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9*@#?$!_-])"),
    "expansion": re.compile(rb"\$\{[A-Za-z_][A-Za-z0-9_]*\}"),
    "brace_expression": re.compile(rb"\{[A-Za-z0-9_.+-]*\}"),
}
_ANSI_C_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Statement:
    """One simple command of a plain command, as an allow rule reads it."""

    #: The command as written, with its redirections (``git log > out.txt``).
    text: str
    #: The directions of its redirections.
    redirects: frozenset[Direction]


@dataclass(frozen=True, slots=True)
class ShellCommand:
    """A command as bash reads it (module docstring)."""

    #: Its simple commands, when it is nothing else (None: it is not plain).
    plain: tuple[Statement, ...] | None
    #: Every simple command in it, in every spelling a deny rule reads.
    anywhere: frozenset[str]


@functools.lru_cache(maxsize=512)
def parse_command(command: str) -> ShellCommand:
    """How bash reads ``command`` (cached: every rule asks about the same call)."""
    source = _Source.parse(command)
    if source is None:
        return ShellCommand(plain=None, anywhere=frozenset())
    statements: list[Statement] = []
    plain = not source.root.has_error and source.plain_list(source.root, statements)
    spellings: set[str] = set()
    source.collect(spellings, 0)
    return ShellCommand(
        plain=tuple(statements) if plain and statements else None, anywhere=frozenset(spellings)
    )


def command_words(command: str, depth: int = 0) -> tuple[tuple[str, ...], ...]:
    """The words of every simple command anywhere in ``command`` — in the texts it gives
    ``sh -c`` and ``eval`` too — quotes removed (a word with an expansion stays as written),
    program first."""
    source = _Source.parse(command)
    if source is None:
        return ()
    found: list[tuple[str, ...]] = []
    for node in _nodes(source.root):
        argv = source.argv(node) if node.type == "command" else None
        if argv is None:
            continue
        found.append(tuple(argv))
        if depth < MAX_NESTING:
            program = argv[0].rsplit("/", 1)[-1]
            for text in _given_commands(program, argv):
                found.extend(command_words(text, depth + 1))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class _Source:
    """A command and its syntax tree (offsets into :attr:`data`)."""

    root: tree_sitter.Node
    #: The command as given, UTF-8.
    data: bytes
    #: What the grammar parsed: ``data`` with bash's word-character controls made ``_``.
    parsed: bytes

    @classmethod
    def parse(cls, command: str) -> _Source | None:
        if len(command) > MAX_PARSED or "\x00" in command:
            return None
        try:
            data = command.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: nothing bash would be given as is
            return None
        # The grammar takes \r, \v and \f for blanks (and a backslash before \r\n for a line
        # continuation) where bash reads word characters: a word character of the same
        # length in their place gives the grammar bash's word boundaries. Text is cut from
        # the command as given.
        parsed = _CONTROLS.sub(b"_", data)
        tree = tree_sitter.Parser(_LANGUAGE).parse(parsed)
        return cls(tree.root_node, data, parsed)

    def text(self, node: tree_sitter.Node, start: int | None = None) -> str:
        begin = node.start_byte if start is None else start
        return self.data[begin : node.end_byte].decode("utf-8", errors="replace")

    # -- plain commands (allow rules) --------------------------------------------------------
    #
    # The grammar is not bash: it can misread (it once took a newline followed by ``\rm`` for
    # part of the word before). So every piece of a plain command is read again here with
    # bash's own rules for what it is — a word, a quoted string, a blank between words, a
    # comment — and a piece that is not exactly that makes the command not plain.

    def plain_list(self, node: tree_sitter.Node, out: list[Statement]) -> bool:
        """Add the simple commands of ``node`` (a program, list or pipeline) to ``out``;
        False when it holds anything but plain simple commands and the joining operators."""
        top = node == self.root  # the whole command, leading and trailing blanks included
        end = 0 if top else node.start_byte
        for child in node.children:
            if not self.gap(end, child.start_byte, _BETWEEN):
                return False
            end = child.end_byte
            kind = child.type
            if kind in ("command", "redirected_statement"):
                statement = self.statement(child)
                if statement is None:
                    return False
                out.append(statement)
            elif kind in ("list", "pipeline"):
                if not self.plain_list(child, out):
                    return False
            elif kind == "comment":
                if not self.comment(child):
                    return False
            elif child.is_named or kind not in _JOINS or not self.token(child):
                return False
        return self.gap(end, len(self.parsed) if top else node.end_byte, _BETWEEN)

    def statement(self, node: tree_sitter.Node) -> Statement | None:
        """``node`` as a plain statement (None: it is not one)."""
        redirects: set[Direction] = set()
        body = node
        if node.type == "redirected_statement":
            found = node.child_by_field_name("body")
            if found is None or found.type != "command" or not self.pieces(node, redirects):
                return None
            body = found
        if not self.pieces(body, redirects):
            return None
        names = [c for c in body.children if c.type == "command_name"]
        if len(names) != 1:
            return None
        return Statement(text=self.text(node).strip(" \t\n"), redirects=frozenset(redirects))

    def pieces(self, node: tree_sitter.Node, redirects: set[Direction]) -> bool:
        """Whether the children of a command (or of a redirected one) are plain words,
        assignments and redirections with blanks between them, as bash reads them."""
        end = node.start_byte
        for child in node.children:
            if not self.gap(end, child.start_byte, _BLANKS):
                return False
            starts_word = end == node.start_byte or end < child.start_byte
            if starts_word and self.parsed[child.start_byte : child.start_byte + 1] == b"#":
                return False  # a '#' that starts a word starts a comment for bash
            end = child.end_byte
            kind = child.type
            if kind == "command":
                continue  # the body of a redirected statement, read on its own
            if kind == "command_name":
                if not self.word(child):
                    return False
            elif kind == "variable_assignment":
                if not self.assignment(child):
                    return False
            elif kind in _REDIRECTS:
                if not self.redirect(child, redirects):
                    return False
            elif not self.word(child):
                return False
        return self.gap(end, node.end_byte, _BLANKS)

    def word(self, node: tree_sitter.Node) -> bool:
        """Whether ``node`` is one word bash takes as text: nothing in it runs or computes."""
        kind = node.type
        if kind in ("command_name", "concatenation"):
            parts = node.children
            return (
                bool(parts)
                and all(c.is_named and self.word(c) for c in parts)
                and all(a.end_byte == b.start_byte for a, b in itertools.pairwise(parts))
                and parts[0].start_byte == node.start_byte
                and parts[-1].end_byte == node.end_byte
            )
        pattern = _WORDS.get(kind)
        return pattern is not None and pattern.fullmatch(self.piece(node)) is not None

    def assignment(self, node: tree_sitter.Node) -> bool:
        parts = node.children
        return (
            len(parts) in (2, 3)
            and parts[0].type == "variable_name"
            and parts[1].type == "="
            and all(a.end_byte == b.start_byte for a, b in itertools.pairwise(parts))
            and _NAME.fullmatch(self.piece(parts[0])) is not None
            and (len(parts) == 2 or self.word(parts[2]))
        )

    def redirect(self, node: tree_sitter.Node, directions: set[Direction]) -> bool:
        if node.type not in ("file_redirect", "herestring_redirect"):
            return False  # a here-document: its body is not read here
        end = node.start_byte
        for child in node.children:
            if not self.gap(end, child.start_byte, _BLANKS):
                return False
            end = child.end_byte
            if child.type in _READS and self.token(child):
                directions.add("<")
            elif child.type in _WRITES and self.token(child):
                directions.add(">")
            elif child.type == "file_descriptor":
                if not self.piece(child).isdigit():
                    return False
            elif not child.is_named or not self.word(child):
                return False
        return True

    def comment(self, node: tree_sitter.Node) -> bool:
        start = node.start_byte
        before = self.parsed[start - 1 : start]
        joined = self.parsed[start - 2 : start] == b"\\\n"  # a continuation: mid-word
        return (
            before in (b"", b" ", b"\t", b"\n", b";", b"&", b"|", b"(", b")")
            and not joined
            and _COMMENT.fullmatch(self.piece(node)) is not None
        )

    def token(self, node: tree_sitter.Node) -> bool:
        return self.piece(node) == node.type.encode()

    def piece(self, node: tree_sitter.Node) -> bytes:
        return self.parsed[node.start_byte : node.end_byte]

    def gap(self, start: int, end: int, allowed: re.Pattern[bytes]) -> bool:
        return start <= end and allowed.fullmatch(self.parsed[start:end]) is not None

    # -- every command (deny rules, hooks) ---------------------------------------------------

    def collect(self, out: set[str], depth: int) -> None:
        """Every spelling of every simple command in the tree, into ``out``."""
        for node in _nodes(self.root):
            if node.type == "command":
                self.spellings(node, out, depth)
            elif node.type == "redirected_statement":
                out.add(self.text(node).strip())

    def spellings(self, node: tree_sitter.Node, out: set[str], depth: int) -> None:
        """The ways a deny rule reads one simple command (module docstring)."""
        out.add(self.text(node).strip())
        name = node.child_by_field_name("name")
        argv = self.argv(node)
        if name is None or argv is None:
            return
        out.add(self.text(node, name.start_byte).strip())
        _argv_spellings(argv, out, depth)

    def argv(self, node: tree_sitter.Node) -> list[str] | None:
        """The words of a command node, quotes removed (None: it has no program)."""
        name = node.child_by_field_name("name")
        if name is None:
            return None
        words = [self.value(name)]
        # Pieces with nothing between them are one word to bash, however the grammar split
        # them ($''\\rm is rm); a $ before a quote ($"…") adds nothing.
        end = name.end_byte
        for argument in node.children_by_field_name("argument"):
            value = "" if argument.type == "$" else self.value(argument)
            if argument.start_byte == end:
                words[-1] += value
            else:
                words.append(value)
            end = argument.end_byte
        return words

    def value(self, node: tree_sitter.Node) -> str:
        """What a word is once bash removes its quotes (expansions stay as written)."""
        kind = node.type
        text = self.text(node)
        if kind == "word":
            return _UNESCAPE_WORD.sub(_unescaped, text)
        if kind == "raw_string":
            return text[1:-1]
        if kind == "ansi_c_string":
            return _ansi_c(text[2:-1])
        if kind == "string":
            return "".join(self.value(c) for c in node.children if c.type != '"')
        if kind == "string_content":
            return _UNESCAPE_QUOTED.sub(_unescaped, text)
        if kind in ("concatenation", "command_name"):
            return "".join(self.value(c) for c in node.children)
        if kind == "simple_expansion":
            return "${" + text[1:] + "}"  # its end stays plain when text follows ($x\\rm)
        return text


def _unescaped(match: re.Match[str]) -> str:
    return "" if match.group(1) == "\n" else match.group(1)


# -- what a command runs -------------------------------------------------------------------------


def _nodes(root: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    """Every node below ``root``, without recursion (a hostile command nests deeply)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _argv_spellings(argv: list[str], out: set[str], depth: int) -> None:
    """Spell the command ``argv`` runs, and the one it runs in turn through a wrapper (``env
    rm``), a leading expansion that may be empty (``$x rm``), ``eval``, ``sh -c`` or
    ``find -exec``."""
    for _wrapper in range(len(_WRAPPERS) + 8):
        if not argv:
            return
        # Expansions in the program's name may be empty: ${x}rm is rm.
        program = _EXPANSIONS.sub("", argv[0]).rsplit("/", 1)[-1]
        out.add(" ".join(argv))
        out.add(" ".join([program, *argv[1:]]))
        if depth < MAX_NESTING:
            for text in _given_commands(program, argv):
                source = _Source.parse(text)
                if source is not None:
                    out.add(text.strip())
                    source.collect(out, depth + 1)
        if program == "find":
            _find_exec(argv, out, depth)
        if not program:
            argv = argv[1:]
        elif program in _WRAPPERS:
            argv = _unwrapped(program, argv[1:])
        else:
            return


def _unwrapped(program: str, rest: list[str]) -> list[str]:
    """What a wrapper runs: ``rest`` without its options (and their values), its leading
    ``NAME=value`` words (``env``) and its own operand (``timeout 5``)."""
    takes_value = _WRAPPERS[program]
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--":
            i += 1
            break
        if word.startswith("-") and len(word) > 1:
            i += 2 if word in takes_value else 1
        elif program == "env" and _ASSIGNMENT.match(word):
            i += 1
        else:
            break
    if program in _WRAPPER_OPERAND:
        i += 1
    return rest[i:]


def _given_commands(program: str, argv: list[str]) -> list[str]:
    """The texts ``argv`` hands a shell to run: ``eval``'s words, ``sh -c TEXT``'s text."""
    if program == "eval":
        return [" ".join(argv[1:])]
    if program not in _SHELLS:
        return []
    for i, word in enumerate(argv[1:], 1):
        if word == "--" or not word.startswith("-"):
            return []
        if "c" in word[1:] and not word.startswith("--") and i + 1 < len(argv):
            return [argv[i + 1]]
    return []


def _find_exec(argv: list[str], out: set[str], depth: int) -> None:
    """``find … -exec CMD ARGS ;`` runs ``CMD ARGS``."""
    i = 0
    while i < len(argv):
        if argv[i] in _FIND_EXEC:
            end = i + 1
            while end < len(argv) and argv[end] not in (";", "+"):
                end += 1
            if end > i + 1:
                _argv_spellings(argv[i + 1 : end], out, depth + 1)
            i = end
        i += 1


def _ansi_c(body: str) -> str:
    """The text of ``$'…'`` (bash's escapes)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            return chr(min(int(code[1:], 16), 0x10FFFF))
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        if code[0] == "c" and len(code) == 2:
            return chr(ord(code[1]) & 0x1F)
        return _ANSI_C_SIMPLE.get(code, code)

    return _ANSI_C.sub(one, body)
