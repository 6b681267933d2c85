"""``drover --version`` and ``drover doctor``, run as real subprocesses on real set-ups: a good
one, a broken config file, an unreachable PostgreSQL, no bubblewrap on PATH, a journal of a newer
drover, and reachable PostgreSQL and Redis servers."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from support import pg
from support import redis as redis_support
from support.ports import free_port

from drover.store.migrations.steps import SQLITE_MIGRATIONS
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore
from drover.tools.sandbox import probe_sandbox, sandbox_settings

from .helpers import clean_env, run_drover

SECRET = "sk-ant-doctor-must-never-print-this"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _lines(stdout: str) -> dict[str, tuple[str, str]]:
    """``{check: (status, text)}`` of doctor's output."""
    found: dict[str, tuple[str, str]] = {}
    for line in stdout.splitlines():
        status, name, text = line[:4].strip(), line[6:16].strip(), line[18:]
        found[name] = (status, text)
    return found


def _journal(path: Path) -> Path:
    async def create() -> None:
        async with SqliteStore(path):
            pass

    asyncio.run(create())
    return path


def _require_sandbox() -> None:
    status = probe_sandbox(sandbox_settings(mode="workdir", network=False))
    if not status.active:
        why = f"no working bubblewrap sandbox here: {status.reason}"
        if os.environ.get("DROVER_REQUIRE_SANDBOX") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment of the test's own: config file, data directory, an API key set."""
    config = tmp_path / "config" / "drover" / "config.toml"  # where drover looks by default
    config.parent.mkdir(parents=True)
    config.write_text(
        'default_model = "anthropic:claude-sonnet-4-5"\nmax_turns = 10\n'
        '[sandbox]\nmode = "workdir"\n'
    )
    env = clean_env(
        DROVER_CONFIG=str(config),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        ANTHROPIC_API_KEY=SECRET,
    )
    env.pop("DROVER_REDIS", None)
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", *PROXY_VARIABLES):
        env.pop(name, None)
        env.pop(name.lower(), None)
    return env


def test_version_is_the_package_metadata() -> None:
    done = run_drover(["--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"drover {version('drover')}\n"


def test_a_good_setup_passes_every_check(tmp_path: Path, home: dict[str, str]) -> None:
    _require_sandbox()
    db = _journal(tmp_path / "journal.db")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"files": {"command": "true"}}}))
    done = run_drover(["doctor", "--db", str(db), "--workdir", str(work)], env=home)
    assert done.returncode == 0, done.stdout + done.stderr
    found = _lines(done.stdout)
    assert list(found) == [
        "python",
        "config",
        "api keys",
        "network",
        "journal",
        "postgresql",
        "sandbox",
        "redis",
        "mcp",
    ]
    assert {status for status, _ in found.values()} == {"ok"}, done.stdout
    assert SECRET not in done.stdout + done.stderr
    assert "ANTHROPIC_API_KEY set" in found["api keys"][1]
    assert found["network"][1] == (
        "model API through httpx (drover serve: aiohttp); CA bundle the system's; proxy none"
    )
    assert found["config"][1] == f"{home['DROVER_CONFIG']}: parsed (3 settings)"
    known = len(SQLITE_MIGRATIONS)
    assert found["journal"][1].startswith(f"{db}: writable; schema up to date ({known} migrations")
    assert found["sandbox"][1].startswith("bubblewrap ")
    assert found["mcp"][1].endswith(".mcp.json: parsed (1 servers)")


def test_the_sandbox_line_lists_what_it_enforces(tmp_path: Path, home: dict[str, str]) -> None:
    _require_sandbox()
    config = Path(home["DROVER_CONFIG"])
    config.write_text('[sandbox]\nallow_domains = ["pypi.org", "*.Example.org"]\nmemory_mb = 256\n')
    done = run_drover(["doctor", "--db", str(tmp_path / "j.db")], env=home)
    status, text = _lines(done.stdout)["sandbox"]
    assert status == "ok", done.stdout
    for feature in (
        "every capability dropped",
        "/proc/sys and the other global /proc knobs read-only",
        "home directory: only the toolchain allow-list",
        "/dev read-only, /dev/shm at most 256 MiB",
        "network: pypi.org, *.example.org through drover's proxy",
        "uid 65534 inside (drover runs as root)" if os.geteuid() == 0 else "your uid",
    ):
        assert feature in text, text


def test_a_broken_config_file_fails_and_the_rest_is_still_checked(
    tmp_path: Path, home: dict[str, str]
) -> None:
    Path(home["DROVER_CONFIG"]).write_text("default_model = 3\n")
    done = run_drover(["doctor", "--db", str(tmp_path / "new.db"), "--sandbox", "off"], env=home)
    assert done.returncode == 1
    found = _lines(done.stdout)
    status, text = found["config"]
    assert status == "FAIL"
    assert text.startswith(home["DROVER_CONFIG"]) and "default_model" in text
    assert found["journal"] == (
        "ok",
        f"{tmp_path / 'new.db'}: not created yet (its directory is writable; new schema)",
    )
    assert not (tmp_path / "new.db").exists()
    assert "Traceback" not in done.stderr


def test_a_ca_bundle_or_proxy_the_client_cannot_use_fails_the_network(
    tmp_path: Path, home: dict[str, str]
) -> None:
    args = ["doctor", "--db", str(tmp_path / "new.db"), "--sandbox", "off"]
    missing = tmp_path / "no-such-ca.pem"
    done = run_drover(args, env={**home, "SSL_CERT_FILE": str(missing)})
    assert done.returncode == 1
    found = _lines(done.stdout)
    assert found["network"] == (
        "FAIL",
        f"SSL_CERT_FILE names {str(missing)!r}, which is not a usable CA bundle: "
        "No such file or directory",
    )
    assert found["journal"][0] == "ok"  # (the rest is still checked)
    proxy = "ftp://user:proxy-password@proxy.example"
    done = run_drover(args, env={**home, "https_proxy": proxy})
    status, text = _lines(done.stdout)["network"]
    assert (status, text.split(":")[0]) == ("FAIL", "https_proxy is not a proxy URL drover can use")
    assert "proxy-password" not in done.stdout + done.stderr
    done = run_drover(args, env={**home, "HTTPS_PROXY": "http://u:proxy-password@proxy:3128"})
    assert _lines(done.stdout)["network"] == (
        "ok",
        "model API through httpx (drover serve: aiohttp); CA bundle the system's; "
        "proxy HTTPS_PROXY",
    )
    assert "proxy-password" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_postgresql_fails_without_showing_its_password(
    home: dict[str, str],
) -> None:
    url = f"postgresql://drover:pg-pass-word@127.0.0.1:{free_port()}/drover"
    done = run_drover(["doctor", "--db", url, "--sandbox", "off"], env=home)
    assert done.returncode == 1
    found = _lines(done.stdout)
    status, text = found["postgresql"]
    assert status == "FAIL"
    assert "unreachable" in text
    assert "journal" not in found  # the journal is that PostgreSQL
    assert "pg-pass-word" not in done.stdout + done.stderr


def test_no_bubblewrap_on_path_fails_the_sandbox(tmp_path: Path, home: dict[str, str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_drover(["doctor", "--db", ":memory:"], env={**home, "PATH": str(empty)})
    assert done.returncode == 1
    status, text = _lines(done.stdout)["sandbox"]
    assert status == "FAIL"
    assert text.startswith("bubblewrap is not installed")


def test_a_journal_of_a_newer_drover_fails(tmp_path: Path, home: dict[str, str]) -> None:
    db = _journal(tmp_path / "journal.db")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES ('9999_from_the_future', 0)")
    conn.close()
    done = run_drover(["doctor", "--db", str(db), "--sandbox", "off"], env=home)
    assert done.returncode == 1
    status, text = _lines(done.stdout)["journal"]
    assert status == "FAIL"
    assert "schema of a newer drover" in text and "9999_from_the_future" in text


def test_a_broken_mcp_config_fails(tmp_path: Path, home: dict[str, str]) -> None:
    broken = tmp_path / "mcp.json"
    broken.write_text("{not json")
    args = ["doctor", "--db", ":memory:", "--sandbox", "off", "--mcp-config", str(broken)]
    done = run_drover(args, env=home)
    assert done.returncode == 1
    status, text = _lines(done.stdout)["mcp"]
    assert (status, text.startswith(f"{broken}: not valid JSON")) == ("FAIL", True)


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[pg.PgCluster]:
    with pg.cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def redis_server() -> Iterator[redis_support.RedisServer]:
    with redis_support.server() as server:
        yield server


def test_reachable_postgresql_and_redis_pass(
    pg_cluster: pg.PgCluster, redis_server: redis_support.RedisServer, home: dict[str, str]
) -> None:
    url = pg_cluster.new_schema(pg_cluster.new_database())
    args = ["doctor", "--db", url, "--redis", redis_server.url, "--sandbox", "off"]
    before = _lines(run_drover(args, env=home).stdout)["postgresql"]
    # An empty database: reachable, and the first open will create the schema.
    assert before[0] == "ok"
    assert "reachable; schema at 0 of" in before[1]

    async def migrate() -> None:
        async with PostgresStore(url):
            pass

    asyncio.run(migrate())
    done = run_drover(args, env=home)
    found = _lines(done.stdout)
    assert found["postgresql"][0] == "ok"
    assert "reachable; schema up to date" in found["postgresql"][1]
    assert found["redis"][0] == "ok"
    assert found["redis"][1].startswith("reachable (Redis ")
    assert done.returncode == 0, done.stdout  # the sandbox is off: a warning
    assert found["sandbox"][0] == "warn"
