"""The library examples of the README and the site (docs/), and the programs in examples/, run, as
written, with no API key."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx2
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _env(tmp_path: Path, *, plugins: bool = True) -> dict[str, str]:
    """No keys, no journal or data directory of the user's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "DROVER_DB", "DROVER_MODEL")
    }
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    if not plugins:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _run(
    args: list[str], cwd: Path, tmp_path: Path, *, plugins: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(tmp_path, plugins=plugins),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def python_blocks(page: Path, section: str) -> list[str]:
    """The ```python blocks of one ``## section`` of a Markdown page, in order."""
    text = page.read_text(encoding="utf-8")
    part = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```$", part, re.S | re.M)
    assert blocks, f"{page.name}: the {section!r} section has no ```python block"
    return blocks


def readme_library_example() -> str:
    return python_blocks(ROOT / "README.md", "Use as a library")[0]


@pytest.mark.parametrize(
    ("page", "section"), [("README.md", "Use as a library"), ("docs/quickstart.md", "The library")]
)
def test_the_library_example_runs_as_written(tmp_path: Path, page: str, section: str) -> None:
    code = python_blocks(ROOT / page, section)[0]
    assert code == readme_library_example()  # the README's taste is the quickstart's program
    assert len(code.splitlines()) <= 25
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    done = _run(["example.py"], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"completed \| That is 4 words\. \| session [0-9a-f]{32}\n", done.stdout)
    assert (tmp_path / "journal.db").exists()


def test_the_deps_and_output_type_example_runs_as_written(tmp_path: Path) -> None:
    code = python_blocks(ROOT / "docs" / "library.md", "Deps and structured output")[0]
    assert "deps=" in code and "output_type=" in code
    assert len(code.splitlines()) <= 25
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    done = _run(["example.py"], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Quote(item='lamp', price=12.5)\n"


def test_the_structured_output_example(tmp_path: Path) -> None:
    done = _run([str(EXAMPLES / "structured_output.py")], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "order 8 x lamp-oil",
        "because lamp-oil is below the minimum",
        "3 model calls",
    ]
    assert (tmp_path / "restock-journal.db").exists()


def test_the_tool_script(tmp_path: Path) -> None:
    done = _run([str(EXAMPLES / "tool_script.py")], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[add_items] error: invalid input for tool 'add_items': items.0.")
    assert lines[1:] == [
        "[add_items] the list has 1 items",
        "[show_items] buy lamp oil",
        "completed: Added 'buy lamp oil' as high priority.",
    ]
    assert json.loads((tmp_path / "todo.json").read_text()) == [
        {"title": "buy lamp oil", "priority": "high"}
    ]
    assert (tmp_path / "todo-journal.db").exists()


def test_the_pytest_example(tmp_path: Path) -> None:
    # A bare pytest, as in a project of the user's: no plugins (they take seconds to load),
    # not drover's own settings; warnings still fail it.
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    target = str(EXAMPLES / "test_agent_with_fake_provider.py")
    options = ["-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "--rootdir", ".", "-W", "error"]
    done = _run(["-m", "pytest", *options, target], tmp_path, tmp_path, plugins=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fake_llm_example(tmp_path: Path) -> None:
    # drover's pytest plugin brings the fake_llm fixture (autoloading is off, as above).
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    target = str(EXAMPLES / "test_agent_with_fake_llm.py")
    options = ["-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "--rootdir", ".", "-W", "error"]
    options += ["-p", "drover.testing.pytest_plugin"]
    done = _run(["-m", "pytest", *options, target], tmp_path, tmp_path, plugins=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


async def test_the_fastapi_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DROVER_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DROVER_DB", str(tmp_path / "app.db"))
    monkeypatch.chdir(tmp_path)
    module = _load(EXAMPLES / "fastapi_app.py")
    transport = httpx2.ASGITransport(app=module.app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
        first = await client.post("/chat", json={"prompt": "hi"})
        assert first.status_code == 200, first.text
        body = first.json()
        assert (body["status"], body["text"]) == ("completed", "Hello from the scripted model (0).")
        streamed = await client.post(
            "/chat/stream", json={"prompt": "again", "session_id": body["session_id"]}
        )
        assert streamed.status_code == 200
        events = [json.loads(line) for line in streamed.text.splitlines()]
    await module.app.state.agent.aclose()
    assert events[0]["type"] == "turn_started"
    assert events[0]["session_id"] == body["session_id"]
    assert events[-1] == {
        "type": "done",
        "text": "Hello from the scripted model (1).",
        "usage": events[-1]["usage"],
    }
    assert any(e["type"] == "text_delta" for e in events)
