"""Images in prompts: files checked and read, ``@path`` words found, what a message and an event
hold of an image."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from support.images import png_bytes, write_png

from drover.agent.images import MAX_BYTES, image_paths, prompt_with_images, read_image
from drover.core.events import TurnStarted, event_to_dict
from drover.core.messages import (
    ImageBlock,
    message_from_dict,
    message_to_dict,
)
from drover.core.messages import (
    message_of_prompt as as_message,
)
from drover.errors import ConfigError


def test_the_type_comes_from_the_bytes_not_the_name(tmp_path: Path) -> None:
    cases = {
        "a.png": png_bytes(),
        "b.jpg": b"\xff\xd8\xff\xe0" + b"\0" * 20,
        "c.gif": b"GIF89a" + b"\0" * 20,
        "d.webp": b"RIFF\0\0\0\0WEBPVP8 " + b"\0" * 20,
        "png-named.jpg": png_bytes(),
    }
    kinds = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        block = read_image(tmp_path / name)
        assert base64.b64decode(block.data) == data and block.size == len(data)
        kinds[name] = block.media_type
    assert kinds == {
        "a.png": "image/png",
        "b.jpg": "image/jpeg",
        "c.gif": "image/gif",
        "d.webp": "image/webp",
        "png-named.jpg": "image/png",
    }


def test_files_that_cannot_be_images_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(ConfigError, match="is not a PNG, JPEG, GIF or WebP image"):
        read_image(tmp_path / "notes.png")
    with pytest.raises(ConfigError, match="no such image"):
        read_image(tmp_path / "missing.png")
    big = tmp_path / "big.png"
    big.write_bytes(png_bytes() + b"\0" * MAX_BYTES)
    with pytest.raises(ConfigError, match=r"is 3\.8 MB: an image may be at most 3\.75 MB"):
        read_image(big)


def test_at_words_that_name_images() -> None:
    prompt = "compare @shot.png and @dir/b.JPEG, ask @alice, email a@b.png, (@c.webp)."
    assert image_paths(prompt) == ["shot.png", "dir/b.JPEG", "c.webp"]


def test_a_prompt_with_images_is_its_text_then_the_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    write_png(workdir / "in-workdir.png", seed=1)
    write_png(tmp_path / "here.png", seed=2)
    extra = write_png(tmp_path / "extra.png", seed=3)
    monkeypatch.chdir(tmp_path)
    assert prompt_with_images("no images", workdir) == "no images"
    message = prompt_with_images("see @here.png and @in-workdir.png", workdir, [extra])
    assert not isinstance(message, str)
    assert message.text == "see @here.png and @in-workdir.png"
    images = [b for b in message.content if isinstance(b, ImageBlock)]
    assert [base64.b64decode(i.data) for i in images] == [
        png_bytes(seed=2),
        png_bytes(seed=1),
        png_bytes(seed=3),
    ]
    with pytest.raises(ConfigError, match=r"no such image: gone\.png"):
        prompt_with_images("look at @gone.png", workdir)


def test_a_message_keeps_the_data_and_an_event_names_it(tmp_path: Path) -> None:
    image = read_image(write_png(tmp_path / "a.png"))
    message = as_message(prompt_with_images("what is it? @a.png", tmp_path))
    assert message_from_dict(message_to_dict(message)) == message
    started = event_to_dict(TurnStarted(turn_id="t", session_id="s", user_message=message))
    shown = started["user_message"]["content"][1]
    assert shown == {
        "type": "image",
        "media_type": "image/png",
        "bytes": image.size,
        "sha256": image.digest,
    }
    with pytest.raises(ValueError, match="text and image blocks only"):
        as_message(
            message_from_dict(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}
            )
        )
