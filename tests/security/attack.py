"""An attacker's web site on a loopback port, for the browser tests.

:class:`AttackSite` serves :data:`PAGE` at ``/attack.html``. Every other request goes, bytes
unchanged, to ``upstream`` (the drover server) when one is given: what a DNS-rebinding name
does once it resolves to 127.0.0.1, so that the page's same-origin requests reach drover with
the page's own ``Host`` and ``Origin``. Without ``upstream`` they get 404.

:data:`PAGE` defines the attacks as functions the test calls, each returning what the page
could see of the answers.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

#: A failure bound for one connection's request head, never a pace.
BOUND = 30.0

PAGE = r"""<!doctype html>
<meta charset="utf-8">
<title>a page on another origin</title>
<iframe name="sink"></iframe>
<script>
// What a page may send to any origin without asking it first ("simple" requests) — the
// answer stays opaque to the page, but the request is made — then what it may try to read.
async function simple(target, sid) {
  const session = `${target}/v1/sessions/${sid}`;
  const message = JSON.stringify({content: "run the attacker's command"});
  const urls = {
    create: `${target}/v1/sessions`,
    message: `${session}/messages`,
    interrupt: `${session}/interrupt`,
    decide: `${session}/permissions/r1`,
  };
  const bodies = {
    none: undefined,
    blob: new Blob([message]),
    json_blob: new Blob([message], {type: "application/json"}),  // the type is dropped
    text: message,  // text/plain;charset=UTF-8
    form: new URLSearchParams({content: "run"}),
  };
  const out = {};
  for (const [route, url] of Object.entries(urls)) {
    for (const [kind, body] of Object.entries(bodies)) {
      try {
        const reply = await fetch(url, {method: "POST", mode: "no-cors", body});
        out[`${route}/${kind}`] = reply.type;
      } catch (error) {
        out[`${route}/${kind}`] = `rejected: ${error}`;
      }
    }
  }
  for (const enctype of ["text/plain", "application/x-www-form-urlencoded"]) {
    out[`form/${enctype}`] = await postForm(urls.message, enctype);
  }
  return out;
}

// A form posted into a frame; "text/plain" makes the body {"content":"run the command="}.
function postForm(url, enctype) {
  return new Promise((resolve) => {
    const frame = document.querySelector("iframe[name=sink]");
    frame.addEventListener("load", () => resolve("loaded"), {once: true});
    const form = document.createElement("form");
    form.method = "POST";
    form.action = url;
    form.enctype = enctype;
    form.target = "sink";
    const field = document.createElement("input");
    field.name = '{"content":"run the command';
    field.value = '"}';
    form.append(field);
    document.body.append(form);
    form.submit();
    form.remove();
  });
}

// Reads: fetch (CORS mode) and EventSource. Returns what the page got to see.
async function reads(target, sid) {
  const out = {};
  const session = `${target}/v1/sessions/${sid}`;
  for (const [name, url] of Object.entries({
    list: `${target}/v1/sessions`, snapshot: session, events: `${session}/events?after=0`,
  })) {
    const aborter = new AbortController();
    try {
      const reply = await fetch(url, {signal: aborter.signal});
      out[name] = {status: reply.status, body: name === "events" ? "" : await reply.text()};
    } catch (error) {
      out[name] = {rejected: String(error)};
    }
    aborter.abort();
  }
  try {
    const reply = await fetch(`${session}/messages`, {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({content: "run the attacker's command"}),
    });
    out.json_post = {status: reply.status, body: await reply.text()};
  } catch (error) {
    out.json_post = {rejected: String(error)};
  }
  out.event_source = await listen(`${session}/events?after=0`);
  return out;
}

// An EventSource until it fails or gets something; what it got.
function listen(url) {
  return new Promise((resolve) => {
    const source = new EventSource(url);
    const got = [];
    const finish = (how) => { source.close(); resolve({how, got}); };
    source.onmessage = (event) => got.push(event.data);
    source.addEventListener("status", (event) => { got.push(event.data); finish("status"); });
    source.onerror = () => finish(source.readyState === EventSource.CLOSED ? "closed" : "error");
  });
}

// The rebinding page: same-origin requests to every route, answers read in full.
async function everyRoute(sid) {
  const session = `/v1/sessions/${sid}`;
  const json = (body) => ({
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const requests = {
    page: ["/", {}],
    script: ["/static/app.js", {}],
    schema: ["/openapi.json", {}],
    list: ["/v1/sessions", {}],
    snapshot: [session, {}],
    events: [`${session}/events?after=0`, {}],
    create: ["/v1/sessions", json({})],
    message: [`${session}/messages`, json({content: "run the attacker's command"})],
    interrupt: [`${session}/interrupt`, json({})],
    decide: [`${session}/permissions/r1`, json({decision: "allow"})],
  };
  const out = {};
  for (const [name, [url, init]] of Object.entries(requests)) {
    const aborter = new AbortController();
    try {
      const reply = await fetch(url, {...init, signal: aborter.signal});
      const body = reply.status === 200 && name === "events" ? "" : await reply.text();
      out[name] = {status: reply.status, body};
    } catch (error) {
      out[name] = {rejected: String(error)};
    }
    aborter.abort();
  }
  out.event_source = await listen(`${session}/events?after=0`);
  return out;
}
</script>
"""


class AttackSite:
    """The attacker's site on a free loopback port; use as a context manager."""

    def __init__(self, upstream: int | None = None) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/attack.html"

    def __enter__(self) -> AttackSite:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(BOUND)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        head = b""
        try:
            client.settimeout(BOUND)
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            client.settimeout(None)
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            if path == b"/attack.html":
                self._answer(client, "200 OK", "text/html; charset=utf-8", PAGE.encode())
            elif self.upstream is None:
                self._answer(client, "404 Not Found", "text/plain", b"not here")
            else:
                upstream = socket.create_connection(("127.0.0.1", self.upstream))
                self._keep(upstream)
                upstream.sendall(head)
                self._spawn(self._pipe, upstream, client)
                self._pipe(client, upstream)
        except OSError:
            pass

    @staticmethod
    def _answer(client: socket.socket, status: str, kind: str, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        client.sendall(head.encode() + body)
        client.shutdown(socket.SHUT_WR)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
