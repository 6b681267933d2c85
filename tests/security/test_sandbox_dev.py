"""``/dev`` was an unbounded RAM tmpfs (issue 43, item 4), filled by a prompt-injected model.

bubblewrap's private ``/dev`` is a tmpfs without a size: with ``memory_mb = 256`` a command
kept 1.1 GiB in ``/dev/shm``, beyond every limit. ``/dev/shm`` is now its own tmpfs bounded by
the memory limit, and the rest of ``/dev`` is read-only. The command writes twice the limit
(so a missing bound costs the machine at most 512 MiB of RAM for a moment); shared memory
still works within the bound.
"""

from __future__ import annotations

from pathlib import Path

from drover.config.settings import Config

from .hostile import hostile_turn

MEMORY_MB = 256

FILL = (
    f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={2 * MEMORY_MB} 2>&1 | grep -v records; "
    "echo kept: $(( $(stat -c %s /dev/shm/fill) >> 20 )) MiB"
)
SHARED_MEMORY = (
    "/usr/bin/python3 -c 'from multiprocessing import shared_memory as s\n"
    'm = s.SharedMemory(create=True, size=1 << 20); m.buf[0] = 7; print("shared", m.buf[0])\n'
    "m.close(); m.unlink()'"
)


async def test_dev_shm_is_bounded_by_the_memory_limit_and_dev_is_read_only(
    tmp_path: Path,
) -> None:
    outcome = await hostile_turn(
        tmp_path,
        [FILL, "echo planted > /dev/planted; mkdir /dev/dir", SHARED_MEMORY],
        config=Config(sandbox_memory_mb=MEMORY_MB),
    )
    fill, plant, shared = outcome.texts
    assert "No space left on device" in fill, fill
    kept = int(fill.split("kept: ")[1].split()[0])
    assert kept <= MEMORY_MB, fill
    assert "/dev/planted: Read-only file system" in plant, plant
    assert "cannot create directory '/dev/dir': Read-only file system" in plant.replace(
        "‘", "'"
    ).replace("’", "'"), plant
    assert shared == "shared 7\n", shared
