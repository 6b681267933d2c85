"""Decoding one long event-stream line, by its length and the size of the chunks it comes in.

The Responses API's ``response.completed`` event carries the whole answer on one ``data`` line,
and the HTTP client hands the body on in chunks of a few KiB. This times
:class:`~drover.providers.sse.SseDecoder` fed such a line (``event: response.completed``, then
``data:`` and N bytes, then the blank line) chunk by chunk: CPU milliseconds, the median of
``--runs``. A decoder that joins the unfinished line again at every chunk is quadratic: its
time grows with the square of the length at a given chunk size. ``--before SRC`` times another
commit's decoder beside this checkout's (each in a child process importing drover from there).

    .venv/bin/python bench/sse_decode.py                       # --sizes 262144,1048576,4194304
    .venv/bin/python bench/sse_decode.py --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import add_version_options, median, print_environment, src_env, table, versions


def child(sizes: list[int], chunks: list[int], runs: int) -> None:
    """Time the decoder of the drover this process imports; print the figures as JSON."""
    from drover.providers.sse import SseDecoder

    out: dict[str, float] = {}
    for size in sizes:
        body = b"event: response.completed\ndata: " + b"x" * size + b"\n\n"
        for chunk in chunks:
            pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
            times = []
            for _ in range(runs):
                decoder = SseDecoder()
                started = time.process_time()
                events = [event for piece in pieces for event in decoder.feed(piece)]
                times.append(time.process_time() - started)
                if len(events) != 1 or len(events[0].data) != size:
                    raise SystemExit("the line did not come out whole")
            out[f"{size} {chunk}"] = median(times) * 1000
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="262144,1048576,4194304", help="line lengths, bytes")
    parser.add_argument("--chunks", default="4096,16384", help="chunk sizes, bytes")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_version_options(parser, "timed beside this checkout's")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    chunks = [int(c) for c in args.chunks.split(",")]
    if args.child:
        child(sizes, chunks, args.runs)
        return
    print_environment("bench/sse_decode.py — one long event-stream line, chunk by chunk")
    figures = {}
    for label, src in versions(args):
        argv = [sys.executable, __file__, "--child", "--sizes", args.sizes]
        argv += ["--chunks", args.chunks, "--runs", str(args.runs)]
        done = subprocess.run(argv, env=src_env(src), capture_output=True, text=True, check=True)
        figures[label] = json.loads(done.stdout)
    rows = []
    for size in sizes:
        for chunk in chunks:
            key = f"{size} {chunk}"
            row = [f"{size // 1024:,} KiB", f"{chunk:,} B"]
            rows.append(row + [f"{figures[label][key]:.1f}" for label in figures])
    print()
    print(table(["line", "chunks", *(f"{label} (ms CPU)" for label in figures)], rows))


if __name__ == "__main__":
    main()
