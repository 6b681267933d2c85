"""``drover`` command line: dispatch, one error line and an exit code on failure.

Exit codes: 0 completed, 1 the turn failed (or a drover error), 2 bad usage,
3 the turn is incomplete (its work is pending; run again to resume), 130 interrupted.

No input makes a traceback: bad flags and arguments that are not valid UTF-8 are usage errors,
drover errors are one line, Ctrl-C is "interrupted", and a reader of stdout that goes away ends
the command quietly (the Python docs' way: stdout then points at /dev/null). Heavy modules are
imported inside :func:`main`, so that a Ctrl-C at the very start is handled there too. The
parsers, their flags and help are :mod:`drover.cli.parsers`' (re-exported here).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from drover.cli.parsers import EXIT_USAGE, SUBCOMMANDS, build_parser, build_subparser
from drover.errors import BlankPromptError, DroverError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "SUBCOMMANDS",
    "build_parser",
    "build_subparser",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130


def _reopen_closed_std_streams() -> None:
    """A standard stream closed by the caller (``drover <&-``) becomes /dev/null, so that the
    code and the subprocesses of tools never write to (or read from) a file that later took
    its descriptor number."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        devnull = os.open(os.devnull, os.O_RDWR)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)
        mode = "r" if fd == 0 else "w"
        setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        _reopen_closed_std_streams()
        code = _dispatch(args_list)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except DroverError as exc:
        _say(f"drover: error: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say("drover: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        from drover.cli.render import point_at_devnull

        point_at_devnull()
        return EXIT_FAILED


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except BrokenPipeError:  # ``drover … 2>&1 | head -1``: nobody reads stderr either
        from drover.cli.render import point_at_devnull

        point_at_devnull(sys.stderr)


def _check_utf8(argv: list[str]) -> None:
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            sys.stderr.write(f"drover: error: argument is not valid UTF-8: {shown!r}\n")
            raise SystemExit(EXIT_USAGE) from None


def _check_headless(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.session is not None and args.continue_:
        parser.error("use either --session or --continue, not both")
    named = args.session is not None or args.continue_
    if args.resume_turn:
        if args.prompt:
            parser.error("--resume-turn takes no prompt: it finishes the unfinished turn")
        if args.discard_pending:
            parser.error("--resume-turn and --discard-pending contradict each other")
        if not named:
            parser.error("--resume-turn needs --session ID or --continue")
    if args.discard_pending and not named:
        parser.error("--discard-pending needs --session ID or --continue")
    if args.image and args.resume_turn:
        parser.error("--image goes with a prompt; --resume-turn takes none")


def _check_positional(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str], headless: bool
) -> None:
    prompt = args.initial_prompt
    if headless and args.resume is not None:
        parser.error("--resume ID opens the REPL; with -p use --session ID")
    if prompt is None:
        return
    if headless:
        parser.error(f"a prompt outside -p opens the REPL: put it after -p (-p {prompt!r})")
    if prompt in SUBCOMMANDS and "--" not in argv:
        parser.error(
            f"{prompt!r} is a subcommand: put it first (drover {prompt} …), or send it as a "
            f"prompt after -- (drover -- {prompt})"
        )


def _dispatch(argv: list[str]) -> int:
    _check_utf8(argv)
    if argv and argv[0] in SUBCOMMANDS:
        name = argv[0]
        args = build_subparser(name).parse_args(argv[1:])
        return _run_subcommand(name, args)
    parser = build_parser()
    args = parser.parse_args(argv)
    headless = args.prompt is not None or args.resume_turn or args.discard_pending
    _check_positional(parser, args, argv, headless)
    import asyncio

    if not headless:
        if sum((args.session is not None, args.continue_, args.resume is not None)) > 1:
            parser.error("use only one of --session, --continue and --resume")
        from drover.cli.repl import run_repl

        return asyncio.run(run_repl(args))
    _check_headless(parser, args)
    from drover.cli.headless import headless_prompt, run_headless
    from drover.core.messages import blank

    prompt = headless_prompt(args)
    if prompt is not None and blank(prompt):
        parser.error(str(BlankPromptError()))
    return asyncio.run(run_headless(args, prompt))


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
    if name == "doctor":
        from drover.cli.doctor import run_doctor

        return run_doctor(args)
    if name == "mcp":
        import asyncio

        from drover.cli import mcp

        if args.action == "approve":
            return mcp.approve(args)
        if args.action == "revoke":
            return mcp.revoke(args)
        return asyncio.run(mcp.list_servers(args))
    # The journal's readers run no event loop (asyncio alone is ~30 ms of their start-up).
    if name == "sessions":
        from drover.cli.admin import print_sessions

        return print_sessions(args)
    if name == "show":
        from drover.cli.admin import show_session

        return show_session(args)
    if name == "export":
        from drover.cli.admin import export_session

        return export_session(args)
    if name == "rename":
        from drover.cli.manage import rename_session

        return rename_session(args)
    if name == "rm":
        from drover.cli.manage import remove_session

        return remove_session(args)
    if name == "gc":
        from drover.cli.gc import run_gc

        return run_gc(args)
    if name == "fork":
        from drover.cli.manage import fork_session

        return fork_session(args)
    import asyncio

    if name == "demo":
        from drover.cli.demo import run_demo

        return asyncio.run(run_demo(args))
    if name == "serve":
        from drover.cli.serve import run_serve

        return asyncio.run(run_serve(args))
    raise DroverError(f"'drover {name}' is not available in this version yet")


if __name__ == "__main__":
    raise SystemExit(main())
