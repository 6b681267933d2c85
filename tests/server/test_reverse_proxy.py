"""``drover serve`` behind a real nginx running the server block ``docs/deployment.md``
documents (TLS at nginx, ``Host`` passed on): a turn's events arrive live, not buffered; a
reconnect with ``Last-Event-ID`` resumes after that event; the Responses door streams live
too; the public name is accepted only when drover is told it; drover's keep-alive comments
hold an idle stream open past nginx's ``proxy_read_timeout`` (and without them nginx cuts
it); the web page loads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import openai
from support.sse import sse_lines

from drover.testing.server import FakeLLMServer

from .nginx import PUBLIC_NAME, Proxied
from .support import TERMINAL, Sse, check_stream, new_session, parse_sse, read_events

#: An answer of many deltas (8 characters each), and the stream frame it stalls after: inside
#: its text.
LONG = "Working through the request step by step, and this goes on for a good while. " * 2
STALL = 7
TOKEN = "proxied-token"
#: Seconds a read through nginx may wait for what a test awaits: a failure bound, short enough
#: that a buffering proxy fails the test quickly instead of at the suite's general bound.
LIVE_BOUND = 10.0


def _post(c: httpx2.Client, sid: str, content: str) -> str:
    reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": content})
    assert reply.status_code == 202, reply.text
    return str(reply.json()["turn_id"])


def _events(c: httpx2.Client, sid: str) -> Any:
    return c.stream("GET", f"/v1/sessions/{sid}/events", timeout=LIVE_BOUND)


def _numbered(lines: Iterator[str]) -> Iterator[Sse]:
    """The events of ``lines``, but the ``status`` that opens every subscription."""
    return (ev for ev in parse_sse(lines) if ev.event != "status")


def test_a_turn_streams_live_through_nginx(
    fake_llm: FakeLLMServer, proxied: Callable[..., Proxied]
) -> None:
    """The model's stream stalls inside its text: the text before the stall reaches the client
    through nginx while the turn still runs (a buffering proxy would hold it back until the
    end); then the turn is interrupted and its end comes through the same stream."""
    fake_llm.script({"text": LONG, "stall_after": STALL})
    proxy = proxied()
    with proxy.client() as c:
        sid = new_session(c)
        with _events(c, sid) as response:
            assert response.status_code == 200, response.read()
            events = _numbered(sse_lines(response))
            turn_id = _post(c, sid, "go")
            first = next(ev for ev in events if ev.event in TERMINAL | {"text_delta"})
            assert first.event == "text_delta", first
            assert first.data["turn_id"] == turn_id and LONG.startswith(first.data["text"])
            assert c.get(f"/v1/sessions/{sid}").json()["running_turn_id"] == turn_id
            assert c.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 202
            end = next(ev for ev in events if ev.event in TERMINAL)
    assert end.data["turn_id"] == turn_id and end.data["reason"] == "interrupted"


def test_a_response_streams_live_through_nginx(
    fake_llm: FakeLLMServer, proxied: Callable[..., Proxied]
) -> None:
    """The Responses door through nginx, read by the OpenAI SDK: its first text delta arrives
    while the model's stream is stalled (not buffered to the end), and a cancel ends the same
    stream."""
    fake_llm.script({"text": LONG, "stall_after": STALL})
    proxy = proxied()
    with proxy.client() as http:
        url = f"https://127.0.0.1:{proxy.nginx.port}/v1"
        client = openai.OpenAI(
            base_url=url, api_key="-", max_retries=0, http_client=http, timeout=LIVE_BOUND
        )
        seen: list[Any] = []
        with client.responses.create(model="any", input="go", background=True, stream=True) as s:
            for event in s:
                seen.append(event)
                if event.type.startswith("response.output_text."):
                    break
            first = seen[-1]
            assert first.type == "response.output_text.delta" and LONG.startswith(first.delta)
            response_id = seen[0].response.id
            assert client.responses.retrieve(response_id).status == "in_progress"
            cancelled = client.responses.cancel(response_id)
            last = list(s)[-1]
    assert cancelled.status == "cancelled"
    assert last.type == "response.incomplete" and last.response.status == "cancelled"


def test_a_reconnect_with_last_event_id_through_nginx_resumes_after_it(
    fake_llm: FakeLLMServer, proxied: Callable[..., Proxied]
) -> None:
    """Cut after the third text delta, the client reconnects through nginx with that id: the
    events after it, none twice, none missing, the text without a hole."""
    fake_llm.script({"text": LONG, "delay": 0.01})
    proxy = proxied()
    with proxy.client() as c:
        sid = new_session(c)
        _post(c, sid, "go")
        deltas = lambda _, got: sum(ev.event == "text_delta" for ev in got) == 3  # noqa: E731
        before = read_events(c, sid, until=deltas)
        cut = before[-1].id
        assert cut is not None and before[-1].event == "text_delta"
        after = read_events(c, sid, last_event_id=cut)
        reference = read_events(c, sid, after=0)
    assert after[0].id == cut + 1
    check_stream(before + after, reference)
    assert after[-1].event == "done"


def test_the_public_name_is_accepted_when_drover_is_given_it(
    proxied: Callable[..., Proxied],
) -> None:
    """nginx passes the client's ``Host`` on, port included: drover started with
    ``--allowed-host`` for the public name answers to it, and takes the page's own origin
    (``https://`` and that ``Host``) as its own; another name gets drover's 421; the bearer
    token passes through."""
    proxy = proxied("--token", TOKEN)
    origin = f"https://{PUBLIC_NAME}:{proxy.nginx.port}"
    with proxy.client(token=TOKEN) as c:
        created = c.post("/v1/sessions", json={}, headers={"Origin": origin})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        # The browser's EventSource cannot send a header: its token rides in the query.
        del c.headers["Authorization"]
        with c.stream("GET", f"/v1/sessions/{sid}/events?token={TOKEN}") as response:
            assert response.status_code == 200, response.read()
    with proxy.client() as c:
        assert c.post("/v1/sessions", json={}).status_code == 401
    with proxy.client(host="elsewhere.example", token=TOKEN) as c:
        refused = c.post("/v1/sessions", json={})
        assert refused.status_code == 421
        assert refused.json()["error"]["code"] == "misdirected_request"


def test_the_public_name_is_refused_without_allowed_host(
    proxied: Callable[..., Proxied],
) -> None:
    """Started without ``--allowed-host``, drover refuses the public name nginx passes on,
    with its own 421 naming it."""
    proxy = proxied(public=False)
    with proxy.client() as c:
        refused = c.post("/v1/sessions", json={})
        assert refused.status_code == 421, refused.text
        assert refused.json()["error"]["code"] == "misdirected_request"
        assert PUBLIC_NAME in refused.json()["error"]["message"]


def test_heartbeats_keep_an_idle_stream_open_past_the_proxy_read_timeout(
    fake_llm: FakeLLMServer, proxied: Callable[..., Proxied]
) -> None:
    """nginx closes a proxied connection silent for ``proxy_read_timeout`` (2 s here: ten
    heartbeats, so a slow machine's pause cannot pass for silence); with ``--heartbeat 0.2``
    an idle stream outlives it twice over, and then still carries a turn's events."""
    fake_llm.script({"text": "After a long wait."})
    proxy = proxied("--heartbeat", "0.2", read_timeout="2s")
    with proxy.client() as c:
        sid = new_session(c)
        with _events(c, sid) as response:
            assert response.status_code == 200, response.read()
            lines = sse_lines(response)
            opened, pings = time.monotonic(), 0
            for line in lines:
                pings += line == ": ping"
                if time.monotonic() - opened > 4.5:
                    break
            assert pings >= 3, pings
            turn_id = _post(c, sid, "still there?")
            end = next(ev for ev in _numbered(lines) if ev.event in TERMINAL)
    assert end.event == "done" and end.data["turn_id"] == turn_id
    assert "upstream timed out" not in proxy.nginx.log()


def test_without_heartbeats_nginx_cuts_an_idle_stream(
    proxied: Callable[..., Proxied],
) -> None:
    """The inverse: a heartbeat above ``proxy_read_timeout`` lets nginx close the idle stream
    at its timeout (the client then reconnects with ``Last-Event-ID``)."""
    proxy = proxied("--heartbeat", "60", read_timeout="1s")
    with proxy.client() as c:
        sid = new_session(c)
        opened = time.monotonic()
        lines: list[str] = []
        try:
            with _events(c, sid) as response:
                assert response.status_code == 200, response.read()
                for line in sse_lines(response):
                    lines.append(line)
                    assert time.monotonic() - opened < LIVE_BOUND, "the stream was not cut"
        except httpx2.RemoteProtocolError:
            pass  # nginx ends the chunked body without its last chunk
    assert ": ping" not in lines
    assert "upstream timed out" in proxy.nginx.log()


def test_the_web_page_loads_through_nginx(proxied: Callable[..., Proxied]) -> None:
    proxy = proxied()
    with proxy.client() as c:
        page = c.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="static/app.js">' in page.text
        script = c.get("/static/app.js")
        assert script.status_code == 200 and "EventSource" in script.text
