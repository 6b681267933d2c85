"""``drover`` command line: parsing and dispatch, one error line and an exit code on failure.

Exit codes: 0 completed, 1 the turn failed (or a drover error), 2 bad usage,
3 the turn is incomplete (its work is pending; run again to resume), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from drover.errors import DroverError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130

SUBCOMMANDS = ("sessions", "show", "serve", "fake-llm", "models", "demo")


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


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5")
    parser.add_argument("--base-url", help="API base URL (any compatible server)")
    parser.add_argument("--db", help="SQLite path or postgresql:// URL (env DROVER_DB)")
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
        "--sandbox-network", action="store_true", help="let sandboxed commands use the network"
    )
    parser.add_argument("--max-turns", type=_positive_int, help="model calls per turn (25)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="drover",
        description="An agent runtime whose turns never lose work. "
        "With no arguments, opens the REPL in the current directory.",
        epilog=f"subcommands: {', '.join(SUBCOMMANDS)} (drover SUBCOMMAND --help)",
    )
    parser.add_argument(
        "-p",
        "--print",
        dest="prompt",
        metavar="PROMPT",
        nargs="?",
        const="",
        help="run one turn headless (the prompt is read from stdin when not given)",
    )
    parser.add_argument("--session", help="continue this session (created if new)")
    parser.add_argument(
        "--continue", dest="continue_", action="store_true", help="continue the latest session"
    )
    parser.add_argument(
        "--resume-turn",
        action="store_true",
        help="finish the session's unfinished turn without a new prompt",
    )
    parser.add_argument("--output-format", choices=("text", "json", "stream-json"), default="text")
    _add_run_options(parser)
    return parser


def build_subparser(name: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"drover {name}")
    if name == "sessions":
        parser.add_argument("--db")
        parser.add_argument("--limit", type=_positive_int, default=20)
    elif name == "show":
        parser.add_argument("session_id")
        parser.add_argument("--db")
        parser.add_argument("--json", action="store_true")
    elif name == "fake-llm":
        parser.add_argument("scenario", type=Path)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
    elif name == "models":
        pass
    elif name == "demo":
        parser.add_argument(
            "--workdir", type=Path, help="where the demo works (default: a temp dir)"
        )
        parser.add_argument("--db", help="store of the demo session (default: inside the workdir)")
    elif name == "serve":
        from drover.cli.serve import add_serve_options

        add_serve_options(parser)
        _add_run_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args_list)
    except DroverError as exc:
        print(f"drover: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("drover: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        name = argv[0]
        args = build_subparser(name).parse_args(argv[1:])
        return _run_subcommand(name, args)
    args = build_parser().parse_args(argv)
    if args.prompt is None and not args.resume_turn:
        from drover.cli.repl import run_repl

        return asyncio.run(run_repl(args))
    from drover.cli.headless import run_headless

    return asyncio.run(run_headless(args))


def _run_subcommand(name: str, args: argparse.Namespace) -> int:
    if name == "fake-llm":
        from drover.testing.server import serve

        try:
            serve(args.scenario, args.host, args.port)
        except (OSError, ValueError) as exc:
            raise DroverError(str(exc)) from exc
        return EXIT_OK
    if name == "models":
        from drover.cli.admin import print_models

        return print_models()
    if name == "sessions":
        from drover.cli.admin import print_sessions

        return asyncio.run(print_sessions(args))
    if name == "show":
        from drover.cli.admin import show_session

        return asyncio.run(show_session(args))
    if name == "demo":
        from drover.cli.demo import run_demo

        return asyncio.run(run_demo(args))
    if name == "serve":
        from drover.cli.serve import run_serve

        return asyncio.run(run_serve(args))
    raise DroverError(f"'drover {name}' is not available in this version yet")


if __name__ == "__main__":
    raise SystemExit(main())
