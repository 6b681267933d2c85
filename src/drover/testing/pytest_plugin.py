"""The ``fake_llm`` pytest fixture (registered through the ``pytest11`` entry point).

Each test gets its own started :class:`~drover.testing.server.FakeLLMServer` with an empty
script. At teardown the test fails if any request broke a history rule the real API enforces
(``violations``) or found no scripted response left (``unexpected``), unless the test set
``fake_llm.allow_violations = True`` / ``fake_llm.allow_unexpected = True``. The fixture is
synchronous, so it serves sync and async tests alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drover.testing.server import FakeLLMServer


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
    problems: list[str] = []
    if server.violations and not server.allow_violations:
        problems += [f"  violation: {line}" for line in server.violations]
    if server.unexpected and not server.allow_unexpected:
        problems += [f"  unexpected: {line}" for line in server.unexpected]
    if problems:
        pytest.fail(
            "fake-llm saw requests a real API would refuse:\n" + "\n".join(problems), pytrace=False
        )
