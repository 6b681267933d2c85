"""``open_runtime`` closes what it built (and the provider it was given) whatever fails.

In-process: a leaked provider is not visible from outside a ``drover`` process, so these tests
open the runtime directly with a real provider pointed at the fake server and look at its
HTTP client afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.cli.runtime import RunOptions, open_runtime
from drover.config import load_config
from drover.errors import DroverError
from drover.providers.anthropic import AnthropicProvider
from drover.testing.server import FakeLLMServer


@pytest.mark.parametrize(
    ("db", "workdir"),
    [
        ("mysql://nowhere/x", "."),  # no such journal backend
        ("journal.db", "missing-dir"),  # no such working directory
        (".", "."),  # a directory is no SQLite file
    ],
)
async def test_provider_is_closed_when_the_runtime_cannot_open(
    fake_llm: FakeLLMServer, tmp_path: Path, db: str, workdir: str
) -> None:
    provider = AnthropicProvider("anthropic:test", api_key="k", base_url=fake_llm.base_url)
    options = RunOptions(db=str(tmp_path / db), workdir=tmp_path / workdir)
    if "://" in db:
        options = RunOptions(db=db, workdir=tmp_path)
    with pytest.raises(DroverError):
        async with open_runtime(options, provider=provider, config=load_config()):
            pytest.fail("the runtime opened")
    assert provider._client.is_closed()


async def test_the_provider_in_use_at_the_end_is_closed(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    first = AnthropicProvider("anthropic:test", api_key="k", base_url=fake_llm.base_url)
    options = RunOptions(
        model="anthropic:test", base_url=fake_llm.base_url, db=str(tmp_path / "j.db")
    )
    async with open_runtime(options, provider=first, config=load_config()) as runtime:
        opened = await runtime.session()
        await runtime.switch_model(opened.session, "anthropic:other")
        assert first._client.is_closed()
        second = runtime.provider
        assert isinstance(second, AnthropicProvider) and not second._client.is_closed()
        assert str(second._client.base_url).rstrip("/") == fake_llm.base_url.rstrip("/")
    assert second._client.is_closed()
