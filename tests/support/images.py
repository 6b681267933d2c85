"""Small real images for tests: a valid PNG of any size, made with zlib (no image library)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def png_bytes(width: int = 1, height: int = 1, seed: int = 0) -> bytes:
    """A valid RGB PNG; ``seed`` varies its pixels, so two images differ."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = bytes([0]) + bytes((seed + i) % 256 for i in range(width * 3))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(row * height)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def write_png(path: Path, seed: int = 0) -> Path:
    path.write_bytes(png_bytes(seed=seed))
    return path
