"""Permission grants kept with their session: per session, durable, listed and revocable."""

from __future__ import annotations

import pytest

from drover.errors import StoreError
from drover.journal.protocol import Store

from .conftest import StoreFactory


async def test_grants_belong_to_their_session(store: Store) -> None:
    a = await store.create_session(workdir="/w", model="m")
    b = await store.create_session(workdir="/w", model="m")
    await store.add_grant(a.id, "bash")
    await store.add_grant(a.id, "write_file")
    await store.add_grant(a.id, "bash")  # again: kept once
    assert [g.rule for g in await store.grants(a.id)] == ["bash", "write_file"]
    assert await store.grants(b.id) == []


async def test_grants_are_revoked_one_or_all(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    for rule in ("bash", "edit_file", "write_file"):
        await store.add_grant(session.id, rule)
    assert await store.revoke_grants(session.id, "edit_file") == ["edit_file"]
    assert await store.revoke_grants(session.id, "edit_file") == []
    assert [g.rule for g in await store.grants(session.id)] == ["bash", "write_file"]
    assert sorted(await store.revoke_grants(session.id)) == ["bash", "write_file"]
    assert await store.grants(session.id) == []


async def test_a_grant_needs_its_session(store: Store) -> None:
    with pytest.raises(StoreError):
        await store.add_grant("no-such-session", "bash")


async def test_grants_outlive_the_store(make_store: StoreFactory) -> None:
    async with make_store() as first:
        session = await first.create_session(workdir="/w", model="m")
        await first.add_grant(session.id, "bash")
    async with make_store() as again:
        assert [g.rule for g in await again.grants(session.id)] == ["bash"]
