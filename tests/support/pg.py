"""A throwaway PostgreSQL cluster for tests: started once per test session, a database per test.

:func:`cluster` finds ``initdb``/``pg_ctl`` under ``/usr/lib/postgresql/*/bin`` (or on ``PATH``),
initialises a cluster in a temporary directory, starts it listening on 127.0.0.1 only (a free
port, trust authentication, durability off: a test cluster needs speed, not crash safety) and
stops it with ``pg_ctl stop -m immediate`` at the end. Tests get a schema each (creating one
takes milliseconds; copying a database, tenths of a second). PostgreSQL refuses to run as root, so a
root test run starts it as the ``postgres`` system user (the Debian package creates it).

Missing binaries fail the run with a hint to run ``scripts/ci-deps``; with
``DROVER_SKIP_POSTGRES=1`` they skip the PostgreSQL tests instead.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from support.ports import free_port

SKIP_ENV = "DROVER_SKIP_POSTGRES"
RUN_AS = "postgres"
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


@dataclass
class PgCluster:
    """A running cluster; :meth:`new_database` and :meth:`new_schema` isolate the tests."""

    root: Path
    bindir: Path
    port: int
    run_as: str | None
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self, template: str | None = None) -> str:
        """Create an empty database (or a copy of ``template``); returns its URL."""
        name = f"t{next(self._names)}"
        # FILE_COPY: copying a small template file by file beats WAL-logging every block.
        copy = f" TEMPLATE {template} STRATEGY FILE_COPY" if template else ""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}{copy}")
        return self.url(name)

    def new_schema(self, database_url: str) -> str:
        """Create an empty schema in a database; returns a URL whose connections use it (its
        ``search_path``). Much faster than a new database, and as isolated for one test."""
        name = f"s{next(self._names)}"
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{database_url}?options=-csearch_path%3D{name}"

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(self, [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *args])

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def find_bindir() -> Path | None:
    """The newest PostgreSQL server binaries installed, or None."""
    found = glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
    found.sort(key=lambda p: int(v) if (v := Path(p).parts[-3]).isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


def _run(cluster: PgCluster, argv: list[str]) -> subprocess.CompletedProcess[str]:
    if cluster.run_as is not None:
        argv = ["runuser", "-u", cluster.run_as, "--", *argv]
    # cwd: the server user may not be able to enter the caller's directory.
    return subprocess.run(
        argv, cwd=cluster.root, capture_output=True, text=True, check=False, timeout=60
    )


def _check(result: subprocess.CompletedProcess[str], what: str, cluster: PgCluster) -> None:
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip() or cluster.log()
        pytest.fail(f"{what} failed (exit {result.returncode}): {detail}", pytrace=False)


def _missing(why: str) -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{why} ({SKIP_ENV}=1)")
    pytest.fail(f"{why}: run scripts/ci-deps (or set {SKIP_ENV}=1 to skip)", pytrace=False)


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        _missing(f"running as root needs the {RUN_AS!r} system user to start PostgreSQL")
    if shutil.which("runuser") is None:
        _missing("running as root needs runuser (util-linux) to start PostgreSQL")
    return RUN_AS


@contextlib.contextmanager
def cluster() -> Iterator[PgCluster]:
    """Start a throwaway cluster; stop and delete it on exit."""
    bindir = find_bindir()
    if bindir is None:
        _missing("PostgreSQL server binaries (initdb, pg_ctl) not found")
        raise AssertionError("unreachable")
    run_as = _server_user()
    root = Path(tempfile.mkdtemp(prefix="drover-pg-"))
    if run_as is not None:
        user = pwd.getpwnam(run_as)
        os.chown(root, user.pw_uid, user.pw_gid)
    pg = PgCluster(root=root, bindir=bindir, port=0, run_as=run_as)
    try:
        initdb = [str(bindir / "initdb"), "-D", str(pg.datadir), "-U", "postgres"]
        initdb += ["-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        _check(_run(pg, initdb), "initdb", pg)
        yield _start(pg)
    finally:
        if (pg.datadir / "postmaster.pid").exists():
            pg.pg_ctl("stop", "-m", "immediate", "-w")
        shutil.rmtree(root, ignore_errors=True)


def _start(pg: PgCluster) -> PgCluster:
    conf = pg.datadir / "postgresql.conf"
    base = conf.read_text()
    settings = {**_SETTINGS, "unix_socket_directories": f"'{pg.root}'"}
    for attempt in range(3):
        # Another process may take the free port between the probe and the bind: try another.
        pg.port = free_port()
        lines = [f"{key} = {value}" for key, value in {**settings, "port": pg.port}.items()]
        conf.write_text(base + "\n" + "\n".join(lines) + "\n")
        log = str(pg.root / "server.log")
        result = pg.pg_ctl("start", "-w", "-t", "30", "-l", log)
        if result.returncode == 0:
            return pg
        if attempt == 2 or "Address already in use" not in pg.log():
            _check(result, "pg_ctl start", pg)
    raise AssertionError("unreachable")


# -- fixtures (a conftest imports them: one cluster per suite directory that asks) -------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway PostgreSQL cluster for the whole run (fails, or skips, when not installed)."""
    with cluster() as started:
        yield started


@pytest.fixture(scope="session")
def pg_database(pg_cluster: PgCluster) -> str:
    """The database the tests' schemas live in."""
    return pg_cluster.new_database()


@pytest.fixture
def pg_url(pg_cluster: PgCluster, pg_database: str) -> str:
    """A URL of the test's own: an empty schema, which the first store to open migrates."""
    return pg_cluster.new_schema(pg_database)
