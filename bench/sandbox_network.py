"""What the sandbox's network costs: one ``bash`` call's wall time, and a download's throughput.

Through the real ``bash`` tool and real bubblewrap:

* **call** — the median wall time of ``true`` over ``--calls`` (default 20) calls, with no
  network (the default sandbox) and with an allow-list (drover's proxy started for the call and
  the forwarder inside the sandbox started before the command: the price of a network);
* **download** — ``curl`` fetching ``--mib`` (default 64) MiB from a local HTTP server, once
  outside the sandbox and once through the sandbox's proxy (``localhost`` listed), MiB/s.

Nothing leaves the machine: the only server is on 127.0.0.1 (``common.forbid_network`` refuses
every other address in this process).

    .venv/bin/python bench/sandbox_network.py
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import forbid_network, median, print_environment, table

from drover.tools.base import ToolContext
from drover.tools.builtin.bash import BashTool
from drover.tools.sandbox import SandboxStatus, probe_sandbox, sandbox_settings


class _Blob(http.server.BaseHTTPRequestHandler):
    size = 0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(self.size))
        self.end_headers()
        chunk = b"x" * (1 << 20)
        for _ in range(self.size >> 20):
            self.wfile.write(chunk)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def _call(status: SandboxStatus, command: str, workdir: Path) -> tuple[float, str]:
    tool = BashTool(timeout=600, sandbox=status)
    start = time.perf_counter()
    out = await tool.run({"command": command}, ToolContext(workdir=workdir))
    return time.perf_counter() - start, out.content


def _status(allow_domains: list[str]) -> SandboxStatus:
    settings = sandbox_settings(mode="workdir", network=False, allow_domains=allow_domains)
    status = probe_sandbox(settings)
    if not status.active:
        raise SystemExit(f"no working sandbox here: {status.reason}")
    return status


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--mib", type=int, default=64)
    options = parser.parse_args()
    forbid_network()
    work = Path(tempfile.mkdtemp(prefix="drover-bench-sandbox-"))
    print_environment("sandbox network", work)
    plain = _status([])
    proxied = _status(["localhost"])
    rows = []
    for name, status in (("no network", plain), ("allow-list (proxy)", proxied)):
        times = [(await _call(status, "true", work))[0] for _ in range(options.calls)]
        rows.append([f"call: {name}", f"{median(times) * 1000:.0f} ms", ""])

    _Blob.size = options.mib << 20
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Blob)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://localhost:{server.server_address[1]}/blob"
    fetch = f"curl -sS -o /dev/null {url}"
    start = time.perf_counter()
    direct = ["curl", "-sS", "--noproxy", "*", "-o", "/dev/null", url]
    await asyncio.to_thread(subprocess.run, direct, check=True)
    outside = time.perf_counter() - start
    inside, text = await _call(proxied, fetch, work)
    if text != "(no output)":
        raise SystemExit(f"the download through the proxy failed: {text}")
    server.shutdown()
    for name, seconds in (("outside the sandbox", outside), ("through the proxy", inside)):
        rows.append([f"download: {name}", f"{seconds:.2f} s", f"{options.mib / seconds:.0f}"])
    print(table(["what", "time", "MiB/s"], rows))
    print(
        "\ncall: median wall time of one `true` through the bash tool (sandbox set-up included);"
        "\ndownload: curl fetching the blob from a local server (the sandboxed one's time "
        "includes its call's set-up)."
    )


if __name__ == "__main__":
    asyncio.run(main())
