"""The API fuzzed from its own OpenAPI schema (schemathesis) against a real ``drover serve``:
no 5xx, every status, content type and body as the schema says, bad input refused.

The event stream is left out: it never ends, and its own tests cover it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from drover.server import openapi
from drover.testing.server import FakeLLMServer

from .support import start_server


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fake = FakeLLMServer()
    fake.allow_unexpected = True  # fuzzed messages start turns the script does not answer
    fake.start()
    served = start_server(fake, Path(tmp_path_factory.mktemp("fuzz")), "--max-body", "4096")
    try:
        with served.client() as c:  # the schema fuzzed here is the one the server serves
            assert c.get("/openapi.json").json() == openapi.schema()
        yield served.url
    finally:
        served.close()
        fake.stop()


schema = schemathesis.openapi.from_dict(openapi.schema()).exclude(path_regex="/events$")
# A body over --max-body is refused before it is read, valid or not: 413 is how the server
# refuses any such body (the doors' messages can be large).
for check in (
    schema.config.checks.negative_data_rejection,
    schema.config.checks.positive_data_acceptance,
):
    check.expected_statuses = [*check.expected_statuses, "413"]


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_keeps_to_its_schema(case: Any, base_url: str) -> None:
    case.call_and_validate(base_url=base_url)
