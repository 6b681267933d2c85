"""Images in prompts: files read into image blocks, checked, and found in a prompt's text.

:func:`read_image` reads a PNG, JPEG, GIF or WebP file — the type told by its first bytes,
not its name — into an :class:`~drover.core.messages.ImageBlock`. A file over :data:`MAX_BYTES`
(3.75 MB: its base64 is 5 MB, the most the Anthropic API takes for one image) or of another
type is an :class:`~drover.errors.ConfigError` saying so, before anything is sent or stored.

:func:`prompt_with_images` finds the ``@path`` words of a prompt that name image files
(``look at @shot.png``): a word ``@…`` ending in ``.png``, ``.jpg``, ``.jpeg``, ``.gif`` or
``.webp`` is an image path, taken from the current directory, else from the working
directory; one that names no file is an error. Other ``@`` words are text. The text is kept
as typed: the model reads the path and gets the image after the text.

The image's bytes are stored once, in the user message of its turn; events and transcripts
name it by size and digest (:func:`drover.core.messages.block_to_dict`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from drover.core.messages import ImageBlock, Message, user_message
from drover.errors import ConfigError

#: The largest image file taken, in bytes (its base64 is 5,000,000 characters).
MAX_BYTES = 3_750_000
#: Images one message may carry.
MAX_IMAGES = 20
EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".webp")
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
#: ``@path`` words: an ``@`` at the start of a word (or after an opening bracket or quote),
#: then anything but white space.
_AT_WORD = re.compile(r"(?<![^\s(\[\"'])@(\S+)")


def media_type(data: bytes) -> str | None:
    """The image type of ``data`` by its first bytes (None: not an image the APIs take)."""
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(path: Path) -> ImageBlock:
    """The image block of an image file; :class:`ConfigError` when it cannot be one."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(
                f"image {path} is {size / 1e6:.1f} MB: an image may be at most "
                f"{MAX_BYTES / 1e6:.2f} MB (5 MB once encoded, the API's limit)"
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"no such image: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"image {path} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read image {path}: {exc.strerror or exc}") from None
    kind = media_type(data)
    if kind is None:
        raise ConfigError(f"{path} is not a PNG, JPEG, GIF or WebP image")
    return ImageBlock(media_type=kind, data=base64.b64encode(data).decode("ascii"))


def image_paths(prompt: str) -> list[str]:
    """The ``@path`` words of ``prompt`` that name image files (by their ending)."""
    found = []
    for match in _AT_WORD.finditer(prompt):
        word = match.group(1).rstrip(".,;:!?)\"'")
        if word.lower().endswith(EXTENSIONS):
            found.append(word)
    return found


def resolve_image(word: str, workdir: Path) -> Path:
    """Where an ``@path`` points: the current directory first, then the working directory."""
    path = Path(word).expanduser()
    if path.is_absolute() or path.exists():
        return path
    in_workdir = workdir / path
    return in_workdir if in_workdir.exists() else path


def prompt_with_images(prompt: str, workdir: Path, files: Sequence[Path] = ()) -> str | Message:
    """The prompt as it is sent: its text alone, or a message with the images it names
    (``@path`` words) and those given (``--image FILE``). Raises :class:`ConfigError` for an
    image that cannot be read."""
    paths = [resolve_image(word, workdir) for word in image_paths(prompt)]
    paths += list(files)
    if not paths:
        return prompt
    return user_message(prompt, images=images_of(paths))


def images_of(paths: Iterable[Path]) -> list[ImageBlock]:
    """Each image read (a path given twice is sent once)."""
    unique = list(dict.fromkeys(paths))
    if len(unique) > MAX_IMAGES:
        raise ConfigError(f"{len(unique)} images in one message: at most {MAX_IMAGES}")
    return [read_image(path) for path in unique]
