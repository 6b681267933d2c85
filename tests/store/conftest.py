"""Fixtures of the store suite: the backends every conformance test runs against.

Adding a backend is one entry in :data:`BACKENDS`: a function from the test's temporary
directory to a factory of new, unopened stores on one shared database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from drover.store.base import Store
from drover.store.sqlite import SqliteStore

StoreFactory = Callable[..., Store]


def _sqlite(tmp_path: Path) -> StoreFactory:
    return lambda **kwargs: SqliteStore(tmp_path / "journal.db", **kwargs)


BACKENDS: dict[str, Callable[[Path], StoreFactory]] = {
    "sqlite": _sqlite,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(backend: str, tmp_path: Path) -> StoreFactory:
    """New stores on the test's database (each call: another instance, e.g. another worker)."""
    return BACKENDS[backend](tmp_path)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[Store]:
    async with make_store() as opened:
        yield opened


@pytest.fixture
def owner() -> str:
    return "test-host:1:1"
