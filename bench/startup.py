"""Time to first request of ``drover -p`` for each provider (issue #12).

For each protocol, ``drover -p hi --model PROVIDER:m --base-url URL`` is started as a new
process (``--db`` a fresh SQLite file, so opening and migrating the journal is included) against
a bare listener on 127.0.0.1 that only notes when the first request's header arrives and then
drops the connection; the child is then stopped (SIGTERM, then SIGKILL, by its own pid). The
figure is spawn → first request header, median of ``--runs``. Beside it, the import time of
the modules that provider's ``-p`` run needs (``python -X importtime``, the SDK separately) and
the interpreter's own start (``python -c pass``), to show what is drover's and what the SDK's.
The CPU the child has used by the time its request arrives (the sum of its threads'
``/proc/PID/task/*/schedstat`` run time) is the steadier figure on a shared machine.
``--before SRC`` measures another commit's ``src/`` beside this one, the runs alternating.
With ``PYTHONDONTWRITEBYTECODE`` set (as in this sandbox) and drover installed editable, every
run compiles drover's modules again (~0.1 s of CPU an installed drover does not pay);
``--bytecode`` gives the children a bytecode cache of their own (a temporary
``PYTHONPYCACHEPREFIX``, filled by the warm-up run), as an installed drover has.

    .venv/bin/python bench/startup.py            # --runs 5
    .venv/bin/python bench/startup.py --before /tmp/before/src --runs 5
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import (
    add_version_options,
    forbid_network,
    median,
    print_environment,
    src_env,
    table,
    versions,
)

PROVIDERS = {
    "anthropic": ("anthropic", "drover.providers.anthropic", ""),
    "openai": ("openai", "drover.providers.openai_chat", "/v1"),
    "openai-responses": ("openai", "drover.providers.openai_responses", "/v1"),
}


class FirstRequest:
    """A listener that records when each connection's first request header arrives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.arrived = threading.Event()
        self.at = 0.0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if b"\r\n\r\n" in data and not self.arrived.is_set():
                    self.at = time.perf_counter()
                    self.arrived.set()

    def reset(self) -> None:
        self.arrived.clear()


def cpu_seconds(pid: int) -> float:
    """CPU time the threads of ``pid`` alive now have run (``schedstat``, nanoseconds)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):  # the thread just ended
            continue
    return total / 1e9


def first_request(
    provider: str,
    listener: FirstRequest,
    tmp: Path,
    src: Path | None = None,
    bytecode: Path | None = None,
) -> tuple[float, float]:
    """Spawn → the first request's header (wall), and the child's CPU time by then."""
    listener.reset()
    suffix = PROVIDERS[provider][2]
    env = src_env(src, {**os.environ, "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    db = tmp / f"{provider}-{time.monotonic_ns()}.db"
    argv = [sys.executable, "-m", "drover.cli.main", "-p", "hi", "--model", f"{provider}:m"]
    argv += ["--base-url", f"http://127.0.0.1:{listener.port}{suffix}", "--db", str(db)]
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        if not listener.arrived.wait(60):
            raise RuntimeError(f"{provider}: no request within 60 s")
        return listener.at - start, cpu_seconds(child.pid)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


def import_ms(module: str, src: Path | None = None) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (-X importtime), ms."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        env=src_env(src),
    ).stderr
    pattern = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| " + re.escape(module) + "$", re.M)
    found = pattern.findall(out)
    return int(found[-1]) / 1000 if found else float("nan")


def interpreter_ms() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--bytecode", action="store_true", help="children use a bytecode cache (as installed)"
    )
    add_version_options(parser, "timed beside this checkout's")
    args = parser.parse_args()
    forbid_network()
    measured = versions(args)
    listener = FirstRequest()
    rows = []
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        print_environment("bench/startup.py — time to first request", Path(tmp))
        cache = Path(tmp) / "pycache" if args.bytecode else None
        print(f"bytecode: {'a cache of their own' if cache else 'as the environment says'}")
        python = median([interpreter_ms() for _ in range(args.runs)])
        for provider, (sdk, module, _) in PROVIDERS.items():
            sdk_ms = median([import_ms(sdk) for _ in range(3)])
            times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in measured}
            for _, src in measured:  # warm the page cache and .pyc files
                first_request(provider, listener, Path(tmp), src, cache)
            for i in range(args.runs):
                for label, src in measured[:: 1 if i % 2 == 0 else -1]:
                    run = first_request(provider, listener, Path(tmp), src, cache)
                    times[label].append(run)
            for label, src in measured:
                walls, cpus = zip(*times[label], strict=True)
                mod_ms = median([import_ms(module, src) for _ in range(3)])
                cli_ms = median([import_ms("drover.cli.headless", src) for _ in range(3)])
                rows.append(
                    [
                        provider,
                        label,
                        f"{median(walls) * 1000:.0f} ms",
                        f"{median(cpus) * 1000:.0f} ms",
                        f"{sdk_ms:.0f} ms",
                        f"{mod_ms:.0f} ms",
                        f"{cli_ms:.0f} ms",
                    ]
                )
    headers = ["provider", "src", "first request", "CPU by then", "import SDK"]
    print(table([*headers, "import provider", "import -p"], rows))
    print()
    print(f"python -c pass: {python:.0f} ms (median)")
    print("first request    spawn of `drover -p hi` → the first request's header at the listener")
    print("CPU by then      the child's CPU time (its threads' schedstat) when the header arrived")
    print("import SDK       `import anthropic` / `import openai` alone, cumulative (-X importtime)")
    print("import provider  drover's provider module, SDK included")
    print("import -p        drover.cli.headless (what -p imports before it picks a provider)")


if __name__ == "__main__":
    main()
