"""``drover gc``: prune the journal's old sessions once (``drover serve`` does it on a schedule).

``drover gc --older-than 30d [--keep-last N] [--dry-run] [--vacuum]`` deletes the sessions last
updated more than that long ago, except the N most recently updated and any whose turn is
running (see :mod:`drover.journal.retention`), in bounded batches that live turns' writes go
between, and prints what it deleted, how long it took and the journal's size before and after.
Without ``--older-than`` the config file's ``[retention] older_than`` (and ``keep_last``) apply.

On SQLite the freed pages go back to the file system at once in a journal made by this version
(incremental vacuum); an older file keeps them for later writes, which the report says, and
``--vacuum`` rewrites it once (switching it to incremental vacuum: it holds the journal's write
lock for the rewrite, so run it when no server writes).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from drover.config.settings import load_config
from drover.config.tables import parse_duration
from drover.errors import ConfigError
from drover.journal.retention import Policy, PruneReport, prune
from drover.store import open_store


def _age(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text!r}")
    return int(text)


def add_gc_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        type=_age,
        metavar="AGE",
        help="prune sessions not updated for this long: 30d, 12h, 90m, 2w, 0s (default: the "
        "config's [retention] older_than)",
    )
    parser.add_argument(
        "--keep-last",
        type=_count,
        metavar="N",
        help="never prune the N most recently updated sessions (default: [retention] keep_last, 0)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="count what would be pruned, delete nothing"
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="then rewrite the journal once to return all its free space (SQLite: switches an "
        "older file to incremental vacuum; holds the write lock meanwhile)",
    )


def policy_from(args: argparse.Namespace) -> Policy:
    config = load_config()
    if args.older_than is not None:
        older_than = float(args.older_than)
    elif config.retention_older_than is not None:
        older_than = config.retention_older_than
    else:
        raise ConfigError("say how old a session must be: --older-than 30d (or [retention])")
    keep_last = config.retention_keep_last if args.keep_last is None else args.keep_last
    return Policy(older_than=older_than, keep_last=keep_last)


def run_gc(args: argparse.Namespace) -> int:
    policy = policy_from(args)
    store = open_store(args.db or os.environ.get("DROVER_DB"))

    async def work() -> PruneReport:
        async with store:
            report = await prune(store, policy, dry_run=args.dry_run)
            if args.vacuum and not args.dry_run:
                await store.vacuum()
                report.bytes_after, report.free_after = await store.journal_bytes()
            return report

    report = asyncio.run(work())
    print(f"drover gc: {report.describe()}")
    if report.free_after and not args.vacuum:
        print("drover gc: `drover gc --vacuum` returns that space to the file system once")
    return 0
