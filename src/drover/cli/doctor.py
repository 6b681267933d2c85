"""``drover doctor``: checks this machine's set-up and explains each finding on one line.

Each check prints ``ok``, ``warn`` or ``FAIL``, a name and what it found: the Python version,
the config file, the API keys (whether each is set, never its value), the HTTP client and what
it takes from the environment (the CA bundle and the proxies, checked as the client takes
them) and the ``[providers]`` tables (the names of their extra headers, never a value; which
models do not chain), the journal (where it is, whether drover can write it, its schema: the
migrations applied against the ones this version knows), the sandbox of ``bash`` (bubblewrap
present and working, by running it), PostgreSQL and Redis when configured (``--db``/``DROVER_DB``,
``--redis``/``DROVER_REDIS``: reachable), and the MCP config files. The exit status is 0 when
nothing failed (warnings included), 1 otherwise.

The checks only read: a journal that does not exist yet is not created, and one that needs
migrations is not migrated (drover applies them the next time it opens the journal).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from drover.config.settings import KEY_VARS, Config, load_config
from drover.errors import DroverError

Status = Literal["ok", "warn", "FAIL"]
#: The oldest Python drover runs on.
MIN_PYTHON = (3, 11)
#: Seconds a reachability check waits for PostgreSQL or Redis.
CONNECT_TIMEOUT = 5


@dataclass(frozen=True, slots=True)
class Finding:
    status: Status
    name: str
    text: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<10}  {self.text}"


def add_doctor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", help="the journal to check: SQLite path or postgresql:// URL (env DROVER_DB)"
    )
    parser.add_argument("--redis", help="the Redis to check: redis:// URL (env DROVER_REDIS)")
    parser.add_argument(
        "--workdir", type=Path, help="whose .mcp.json and sandbox to check (default: .)"
    )
    parser.add_argument(
        "--sandbox",
        choices=("off", "workdir", "read-only"),
        help="the sandbox mode to check (default: the config file's, else workdir)",
    )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        type=Path,
        action="append",
        help="an MCP config file to check besides the default ones (repeatable)",
    )


def run_doctor(args: argparse.Namespace) -> int:
    """Print one line per check; 0 when none failed."""
    failed = False
    for finding in _findings(args):
        print(finding.line(), flush=True)
        failed = failed or finding.status == "FAIL"
    return 1 if failed else 0


def _findings(args: argparse.Namespace) -> Iterator[Finding]:
    yield _python()
    config, finding = _config()
    yield finding
    yield _api_keys(config)
    yield _guarded("network", lambda: _network(config))
    db = (args.db or os.environ.get("DROVER_DB") or "").strip() or None
    if _is_postgres(db):
        yield _guarded("postgresql", lambda: _postgres(str(db)))
    else:
        yield _journal(db)
        yield Finding("ok", "postgresql", "not configured (--db postgresql://… / DROVER_DB)")
    workdir = (args.workdir or Path.cwd()).expanduser()
    yield _guarded("sandbox", lambda: _sandbox(config, workdir, db, args.sandbox))
    redis_url = args.redis or os.environ.get("DROVER_REDIS") or None
    yield _guarded("redis", lambda: _redis(redis_url, db))
    yield _guarded("mcp", lambda: _mcp(workdir, args.mcp_config or []))


def _guarded(name: str, check: Callable[[], Finding]) -> Finding:
    """A check whose own failure is a finding, not a traceback."""
    try:
        return check()
    except DroverError as exc:
        return Finding("FAIL", name, str(exc))
    except OSError as exc:
        return Finding("FAIL", name, f"{type(exc).__name__}: {exc}")


def _python() -> Finding:
    version = ".".join(str(n) for n in sys.version_info[:3])
    needed = ".".join(str(n) for n in MIN_PYTHON)
    status: Status = "ok" if sys.version_info[:2] >= MIN_PYTHON else "FAIL"
    return Finding(status, "python", f"{version} at {sys.executable} ({needed} or newer needed)")


def _config() -> tuple[Config, Finding]:
    from drover.config.settings import default_config_path

    path = default_config_path()
    try:
        config = load_config()
    except DroverError as exc:
        # The other checks go on with the defaults.
        return Config(), Finding("FAIL", "config", str(exc))
    if config.path is None:
        return config, Finding("ok", "config", f"no file at {path}: defaults and environment")
    settings = sum(1 for where in config.sources.values() if where == str(config.path))
    return config, Finding("ok", "config", f"{config.path}: parsed ({settings} settings)")


def _api_keys(config: Config) -> Finding:
    shown = [
        f"{var} {'set' if os.environ.get(var, '').strip() else 'not set'}"
        for var in sorted(set(KEY_VARS.values()))
    ]
    provider = config.default_provider
    needed = KEY_VARS[provider]
    text = f"{', '.join(shown)} (values never shown); default model {config.default_model}"
    if config.api_key(provider) or config.base_urls.get(provider):
        return Finding("ok", "api keys", text)
    return Finding("warn", "api keys", f"{text} needs {needed}, or pass --model / --base-url")


def _network(config: Config) -> Finding:
    """The HTTP client each command reads the model API with, the CA bundle and the proxies
    from the environment, checked as the client would take them."""
    from drover.providers.client_env import check_client_environment, proxy_variables
    from drover.providers.factory import server_config

    cli = config.http_client or "httpx"
    serve = server_config(config).http_client or "httpx"
    for client in sorted({cli, serve}):
        check_client_environment(client)
    cafile = os.environ.get("SSL_CERT_FILE")
    bundle = f"SSL_CERT_FILE {cafile}" if cafile else "the system's"
    proxies = ", ".join(proxy_variables()) or "none"
    text = f"model API through {cli} (drover serve: {serve}); CA bundle {bundle}; proxy {proxies}"
    return Finding("ok", "network", text + _providers(config))


def _providers(config: Config) -> str:
    """What the ``[providers]`` tables add to requests: header names (values are secrets)."""
    parts = []
    for key, table in sorted(config.providers.items()):
        if table.headers:
            parts.append(f"{key} sends {', '.join(sorted(table.headers, key=str.lower))}")
        if table.chain is False:
            parts.append(f"{key} does not chain")
    if not parts:
        return ""
    return f"; [providers] {'; '.join(parts)} (header values never shown)"


# -- the journal ------------------------------------------------------------------------------


def _is_postgres(db: str | None) -> bool:
    return (db or "").lower().startswith(("postgresql://", "postgres://"))


def _journal(db: str | None) -> Finding:
    """A SQLite journal (``db`` is not a PostgreSQL URL)."""
    from drover.store import default_db_path

    target = db or ""
    scheme = target.split("://", 1)[0].lower() if "://" in target else ""
    if scheme == "sqlite":
        path_text = target.split("://", 1)[1]
        target = path_text[1:] if path_text.startswith("/") else path_text
    elif scheme:
        return Finding("FAIL", "journal", f"unsupported journal URL scheme {scheme!r}")
    if target == ":memory:":
        return Finding("ok", "journal", ":memory: (kept in memory, gone when drover exits)")
    path = Path(target).expanduser() if target else default_db_path()
    return _guarded("journal", lambda: _sqlite(path))


def _schema(applied: list[str], known: list[str]) -> tuple[Status, str]:
    unknown = [name for name in applied if name not in known]
    if unknown:
        return "FAIL", (
            f"schema of a newer drover: {len(unknown)} unknown migration(s), e.g. {unknown[-1]} "
            "(upgrade drover)"
        )
    missing = len(known) - len(applied)
    if missing:
        return "ok", (
            f"schema at {len(applied)} of {len(known)} migrations "
            f"(the next open applies {missing}, up to {known[-1]})"
        )
    return "ok", f"schema up to date ({len(known)} migrations, last {known[-1]})"


def _sqlite(path: Path) -> Finding:
    from drover.store.migrations.steps import SQLITE_MIGRATIONS

    known = [m.name for m in SQLITE_MIGRATIONS]
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is None or not os.access(parent, os.W_OK | os.X_OK):
            return Finding(
                "FAIL", "journal", f"{path}: does not exist, and {parent} is not writable"
            )
        return Finding(
            "ok", "journal", f"{path}: not created yet (its directory is writable; new schema)"
        )
    if not path.is_file():
        return Finding("FAIL", "journal", f"{path}: not a file")
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        return Finding("FAIL", "journal", f"{path}: not writable (the file or its directory)")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
            ).fetchone()
            rows = (
                conn.execute("SELECT name FROM schema_migrations ORDER BY applied_at, rowid")
                if exists
                else []
            )
            applied = [str(row[0]) for row in rows]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return Finding("FAIL", "journal", f"{path}: not a drover journal ({exc})")
    status, schema = _schema(applied, known)
    loose = _readable_by_others(path)
    if loose and status == "ok":
        return Finding("warn", "journal", f"{path}: writable; {schema}; {loose}")
    return Finding(status, "journal", f"{path}: writable; {schema}")


def _readable_by_others(path: Path) -> str:
    """What of the journal others than its owner may read, and what to do ("" when none)."""
    from drover.config.private import exposed
    from drover.store import default_db_path

    own = path.resolve() == default_db_path().resolve()
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    loose = [f"{p.name} {p.stat().st_mode & 0o777:o}" for p in files if exposed(p)]
    if own and exposed(path.parent):
        loose.append(f"its directory {path.parent.stat().st_mode & 0o777:o}")
    if not loose:
        return ""
    said = f"READABLE BY OTHER USERS ({', '.join(loose)})"
    if own:
        return f"{said}: drover makes it private (600, its directory 700) when it next opens it"
    return f"{said}: every prompt, answer and output is in it; chmod 600 {path}*"


def _postgres(url: str) -> Finding:
    import asyncio

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from drover.store.migrations.postgres import PG_MIGRATIONS, applied_migrations
    from drover.store.postgres.connection import reason, redact

    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        return Finding("FAIL", "postgresql", f"invalid URL: {redact(url, reason(exc))}")
    params["connect_timeout"] = CONNECT_TIMEOUT
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"

    async def applied() -> list[str]:
        conn = await psycopg.AsyncConnection.connect(make_conninfo("", **params), autocommit=True)
        try:
            return await applied_migrations(conn)
        finally:
            await conn.close()

    try:
        names = asyncio.run(applied())
    except psycopg.Error as exc:
        return Finding("FAIL", "postgresql", f"{where} unreachable: {redact(url, reason(exc))}")
    status, schema = _schema(names, [m.name for m in PG_MIGRATIONS])
    return Finding(status, "postgresql", f"{where} reachable; {schema}")


# -- the sandbox, Redis, MCP ------------------------------------------------------------------


def _sandbox(config: Config, workdir: Path, db: str | None, mode: str | None) -> Finding:
    from drover.agent.resources import sandbox_settings_for
    from drover.tools.sandbox import probe_sandbox

    settings = sandbox_settings_for(config, workdir.resolve(), db=db, mode=mode)
    if settings.mode == "off":
        return Finding("warn", "sandbox", "off: bash commands run with your full rights")
    status = probe_sandbox(settings)
    if not status.active:
        return Finding(
            "FAIL", "sandbox", f"{status.reason} (bash refuses commands; --sandbox off runs them)"
        )
    features = "; ".join(status.features_active())
    return Finding(
        "ok", "sandbox", f"bubblewrap {status.bwrap} works ({settings.mode}): {features}"
    )


def _redis(url: str | None, db: str | None) -> Finding:
    if url is None:
        return Finding("ok", "redis", "not configured (--redis / DROVER_REDIS; optional)")
    if not _is_postgres(db):
        return Finding("FAIL", "redis", "--redis needs a shared journal: --db postgresql://…")
    import redis

    from drover.store.postgres.connection import redact

    client = redis.Redis.from_url(
        url, socket_timeout=CONNECT_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )
    try:
        client.ping()
        version = client.info("server").get("redis_version", "?")
    except (redis.RedisError, ValueError) as exc:
        return Finding("FAIL", "redis", f"unreachable: {redact(url, str(exc))}")
    finally:
        client.close()
    return Finding("ok", "redis", f"reachable (Redis {version})")


def _mcp(workdir: Path, given: list[Path]) -> Finding:
    from drover.mcp.config import default_config_files, load_servers

    files = [*default_config_files(workdir), *given]
    if not files:
        return Finding("ok", "mcp", "no MCP config files (mcp.json, .mcp.json, --mcp-config)")
    servers = load_servers(files)
    where = ", ".join(str(path) for path in files)
    broken = [f"{s.name}: {s.error}" for s in servers if s.error]
    if broken:
        return Finding("warn", "mcp", f"{where}: parsed; left out: {'; '.join(broken)}")
    return Finding("ok", "mcp", f"{where}: parsed ({len(servers)} servers)")
