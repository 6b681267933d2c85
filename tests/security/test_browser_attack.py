"""The attacks the guard exists for, made by a real chromium (Debian's, under Playwright) on
a real ``drover serve`` that runs with its defaults: loopback, no token.

* A page on another origin (another port) sends what a page may send anywhere without asking:
  ``no-cors`` POSTs (untyped, a JSON Blob, text/plain, form-encoded, empty), form POSTs, and
  tries to read with ``fetch`` and ``EventSource``. No turn starts, no session is created, the
  model is never called, nothing of the session reaches the page.
* The same page under a name that resolves to 127.0.0.1 (DNS rebinding), its requests reaching
  drover as same-origin ones, gets a 4xx on every route and reads nothing.
"""

from __future__ import annotations

from typing import Any

from server.support import Served

from drover.testing.server import FakeLLMServer

from .attack import AttackSite
from .conftest import REBIND_HOST, SECRET


def _journal(served: Served, sid: str) -> tuple[Any, Any]:
    with served.client() as c:
        return c.get("/v1/sessions").json(), c.get(f"/v1/sessions/{sid}").json()


def test_a_page_on_another_origin_starts_nothing_and_reads_nothing(
    victim: tuple[Served, str], fake: FakeLLMServer, page: Any
) -> None:
    served, sid = victim
    before = _journal(served, sid)
    assert SECRET in str(before[1])
    calls = len(fake.requests)
    with AttackSite() as site:
        page.goto(site.url())
        sent = page.evaluate("([t, s]) => simple(t, s)", [served.url, sid])
        seen = page.evaluate("([t, s]) => reads(t, s)", [served.url, sid])
    # Every simple request was made and answered (an opaque answer): the browser did not stop
    # it, the server refused it.
    assert set(sent.values()) == {"opaque", "loaded"}, sent
    assert len(sent) == 22
    for name in ("list", "snapshot", "events", "json_post"):
        assert "rejected" in seen[name], (name, seen[name])
    assert seen["event_source"] == {"how": "closed", "got": []}
    assert SECRET not in str(seen)
    assert _journal(served, sid) == before
    assert len(fake.requests) == calls


def test_a_rebinding_page_gets_a_4xx_on_every_route(
    victim: tuple[Served, str], fake: FakeLLMServer, page: Any
) -> None:
    served, sid = victim
    before = _journal(served, sid)
    calls = len(fake.requests)
    with AttackSite(upstream=int(served.url.rsplit(":", 1)[1])) as site:
        page.goto(site.url(REBIND_HOST))
        assert page.evaluate("location.origin") == f"http://{REBIND_HOST}:{site.port}"
        seen = page.evaluate("(s) => everyRoute(s)", sid)
    event_source = seen.pop("event_source")
    assert len(seen) == 10
    for name, reply in seen.items():
        assert reply.get("status") == 421, (name, reply)
        assert '"misdirected_request"' in reply["body"], (name, reply)
    assert event_source == {"how": "closed", "got": []}
    assert SECRET not in str(seen)
    assert _journal(served, sid) == before
    assert len(fake.requests) == calls
