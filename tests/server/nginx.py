"""A real nginx in front of a ``drover serve``, run by the test as its own unprivileged process,
with the server block that ``docs/deployment.md`` documents.

:func:`documented_server_block` reads the one ``nginx`` code block of that page, so the tests
run exactly what a reader copies. :func:`start_nginx` changes only what must differ on a test
machine — the address it listens on (a free loopback port), the upstream (the test's
``drover serve``), the certificate files and, when a test asks, ``proxy_read_timeout`` — each
replacement checked to apply once, so a change to the page that a test would silently stop
covering fails instead. Everything nginx writes (pid, logs, temporary files) goes under the
test's directory; ``daemon off`` and ``master_process off`` keep it one process, stopped by
its own pid.

Where nginx is not installed the tests skip saying so (``-ra`` prints it); under
``DROVER_REQUIRE_NGINX=1`` (CI, where ``scripts/ci-deps`` installs it) they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import trustme
from support.ports import free_port

from .support import BOUND, Served

REQUIRE_ENV = "DROVER_REQUIRE_NGINX"
DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
#: The documented block's addresses, replaced by the test's.
DOC_LISTEN = "listen 443 ssl;"
DOC_UPSTREAM = "proxy_pass http://127.0.0.1:8000;"
DOC_LOCATION = "location / {"
DOC_CERT = "ssl_certificate     /etc/ssl/drover/fullchain.pem;"
DOC_KEY = "ssl_certificate_key /etc/ssl/drover/privkey.pem;"
DOC_READ_TIMEOUT = "proxy_read_timeout 60s;"
#: The public name the documented block serves; the tests' clients send it as their ``Host``.
PUBLIC_NAME = "drover.example.com"
_TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_binary() -> str:
    """The nginx program (Debian puts it in /usr/sbin, which a user's PATH may not list);
    skips the test when there is none, or fails it under ``DROVER_REQUIRE_NGINX=1``."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )
    if found is not None:
        return found
    why = "nginx is not installed"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1): run scripts/ci-deps", pytrace=False)
    pytest.skip(f"REVERSE PROXY TESTS SKIPPED: {why} — run scripts/ci-deps (Debian's nginx-light)")


def documented_server_block() -> str:
    """The ``server { … }`` block of ``docs/deployment.md`` (its only ``nginx`` code block)."""
    blocks = re.findall(r"^```nginx\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, f"{DOC} must hold one nginx code block, not {len(blocks)}"
    return str(blocks[0])


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the documented nginx block must hold {old!r} once"
    return text.replace(old, new)


@dataclass
class Nginx:
    proc: subprocess.Popen[bytes]
    port: int
    root: Path

    @property
    def url(self) -> str:
        return f"https://{PUBLIC_NAME}:{self.port}"

    def log(self) -> str:
        path = self.root / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGQUIT (a graceful stop: open streams are closed), SIGKILL if it hangs; by pid."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(BOUND)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Proxied:
    """A ``drover serve`` and the nginx in front of it."""

    served: Served
    nginx: Nginx
    ca: Path

    def client(self, *, host: str = PUBLIC_NAME, token: str | None = None) -> httpx2.Client:
        """An HTTPS client of nginx that trusts the test's CA and names ``host`` (with
        nginx's port) in its ``Host`` header, as a browser that reached it by that name."""
        headers = {"Host": f"{host}:{self.nginx.port}"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx2.Client(
            base_url=f"https://127.0.0.1:{self.nginx.port}",
            headers=headers,
            verify=ssl.create_default_context(cafile=str(self.ca)),
            timeout=BOUND,
        )

    def close(self) -> None:
        self.nginx.stop()
        self.served.close()


def certificates(root: Path) -> tuple[Path, Path, Path]:
    """A new CA's certificate, and a certificate it signed (chain) and its key for the
    public name and loopback: files under ``root``."""
    ca = trustme.CA()
    issued = ca.issue_cert(PUBLIC_NAME, "127.0.0.1", "localhost")
    files = (root / "ca.pem", root / "server.pem", root / "server.key")
    ca.cert_pem.write_to_path(str(files[0]))
    for i, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(files[1]), append=i > 0)
    issued.private_key_pem.write_to_path(str(files[2]))
    return files


def nginx_config(
    root: Path,
    port: int,
    upstream: str,
    cert: Path,
    key: Path,
    read_timeout: str | None,
    prefix: str | None = None,
) -> str:
    """The whole nginx.conf: the documented server block, with the test's addresses, inside
    the settings an unprivileged one-process nginx needs; with ``prefix`` (``/drover/``),
    drover served under it as the page documents (the two lines it names changed)."""
    block = documented_server_block()
    block = _replace_once(block, DOC_LISTEN, f"listen 127.0.0.1:{port} ssl;")
    if prefix is None:
        block = _replace_once(block, DOC_UPSTREAM, f"proxy_pass http://{upstream};")
    else:
        block = _replace_once(block, DOC_LOCATION, f"location {prefix} {{")
        block = _replace_once(block, DOC_UPSTREAM, f"proxy_pass http://{upstream}/;")
    block = _replace_once(block, DOC_CERT, f"ssl_certificate {cert};")
    block = _replace_once(block, DOC_KEY, f"ssl_certificate_key {key};")
    if read_timeout is not None:
        block = _replace_once(block, DOC_READ_TIMEOUT, f"proxy_read_timeout {read_timeout};")
    temps = "".join(f"    {kind}_temp_path {root / kind};\n" for kind in _TEMP_PATHS)
    return (
        "daemon off;\n"
        "master_process off;\n"
        f"pid {root / 'nginx.pid'};\n"
        f"error_log {root / 'error.log'} warn;\n"
        "events { worker_connections 64; }\n"
        "http {\n"
        f"    access_log {root / 'access.log'};\n"
        f"{temps}"
        f"{block}"
        "}\n"
    )


def start_nginx(
    root: Path,
    upstream: str,
    cert: Path,
    key: Path,
    *,
    read_timeout: str | None = None,
    prefix: str | None = None,
) -> Nginx:
    """nginx listening on a free loopback port with TLS (``cert``/``key``), proxying to
    ``upstream`` (``host:port``; under ``prefix`` when given), once it accepts connections."""
    binary = nginx_binary()
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = root / "nginx.conf"
    text = nginx_config(root, port, upstream, cert, key, read_timeout, prefix)
    conf.write_text(text, encoding="utf-8")
    # -e: the log of start-up itself, before the configuration's error_log is open.
    argv = [binary, "-p", str(root), "-c", str(conf), "-e", str(root / "error.log")]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    nginx = Nginx(proc=proc, port=port, root=root)
    deadline = time.monotonic() + BOUND
    while not _accepts(port):
        if proc.poll() is not None:
            pytest.fail(f"nginx exited ({proc.returncode}): {nginx.log().strip()}", pytrace=False)
        if time.monotonic() > deadline:
            nginx.stop()
            pytest.fail(f"nginx did not listen on {port}: {nginx.log().strip()}", pytrace=False)
        time.sleep(0.01)  # polling a readiness probe, bounded above
    return nginx


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
