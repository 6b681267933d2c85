"""The root escape through ``/proc/sys`` (issue 43, item 1), driven by a prompt-injected model.

When drover runs as root (containers, CI), a command in the sandbox kept uid 0 of the machine,
and the kernel lets uid 0 write sysctls whatever the namespaces: setting
``kernel.core_pattern`` to ``|/workdir/evil`` and crashing a process makes the kernel run
``evil`` as real root outside every namespace. The model here does every step short of the
harmful one, so that a missing protection cannot hurt the machine: it writes
``core_pattern``'s own value back (read back before and after: unchanged either way), and opens
every sysctl, ``/proc/sysrq-trigger``, ``/proc/irq``, ``/proc/bus``, ``/sys/kernel/mm`` and the
cgroup files for writing without writing a byte (an open changes nothing); a sandbox that lets
any of that through fails the test. It also reads its capabilities and uid. CI runs this file
as root and as an unprivileged user (``.ci/run``).
"""

from __future__ import annotations

import os
from pathlib import Path

from drover.tools.sandbox_argv import SANDBOX_UID

from .hostile import hostile_turn

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


def core_pattern() -> str:
    with open(CORE_PATTERN, encoding="utf-8") as handle:  # a kernel file: it never blocks
        return handle.read()


#: Tries to open every sysctl, the sysrq trigger and the global knobs of /proc and /sys for
#: writing; prints the ones it could.
OPEN_FOR_WRITING = r"""/usr/bin/python3 -c '
import os
opened = []
paths = ["/proc/sysrq-trigger"]
for root in ("/proc/sys", "/proc/irq", "/proc/bus", "/sys/kernel/mm", "/sys/fs/cgroup"):
    for top, _dirs, files in os.walk(root):
        paths += [os.path.join(top, f) for f in files]
for path in paths:
    try:
        fd = os.open(path, os.O_WRONLY)  # no O_TRUNC, nothing written: changes nothing
    except OSError:
        continue
    os.close(fd)
    opened.append(path)
print("checked", len(paths), "opened for writing:", len(opened), *opened[:5])
'"""

#: The first step of the real attack, with the value that is already there.
WRITE_CORE_PATTERN = (
    f'p=$(cat {CORE_PATTERN}) && printf "%s\\n" "$p" > {CORE_PATTERN} && echo WROTE core_pattern'
)


async def test_a_command_can_write_no_sysctl_has_no_capability_and_is_not_uid_0(
    tmp_path: Path,
) -> None:
    before = core_pattern()
    outcome = await hostile_turn(
        tmp_path,
        [
            WRITE_CORE_PATTERN,
            OPEN_FOR_WRITING,
            "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; id -u; id -g",
        ],
    )
    assert core_pattern() == before
    core, opened, identity = outcome.texts
    assert "WROTE" not in core, core
    assert f"{CORE_PATTERN}: Read-only file system" in core or "Permission denied" in core, core
    assert "opened for writing: 0" in opened, opened
    assert int(opened.split()[1]) > 100, opened  # /proc/sys was there to try
    lines = identity.splitlines()
    caps = dict(line.split(":\t") for line in lines[:5])
    assert caps == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0" * 16)
    uid, gid = int(lines[5]), int(lines[6])
    assert uid != 0 and gid != 0
    if os.geteuid() == 0:
        assert (uid, gid) == (SANDBOX_UID, SANDBOX_UID)
    else:
        assert uid == os.getuid()
