"""Fixtures of the store suite: the backends every conformance test runs against.

Adding a backend is one entry in :data:`BACKENDS`: a function from the test's request and
temporary directory to a factory of new, unopened stores on one shared database, fresh for the
test. PostgreSQL runs on a throwaway cluster started once per session (``support.pg``); each
test gets a schema of its own, empty, so every test also runs the migrations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from support.pg import pg_cluster, pg_database, pg_url

from drover.journal.protocol import Store
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore

StoreFactory = Callable[..., Store]

__all__ = ["pg_cluster", "pg_database", "pg_url"]  # (fixtures, shared with the server suite)


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    return lambda **kwargs: SqliteStore(tmp_path / "journal.db", **kwargs)


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    url = str(request.getfixturevalue("pg_url"))
    return lambda **kwargs: PostgresStore(url, **kwargs)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], StoreFactory]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """New stores on the test's database (each call: another instance, e.g. another worker)."""
    return BACKENDS[backend](request, tmp_path)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[Store]:
    async with make_store() as opened:
        yield opened


@pytest.fixture
def owner() -> str:
    return "test-host:1:1"
