"""Each rule of the guard, over HTTP against a real ``drover serve``: the ``Host`` allow-list,
the JSON content type (empty bodies included), the ``Origin`` and ``Sec-Fetch-Site`` rules, and
the bearer token. Every refused request leaves the journal as it was and calls no model."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from server.support import BOUND, Served

from drover.server import openapi
from drover.testing.server import FakeLLMServer

from .conftest import SECRET

TOKEN = "alpha-token"
REBIND = "rebind.example"


@pytest.fixture(scope="module")
def configured(spawn: Callable[..., Served]) -> Served:
    """A server with a token, a public name and one allowed web page."""
    return spawn(
        "--token",
        TOKEN,
        "--allowed-host",
        "drover.test",
        "--cors-origin",
        "http://page.test:3000",
    )


def _state(c: httpx2.Client, sid: str) -> tuple[Any, Any]:
    return c.get("/v1/sessions").json(), c.get(f"/v1/sessions/{sid}").json()


def _routes(sid: str) -> list[tuple[str, str, Any]]:
    """Every route of the server, with a body a legitimate client would send."""
    session = f"/v1/sessions/{sid}"
    return [
        ("GET", "/", None),
        ("GET", "/static/app.js", None),
        ("GET", "/openapi.json", None),
        ("GET", "/v1/sessions", None),
        ("GET", session, None),
        ("GET", f"{session}/events?after=0", None),
        ("POST", "/v1/sessions", {}),
        ("POST", f"{session}/messages", {"content": "go"}),
        ("POST", f"{session}/interrupt", {}),
        ("POST", f"{session}/permissions/r1", {"decision": "allow"}),
        ("PATCH", session, {"title": "renamed by a page"}),
        ("DELETE", session, None),
        ("OPTIONS", f"{session}/messages", None),
    ]


def _body_routes(sid: str) -> list[tuple[str, str, dict[str, Any], bool]]:
    """Every route of the schema that takes a body (a route added later is covered, the other
    protocols' doors too): method, path, a valid body, and whether the route also takes a
    request with no body at all (it takes none: a cancel, an interrupt)."""
    chat = [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]
    bodies: dict[str, Any] = {
        "content": "go",
        "decision": "allow",
        "title": "a title",
        "id": sid,
        "messages": chat,
        "model": "drover",
        "input": "go",
        "background": True,
        "turn_id": "t1",
    }
    out = []
    for path, operations in openapi.schema()["paths"].items():
        for method, operation in operations.items():
            if "requestBody" not in operation:
                continue
            schema = operation["requestBody"]["content"]["application/json"]["schema"]
            body = {name: bodies[name] for name in schema["required"]}
            where = path.replace("{session_id}", sid).replace("{request_id}", "r1")
            where = where.replace("{response_id}", "resp_1")
            empty = not operation["requestBody"]["required"]
            out.append((method.upper(), where, body, empty))
    assert sorted(method for method, _, _, _ in out) == ["PATCH", *["POST"] * 9]
    return out


def _assert_error(reply: httpx2.Response, status: int, code: str) -> None:
    assert reply.status_code == status, (reply.request.method, reply.request.url, reply.text)
    error = reply.json()["error"]
    assert error["code"] == code and error["message"], reply.text
    assert SECRET not in reply.text


# -- Host ------------------------------------------------------------------------------------


def test_a_foreign_host_gets_421_on_every_route(victim: tuple[Served, str]) -> None:
    served, sid = victim
    port = served.url.rsplit(":", 1)[1]
    with served.client() as c:
        before = _state(c, sid)
        for host in (f"{REBIND}:{port}", REBIND, "localhost.rebind.example", "127.0.0.1.nip.io"):
            # As a rebinding page sends them: its own origin, JSON bodies.
            origin = {"Origin": f"http://{host}", "Host": host}
            for method, path, body in _routes(sid):
                reply = c.request(method, path, json=body, headers=origin)
                _assert_error(reply, 421, "misdirected_request")
        for bad in ("localhost:x", "[::1", "::1", "a b", "127.0.0.1:8000:1", ""):
            _assert_error(c.get("/v1/sessions", headers={"Host": bad}), 421, "misdirected_request")
        assert _state(c, sid) == before


def test_loopback_names_and_addresses_are_allowed_with_any_port(
    victim: tuple[Served, str],
) -> None:
    served, _ = victim
    with served.client() as c:
        for host in ("127.0.0.1", "127.0.0.1:1", "localhost", "LOCALHOST:80", "[::1]:9", "[::1]"):
            reply = c.get("/v1/sessions", headers={"Host": host})
            assert reply.status_code == 200, (host, reply.text)


def test_a_request_with_no_host_is_refused(victim: tuple[Served, str]) -> None:
    served, _ = victim
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=BOUND) as sock:
        sock.sendall(b"GET /v1/sessions HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 421 "), answer
    assert b'"misdirected_request"' in answer


def test_allowed_host_names_a_public_name_and_is_checked_before_the_token(
    configured: Served,
) -> None:
    with configured.client(TOKEN) as c:
        for host in ("drover.test", "drover.test:443", "DROVER.test:8000"):
            assert c.get("/v1/sessions", headers={"Host": host}).status_code == 200, host
        _assert_error(c.get("/", headers={"Host": "other.test"}), 421, "misdirected_request")
    with configured.client() as anonymous:
        assert anonymous.get("/v1/sessions").status_code == 401
        reply = anonymous.get("/v1/sessions", headers={"Host": "other.test"})
        _assert_error(reply, 421, "misdirected_request")


# -- content type ----------------------------------------------------------------------------


def test_every_body_needs_application_json_even_when_empty(
    victim: tuple[Served, str], fake: FakeLLMServer
) -> None:
    served, sid = victim
    calls = len(fake.requests)
    with served.client() as c:
        before = _state(c, sid)
        bodiless = []
        for method, path, body, empty in _body_routes(sid):
            json_text = json.dumps(body).encode()
            if empty:
                bodiless.append(path.rsplit("/", 1)[1])
            for headers, content in [
                # A no-cors fetch or a form with nothing in it; on a route that takes no body,
                # a request with none (the Origin rule refuses a page's, below).
                *([] if empty else [({}, b"")]),
                ({}, json_text),  # a no-cors fetch of a Blob: no Content-Type at all
                ({"Content-Type": "text/plain"}, b""),
                ({"Content-Type": "text/plain;charset=UTF-8"}, json_text),
                ({"Content-Type": "application/x-www-form-urlencoded"}, b"content=go"),
                ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--\r\n"),
                ({"Content-Type": "application/jsonx"}, json_text),
            ]:
                reply = c.request(method, path, content=content, headers=headers)
                _assert_error(reply, 415, "unsupported_media_type")
        assert _state(c, sid) == before
        # JSON passes, whatever its parameters or case, and an empty JSON body is {}.
        json_type = {"Content-Type": "APPLICATION/JSON; charset=utf-8"}
        assert c.post("/v1/sessions", content=b"", headers=json_type).status_code == 201
        assert c.post(f"/v1/sessions/{sid}/interrupt", headers=json_type).status_code == 409
        # No body at all, as HTTP clients send one, on the routes that take none.
        assert sorted(bodiless) == ["cancel", "interrupt"]
        assert c.post(f"/v1/sessions/{sid}/interrupt").status_code == 409
        assert c.post("/v1/responses/resp_1/cancel").status_code == 404
    assert len(fake.requests) == calls


# -- Origin and Sec-Fetch-Site ---------------------------------------------------------------


def test_a_foreign_origin_is_refused_on_the_api_and_on_every_post(
    victim: tuple[Served, str], fake: FakeLLMServer
) -> None:
    served, sid = victim
    own = served.url
    port = own.rsplit(":", 1)[1]
    calls = len(fake.requests)
    foreign = [
        "http://127.0.0.1:1",  # another port: another origin (the same site)
        f"http://localhost:{port}",  # another name for the same address: another origin
        f"http://{REBIND}:{port}",
        "null",  # sandboxed frames, file: pages
        "",
    ]
    with served.client() as c:
        before = _state(c, sid)
        for origin in foreign:
            for method, path, body in _routes(sid):
                reply = c.request(method, path, json=body, headers={"Origin": origin})
                if path in ("/", "/static/app.js", "/openapi.json"):
                    assert reply.status_code == 200, (origin, path)  # public files
                else:
                    _assert_error(reply, 403, "forbidden_origin")
            # A page may not post even to the public paths.
            reply = c.post("/", json={}, headers={"Origin": origin})
            _assert_error(reply, 403, "forbidden_origin")
        assert _state(c, sid) == before
        # The server's own origin, as the web page sends it (either scheme, behind TLS).
        for origin in (own, own.replace("http:", "https:"), own.upper()):
            reply = c.post("/v1/sessions", json={}, headers={"Origin": origin})
            assert reply.status_code == 201, (origin, reply.text)
            assert c.get(f"/v1/sessions/{sid}", headers={"Origin": origin}).status_code == 200
    assert len(fake.requests) == calls


def test_sec_fetch_site_from_another_site_is_refused_without_an_origin(
    victim: tuple[Served, str],
) -> None:
    served, sid = victim
    with served.client() as c:
        for site in ("cross-site", "same-site"):
            headers = {"Sec-Fetch-Site": site}
            for path in ("/v1/sessions", f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/events"):
                _assert_error(c.get(path, headers=headers), 403, "forbidden_origin")
            reply = c.post(f"/v1/sessions/{sid}/interrupt", json={}, headers=headers)
            _assert_error(reply, 403, "forbidden_origin")
            assert c.get("/", headers=headers).status_code == 200  # a link to the page
        for site in ("same-origin", "none"):  # the page itself; an address typed by the user
            assert c.get("/v1/sessions", headers={"Sec-Fetch-Site": site}).status_code == 200


def test_cors_origin_allows_one_other_page(configured: Served) -> None:
    page = "http://page.test:3000"
    with configured.client(TOKEN) as c:
        reply = c.post("/v1/sessions", json={}, headers={"Origin": page})
        assert reply.status_code == 201
        assert reply.headers["access-control-allow-origin"] == page
        sid = reply.json()["id"]
        for method, path in (
            ("POST", f"/v1/sessions/{sid}/messages"),
            ("PATCH", f"/v1/sessions/{sid}"),
            ("DELETE", f"/v1/sessions/{sid}"),
        ):
            preflight = c.options(
                path,
                headers={
                    "Origin": page,
                    "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": "authorization, content-type",
                },
            )
            assert preflight.status_code == 200, (method, preflight.text)
            assert preflight.headers["access-control-allow-origin"] == page
            assert method in preflight.headers["access-control-allow-methods"]
        renamed = c.patch(
            f"/v1/sessions/{sid}", json={"title": "by the page"}, headers={"Origin": page}
        )
        assert renamed.status_code == 200 and renamed.headers["access-control-allow-origin"] == page
        headers = {"Origin": page, "Sec-Fetch-Site": "cross-site"}
        assert c.get(f"/v1/sessions/{sid}", headers=headers).status_code == 200
        for other in ("http://page.test:3001", "https://page.test:3000", "http://evil.test"):
            reply = c.get(f"/v1/sessions/{sid}", headers={"Origin": other})
            _assert_error(reply, 403, "forbidden_origin")
            assert "access-control-allow-origin" not in reply.headers


# -- token -----------------------------------------------------------------------------------


def test_only_an_accepted_token_passes(configured: Served) -> None:
    with configured.client(TOKEN) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
    for token in ("alpha-tokeN", "alpha-token-", "alpha-toke", "beta-token", "x" * 64):
        with configured.client(token) as c:
            _assert_error(c.get("/v1/sessions"), 401, "unauthorized")
            _assert_error(c.get(f"/v1/sessions/{sid}/events?token={TOKEN}"), 401, "unauthorized")
    with (
        configured.client() as c,
        c.stream("GET", f"/v1/sessions/{sid}/events?token={TOKEN}") as stream,
    ):
        assert stream.status_code == 200
