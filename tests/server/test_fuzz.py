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

#: What the model answers, in turn: a completed turn, then a failed one.
ANSWERS = (
    {"text": "ok"},
    {"http_error": {"status": 400, "type": "invalid_request_error", "message": "refused"}},
)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fake = FakeLLMServer()
    # Fuzzed messages start turns: each is answered at once, by a text or by a refusal (a
    # turn that fails). Left unanswered, a request would get the fake's 500, which the
    # provider retries with its back-off (~4-7 s a turn, for nothing the schema checks).
    fake.script(*ANSWERS * 100)
    fake.allow_unexpected = True  # more turns than that are still answered (a 500)
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
