"""Images on the command line: ``@shot.png`` in the prompt and ``--image FILE`` on ``-p`` and
the REPL, sent as image blocks; an image that cannot be sent is one line, before anything is
created."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from support.images import png_bytes, write_png

from drover.agent.images import MAX_BYTES
from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env, run_drover


def images_sent(server: FakeLLMServer) -> list[bytes]:
    [message] = [m for m in server.requests[0].body["messages"] if m["role"] == "user"]
    return [
        base64.b64decode(b["source"]["data"]) for b in message["content"] if b["type"] == "image"
    ]


def test_p_sends_at_paths_and_image_flags(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    write_png(tmp_path / "shot.png", seed=1)
    other = write_png(tmp_path / "other.png", seed=2)
    fake_llm.script({"text": "Two pictures."})
    args = ["-p", "compare @shot.png with this", *base_args(fake_llm, tmp_path)]
    done = run_drover([*args, "--image", str(other)])
    assert done.returncode == 0, done.stderr
    assert images_sent(fake_llm) == [png_bytes(seed=1), png_bytes(seed=2)]


def test_an_image_too_big_is_refused_before_a_session_exists(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(png_bytes() + b"\0" * MAX_BYTES)
    db = tmp_path / "journal.db"
    done = run_drover(["-p", "look @big.png", "--workdir", str(tmp_path), "--db", str(db)])
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "an image may be at most 3.75 MB" in done.stderr and "Traceback" not in done.stderr
    listed = run_drover(["sessions", "--json", "--db", str(db)])
    assert json.loads(listed.stdout or "[]") == []


def test_the_line_repl_sends_images_and_says_when_one_is_missing(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    write_png(tmp_path / "shot.png", seed=3)
    fake_llm.script({"text": "A pixel."})
    done = subprocess.run(
        [*DROVER, *base_args(fake_llm, tmp_path)],
        input="what about @missing.png\nwhat about @shot.png\n",
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "error: no such image: missing.png; nothing was sent" in done.stdout
    assert len(fake_llm.requests) == 1 and images_sent(fake_llm) == [png_bytes(seed=3)]
