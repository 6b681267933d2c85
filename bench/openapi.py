"""What the routes' models cost `drover serve`: importing the routes, building the OpenAPI
document, and validating a request body (issue #45 item 6).

For each version (this checkout, or ``--before SRC`` beside it, the runs alternating), in fresh
interpreters with a bytecode cache of their own (filled by a warm-up run), as an installed
drover has: the CPU time of importing ``drover.server.app`` once what it shares with the rest
of drover is imported (the service, the journal, starlette) — the routes, their models and the
classes pydantic makes of them, which is what this item adds to ``drover serve``'s start; the
time to build the document ``GET /openapi.json`` answers with, at the first request and after
(``drover.server.openapi.schema``); and, where the routes validate with models, the first
validation of a body of each door (pydantic builds a model's validator when it is first used)
and then one validation. Medians of ``--runs``. Nothing is served: no socket is opened.

    .venv/bin/python bench/openapi.py                        # --runs 7
    .venv/bin/python bench/openapi.py --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
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

#: Run in a child: the CPU time of importing the routes once what they share is imported, ms.
_IMPORT = r"""
import time
import drover.agent.agent, drover.server.service, drover.server.doors, drover.server.follow
import drover.server.replay, drover.server.config, drover.server.snapshot
import starlette.applications, starlette.routing, starlette.staticfiles, starlette.middleware.cors
start = time.process_time()
import drover.server.app
print((time.process_time() - start) * 1000)
"""

#: Run in a child: the document's first and later build, each body's first validation (ms)
#: and one validation after (µs), as JSON.
_CHILD = r"""
import json, time

def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000

from drover.server.openapi import schema
out = {"first schema": timed(schema), "schema": sorted(timed(schema) for _ in range(9))[4]}
try:
    from drover.server.api_models import PostMessage
    from drover.server.chat_request import ChatRequest
    from drover.server.responses_request import ResponsesRequest
except ImportError:  # (a version whose routes check bodies by hand)
    pass
else:
    user = {"id": "u", "role": "user", "parts": [{"type": "text", "text": "hello"}]}
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "id": "msg_t_1", "content": []},
        {"role": "user", "content": [{"type": "input_text", "text": "again"}]},
    ]
    bodies = {
        "messages": (PostMessage, {"content": "hello", "if_busy": "enqueue"}),
        "chat": (ChatRequest, {"id": "c1", "messages": [user]}),
        "responses": (
            ResponsesRequest,
            {"model": "any", "input": items, "tools": [], "include": [], "stream": True},
        ),
    }
    for name, (model, body) in bodies.items():
        out[f"first {name}"] = timed(lambda: model.model_validate(body))
        out[name] = sorted(
            timed(lambda: [model.model_validate(body) for _ in range(1000)]) for _ in range(7)
        )[3]
print(json.dumps(out))
"""


def _env(src: Path | None, cache: Path) -> dict[str, str]:
    env = src_env(src)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run(code: str, src: Path | None, cache: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=_env(src, cache),
    ).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    add_version_options(parser, "timed beside this checkout's")
    args = parser.parse_args()
    forbid_network()
    measured = versions(args)
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        print_environment("bench/openapi.py — the routes' models at start-up and per request")
        caches = {label: Path(tmp) / label for label, _ in measured}
        for label, src in measured:  # fill each version's bytecode cache
            run(_CHILD, src, caches[label])
        imports: dict[str, list[float]] = {label: [] for label, _ in measured}
        figures: dict[str, list[dict[str, float]]] = {label: [] for label, _ in measured}
        for i in range(args.runs):
            for label, src in measured[:: 1 if i % 2 == 0 else -1]:
                imports[label].append(float(run(_IMPORT, src, caches[label])))
                figures[label].append(json.loads(run(_CHILD, src, caches[label])))
        rows = []
        for label, _ in measured:

            def mid(key: str, label: str = label) -> float | None:
                values = [f[key] for f in figures[label] if key in f]
                return median(values) if values else None

            bodies = []
            for name in ("messages", "chat", "responses"):
                first, one = mid(f"first {name}"), mid(name)
                bodies.append(
                    "—" if first is None or one is None else f"{first:.1f} ms, {one:.0f} µs"
                )
            rows.append(
                [
                    label,
                    f"{median(imports[label]):.1f} ms",
                    f"{mid('first schema') or 0:.1f} ms, {mid('schema') or 0:.2f} ms",
                    *bodies,
                ]
            )
    headers = ["src", "import routes (CPU)", "schema: first, after", "messages body"]
    print(table([*headers, "chat body", "responses body"], rows))
    print()
    print("import routes   CPU of `import drover.server.app` once the service, journal and")
    print("                starlette are imported: the routes and their models")
    print("schema          drover.server.openapi.schema() at GET /openapi.json: first, then later")
    print("… body          the route's model validating one body of that door: its first")
    print("                validation (the validator is built then), then one after that")


if __name__ == "__main__":
    main()
