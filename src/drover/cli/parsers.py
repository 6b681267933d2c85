"""The command line's grammar: the ``drover`` parser, the parser of each subcommand, their
flags and help texts, and the checks that turn a bad flag value into a usage error.

Every parser reports a usage error as ``drover: error: …`` and exits with :data:`EXIT_USAGE`.
Nothing here runs a command: :mod:`drover.cli.main` parses with these parsers and dispatches.
The modules a subcommand's options come from are imported only when that subcommand's parser
is built, so that ``drover -p`` loads none of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from drover.core.rules import Rule

#: The exit code of bad usage (argparse's own).
EXIT_USAGE = 2

SUBCOMMANDS = (
    "sessions",
    "show",
    "rename",
    "rm",
    "export",
    "gc",
    "fork",
    "serve",
    "fake-llm",
    "models",
    "demo",
    "mcp",
    "doctor",
)
#: What ``drover SUBCOMMAND --help`` says first.
DESCRIPTIONS = {
    "sessions": "List the stored sessions, most recently updated first.",
    "show": "Show everything the journal holds of a session: turns, messages, tool calls.",
    "rename": "Give a session a title (later turns keep it).",
    "rm": "Delete a session and everything it holds (asks first unless --yes).",
    "fork": "Copy a session's history up to a turn into a new session (the source is kept).",
    "export": "Write a session out as Markdown or JSON Lines, on stdout.",
    "gc": "Prune old sessions from the journal and return the space (serve: [retention]).",
    "serve": "Serve the HTTP API, its event streams and the web page.",
    "fake-llm": "Run drover's scripted fake LLM server (for tests and demos).",
    "models": "List the models drover knows of, and where each comes from.",
    "demo": "A tool-using turn that breaks mid-answer, then resumes.",
    "mcp": "The MCP servers configured here, their status and their tools.",
    "doctor": "Check this machine's set-up (Python, config, keys, journal, sandbox, servers); "
    "one line each, exit status 1 when a check fails.",
}
#: ``drover fake-llm --help``'s account of a scenario file (the full format is
#: :mod:`drover.testing.scenario`'s docstring).
FAKE_LLM_EPILOG = """\
The server answers the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses
APIs (base URL http://HOST:PORT for Anthropic, http://HOST:PORT/v1 for OpenAI; any API
key). Each request gets the next response of the scenario, in order; a request past the
last one is an error. A scenario file:

  options: {chunk_size: 8, delay: 0}      # optional: 8-char chunks, seconds between frames
  responses:
    - text: "Let me look."
      tool_calls: [{name: read_file, input: {path: a.txt}}]
    - text: "Done."
      usage: {input_tokens: 12, output_tokens: 5}
    - {text: "cut short", error_after: 5, error: {type: overloaded_error}}
    - http_error: {status: 529, type: overloaded_error, message: Overloaded}
    - {hang: true}                         # never answers

A response may also give thinking, stop_reason, raw_input (argument text) on a tool call,
drop_after/stall_after, context_overflow, or replay a recording (raw: FILE). A top-level list
is read as the responses. An unknown key is an error naming where it is. Use it with e.g.
  drover -p hi --model anthropic:fake --base-url http://127.0.0.1:8765
"""
#: How an ID argument is described.
ID_HELP = (
    "a session id, or any unique start of one (letters, digits, '-' and '_'); "
    "an ambiguous start is an error that lists the sessions it matches"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"drover: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _session_id(text: str) -> str:
    from drover.cli.session_ids import session_id_arg

    return session_id_arg(text)


def _rule(flag: str) -> Callable[[str], Rule]:
    """The ``type`` of ``--allow``/``--deny``: a rule, remembering the flag it came from."""

    def parse(text: str) -> Rule:
        from drover.errors import ConfigError

        try:
            return Rule.parse(text, flag)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None

    return parse


def _prompt_text(flag: str) -> Callable[[str], str]:
    """The ``type`` of ``--system-prompt``/``--append-system-prompt``: TEXT, or @FILE's text."""

    def read(value: str) -> str:
        if value.startswith("@@"):
            text = value[1:]
        elif value.startswith("@"):
            path = Path(value[1:]).expanduser()
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise argparse.ArgumentTypeError(f"cannot read {path}: {reason}") from None
        else:
            text = value
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{flag} is empty")
        return text

    return read


def _header(text: str) -> object:
    """The ``type`` of ``--header``: NAME:VALUE, its ``${VAR}`` expanded, as the settings of
    every model (:mod:`drover.config.provider_tables`); the usage error never shows the value."""
    import os

    from drover.config.provider_tables import header_flag
    from drover.errors import ConfigError

    try:
        return header_flag(text, os.environ)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", help="SQLite path or postgresql:// URL (env DROVER_DB; default: the user's journal)"
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return value


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5 (a bare gpt-…, o3…, claude-… "
        "name finds its provider), or an alias",
    )
    parser.add_argument("--base-url", help="API base URL (any compatible server)")
    parser.add_argument(
        "--header",
        metavar="NAME:VALUE",
        type=_header,
        action="append",
        default=[],
        help="send this HTTP header with every model request, repeatable (a gateway's routing or "
        "key: 'x-portkey-api-key:${PORTKEY_API_KEY}' — ${VAR} is read from the environment, so "
        "quote it to keep the value out of the process list); over the config file's "
        "[providers] headers",
    )
    parser.add_argument(
        "--no-chain",
        action="store_true",
        help="openai-responses models: send the whole history every time, never "
        "previous_response_id (for gateways that lose stored responses; [providers] chain)",
    )
    _db_option(parser)
    parser.add_argument("--workdir", type=Path, help="directory the tools work in (default: .)")
    parser.add_argument(
        "--permission-mode",
        choices=("ask", "allow", "deny", "sandboxed"),
        default="ask",
        help="ask before side-effecting tools (default), allow them, deny them, or ask except "
        "for commands the sandbox fully contains (sandboxed)",
    )
    parser.add_argument(
        "--sandbox",
        choices=("off", "workdir", "read-only"),
        help="where bash commands run: bubblewrap with only the workdir writable (workdir, the "
        "default), with nothing writable (read-only), or unsandboxed (off)",
    )
    parser.add_argument(
        "--sandbox-network",
        action="store_true",
        help="let sandboxed commands reach any name through drover's HTTP proxy (never this "
        "machine's own services)",
    )
    parser.add_argument(
        "--sandbox-allow-domain",
        action="append",
        default=[],
        metavar="DOMAIN",
        help="let sandboxed commands reach DOMAIN (or its subdomains, as *.DOMAIN) through "
        "drover's HTTP proxy; repeatable, added to [sandbox] allow_domains",
    )
    parser.add_argument("--max-turns", type=_positive_int, help="model calls per turn (25)")
    parser.add_argument(
        "--system-prompt",
        metavar="TEXT|@FILE",
        type=_prompt_text("--system-prompt"),
        help="replace drover's system prompt with TEXT, or with FILE's content (@FILE; @@ "
        "starts a TEXT with @). Project instructions (AGENTS.md, else CLAUDE.md, in the "
        "workdir, its parents up to the repository root, and next to config.toml) still follow "
        "it",
    )
    parser.add_argument(
        "--append-system-prompt",
        metavar="TEXT|@FILE",
        type=_prompt_text("--append-system-prompt"),
        help="add TEXT (or FILE's content) at the end of the system prompt, after the project "
        "instructions",
    )
    parser.add_argument(
        "--allow",
        metavar="RULE",
        type=_rule("--allow"),
        action="append",
        default=[],
        help="run the calls RULE covers without asking, repeatable: a tool name, optionally "
        "with a glob on its main argument: read_file, 'bash(git status*)', "
        "'write_file(src/**)', 'edit_file(*.md)', mcp__SERVER__TOOL (adds to the config "
        "file's [permissions] allow)",
    )
    parser.add_argument(
        "--deny",
        metavar="RULE",
        type=_rule("--deny"),
        action="append",
        default=[],
        help="refuse the calls RULE covers, in every permission mode, repeatable (same rules; "
        "deny wins over allow; the model is told which rule refused it)",
    )
    _add_mcp_config(parser)
    parser.add_argument(
        "--otel",
        action="store_true",
        help="export traces of every turn, model call and tool call with OpenTelemetry, "
        "configured by the standard OTEL_* variables (OTLP over HTTP to localhost:4318 by "
        "default; also on when OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT is set); "
        "needs pip install 'drover[otel]'",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="how warnings and errors are logged on stderr: text (default) or json, one object "
        "a line with the session, turn and trace ids",
    )


def _add_mcp_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        type=Path,
        action="append",
        help='MCP servers from FILE ({"mcpServers": {...}}, as in .mcp.json); repeatable, '
        "read after the user-level mcp.json next to config.toml and the workdir's .mcp.json "
        "(whose servers start only once approved: drover mcp approve), a later definition of "
        "a server winning",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="drover",
        description="An agent runtime whose turns never lose work. "
        "With no arguments, opens the REPL in the current directory.",
        epilog=f"subcommands: {', '.join(SUBCOMMANDS)} (drover SUBCOMMAND --help)",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version")
    parser.add_argument(
        "-p",
        "--print",
        dest="prompt",
        metavar="PROMPT",
        nargs="?",
        const="",
        help="run one turn headless (the prompt is read from stdin when not given)",
    )
    parser.add_argument(
        "--session",
        metavar="ID",
        type=_session_id,
        help="continue this session; any unique start of its id will do. An id no session "
        "starts with names a new session, unless it is 6-31 hex digits (it reads as a "
        "shortened id: an error)",
    )
    parser.add_argument(
        "--continue", dest="continue_", action="store_true", help="continue the latest session"
    )
    parser.add_argument(
        "--resume",
        metavar="ID",
        type=_session_id,
        help="open the REPL on this stored session (it must exist; any unique start of its "
        "id will do)",
    )
    parser.add_argument(
        "--resume-turn",
        action="store_true",
        help="finish the session's unfinished turn without a new prompt",
    )
    parser.add_argument(
        "--discard-pending",
        action="store_true",
        help="drop the session's unfinished work before the turn (with no prompt: only drop it)",
    )
    parser.add_argument("--output-format", choices=("text", "json", "stream-json"), default="text")
    parser.add_argument(
        "--image",
        metavar="FILE",
        type=Path,
        action="append",
        default=[],
        help="send this image (PNG, JPEG, GIF or WebP, at most 3.75 MB) with the prompt, "
        "repeatable; @shot.png in the prompt's text does the same",
    )
    _add_run_options(parser)
    parser.add_argument(
        "initial_prompt",
        nargs="?",
        metavar="PROMPT",
        help="open the REPL with this first message sent (after -- when it is a subcommand name)",
    )
    return parser


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked for (reading
    the package metadata costs more than the rest of the command's start-up)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("drover")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            found = "unknown"
        print(f"drover {found}")
        parser.exit()


def build_subparser(name: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"drover {name}", description=DESCRIPTIONS.get(name))
    if name == "sessions":
        _db_option(parser)
        parser.add_argument(
            "--limit", type=_positive_int, default=20, help="how many to list (default 20)"
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="a JSON array: id, title, model, workdir, created_at, updated_at, turns, "
            "last_status, last_abandoned (its process is gone: killed, lease expired)",
        )
    elif name == "show":
        parser.add_argument("session_id", metavar="ID", type=_session_id, help=ID_HELP)
        _db_option(parser)
        parser.add_argument("--json", action="store_true", help="everything, as one JSON object")
    elif name == "rename":
        parser.add_argument("session_id", metavar="ID", type=_session_id, help=ID_HELP)
        parser.add_argument("title", metavar="TITLE", help="the new title (one line, ≤ 200)")
        _db_option(parser)
    elif name == "rm":
        parser.add_argument("session_id", metavar="ID", type=_session_id, help=ID_HELP)
        parser.add_argument(
            "-y", "--yes", action="store_true", help="delete without asking for confirmation"
        )
        _db_option(parser)
    elif name == "fork":
        parser.add_argument("session_id", metavar="ID", type=_session_id, help=ID_HELP)
        parser.add_argument(
            "--turn",
            metavar="T",
            help="the last turn to copy: its number in the session (1, 2, …) or its id, or "
            "any unique start of it (default: every turn not running)",
        )
        _db_option(parser)
    elif name == "export":
        parser.add_argument("session_id", metavar="ID", type=_session_id, help=ID_HELP)
        parser.add_argument(
            "--format",
            choices=("markdown", "jsonl"),
            default="markdown",
            help="markdown (default: a readable transcript) or jsonl (one JSON object a line: "
            "the session, then each turn with its messages and tool calls)",
        )
        _db_option(parser)
    elif name == "gc":
        from drover.cli.gc import add_gc_options

        add_gc_options(parser)
        _db_option(parser)
    elif name == "fake-llm":
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = FAKE_LLM_EPILOG
        parser.add_argument(
            "scenario",
            metavar="SCENARIO",
            type=Path,
            help="a YAML or JSON file: what the model answers, one response per request",
        )
        parser.add_argument("--host", default="127.0.0.1", help="address (%(default)s)")
        parser.add_argument("--port", type=_port, default=8765, help="port (%(default)s)")
    elif name == "models":
        pass
    elif name == "mcp":
        parser.description = "The MCP servers drover starts for -p, the REPL and serve."
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = actions.add_parser(
            "list",
            help="configured MCP servers, their status and their tools",
            description="Start each configured MCP server, list its tools, stop it again. "
            "Servers come from the user-level mcp.json next to config.toml, the workdir's "
            ".mcp.json (only approved servers start: drover mcp approve) and each "
            "--mcp-config FILE.",
        )
        listing.add_argument("--workdir", type=Path, help="whose .mcp.json (default: .)")
        _add_mcp_config(listing)
        listing.add_argument("--json", action="store_true", help="one JSON object")
        approving = actions.add_parser(
            "approve",
            help="start the servers of the workdir's .mcp.json from now on",
            description="Approve the MCP servers the workdir's .mcp.json names, as the file "
            "is now (a changed file needs approving again). Until then -p and serve leave "
            "them out and the REPL asks.",
        )
        approving.add_argument("--workdir", type=Path, help="whose .mcp.json (default: .)")
        revoking = actions.add_parser(
            "revoke",
            help="forget the answer kept for the workdir's .mcp.json",
            description="Forget the approval (or refusal) kept for the workdir's .mcp.json: "
            "its servers are left out again and the REPL asks.",
        )
        revoking.add_argument("--workdir", type=Path, help="whose .mcp.json (default: .)")
    elif name == "demo":
        parser.add_argument(
            "--workdir", type=Path, help="where the demo works (default: a temp dir)"
        )
        parser.add_argument("--db", help="store of the demo session (default: inside the workdir)")
    elif name == "doctor":
        from drover.cli.doctor import add_doctor_options

        add_doctor_options(parser)
    elif name == "serve":
        from drover.cli.serve import add_serve_options

        add_serve_options(parser)
        _add_run_options(parser)
    return parser
