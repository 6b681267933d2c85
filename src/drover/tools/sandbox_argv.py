"""bubblewrap's options for one call: every mount, namespace and identity choice in one place.

:func:`bwrap_options` lays the sandbox's file system out in this order (a later mount wins
over an earlier one at the same place):

1. namespaces and identity: all of them new (the network too: its only way out is drover's
   proxy, :mod:`drover.tools.sandbox_proxy`), every capability dropped, and — when drover runs
   as root — the command's uid and gid :data:`SANDBOX_UID` inside, so nothing there runs as
   uid 0;
2. the whole file system read-only;
3. a private ``/dev`` (the usual device nodes) made read-only, with a size-bounded ``/dev/shm``;
4. a private ``/proc`` whose global knobs are read-only: ``/proc/sys`` (sysctls such as
   ``kernel.core_pattern``, which the kernel lets uid 0 write whatever the namespaces, and
   which runs a program as real root when a process crashes), ``/proc/sysrq-trigger``,
   ``/proc/irq``, ``/proc/bus``, ``/proc/fs``…; ``/sys`` is read-only with the rest;
5. a private, size-bounded ``/tmp``;
6. the home directory covered, its allowed paths mounted back read-only
   (:mod:`drover.tools.sandbox_home`);
7. hidden directories that hold the workdir, then the writable paths, the workdir, the
   protected paths read-only again, and every other hidden path (:mod:`drover.tools.protect`);
8. the proxy's socket at :data:`PROXY_SOCKET`.

An overlay for the workdir (issue 46) slots in at step 7, where the workdir is bound.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from drover.tools.protect import Protection
from drover.tools.sandbox_home import HomeView, allowed_paths, home_view
from drover.tools.sandbox_settings import SandboxSettings

#: Size bound of the private ``/tmp`` (bytes): it lives in memory, so a runaway command must
#: not be able to fill the machine's RAM through it.
TMP_SIZE = 1 << 30
#: The uid and gid commands run as when drover is root (``nobody``): the kernel grants uid 0
#: writes (sysctls, root-owned files) that no namespace takes away.
SANDBOX_UID = 65534
#: Parts of ``/proc`` that change the whole machine, mounted read-only (Docker's list).
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "asound")
#: Where the proxy's Unix socket appears inside the sandbox, and the port of the forwarder
#: that listens on the sandbox's own loopback (:mod:`drover.tools.sandbox_bridge`).
PROXY_SOCKET = "/dev/drover-proxy"
PROXY_PORT = 3128


@dataclass(frozen=True, slots=True)
class CallFiles:
    """What drover made for one call: its private directory (sanitized git configs) and the
    proxy's socket. Both None for the start-up probe."""

    scratch: Path | None = None
    proxy_socket: Path | None = None


#: The files of no call (the start-up probe's).
NO_CALL_FILES = CallFiles()


def runs_as_root() -> bool:
    return os.geteuid() == 0


def shm_size(settings: SandboxSettings) -> int:
    """``/dev/shm``'s bound: shared memory is memory, so at most the memory limit (and never
    more than the private ``/tmp``)."""
    return max(min(settings.memory, TMP_SIZE), 1 << 20)


def bwrap_options(
    settings: SandboxSettings,
    workdir: Path,
    features: frozenset[str],
    protections: Sequence[Protection] = (),
    call: CallFiles | None = None,
) -> list[str]:
    """The options before ``--`` (see the module docstring for the order and why)."""
    call = call or NO_CALL_FILES
    workdir = workdir.resolve()
    writable = [p.resolve() for p in settings.writable] if settings.mode == "workdir" else []
    args = _identity(features)
    args += ["--ro-bind", "/", "/"]
    args += _dev(settings, features, call)
    args += ["--proc", "/proc"]
    for name in PROC_READ_ONLY:
        args += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    args += [*_sized(features, TMP_SIZE), "--tmpfs", "/tmp"]
    hidden = [p.resolve() for p in settings.hidden]
    # Host services (container runtimes, databases, D-Bus) listen on sockets under /run, and
    # a read-only mount does not stop a connect(): hidden, like the host's network.
    hidden.append(Path("/run"))
    binds = [workdir, *writable]
    view = _home(settings, binds, hidden, call)
    if view is not None:
        args += ["--tmpfs", str(view.home)]
        for source, dest in view.binds:
            args += ["--ro-bind", str(source), str(dest)]
        # Hidden paths in the covered home are gone already, unless shown again by a bind.
        shown = [*binds, *(dest for _source, dest in view.binds)]
        hidden = [
            h
            for h in hidden
            if not h.is_relative_to(view.home) or any(h.is_relative_to(b) for b in shown)
        ]
    # A hidden directory holding the workdir (or a writable path) is covered first, so the
    # bind on top of it stays visible; every other hidden path is covered last, so it wins
    # over the binds and the protections (a secret inside the workdir stays hidden).
    outer = [h for h in hidden if any(b.is_relative_to(h) for b in binds)]
    inner = [h for h in hidden if h not in outer]
    # A path inside another one covered last is gone with it; covering it again would make
    # bubblewrap create its mount point in a read-only tmpfs (DROVER_CONFIG pointing into the
    # config directory, which is hidden too), and every command would fail.
    inner = [h for h in inner if not any(h != o and h.is_relative_to(o) for o in inner)]
    for path in outer:
        args += _hide(path)
    for path in writable:
        if path.exists():
            args += ["--bind", str(path), str(path)]
    args += ["--bind" if settings.mode == "workdir" else "--ro-bind", str(workdir), str(workdir)]
    # Read-only again, after the writable binds they lie in. A placeholder that could not be
    # made is skipped: the command (same user, no capabilities) cannot create it either.
    for item in protections:
        if os.path.lexists(item.path):
            args += ["--ro-bind", str(item.path), str(item.path)]
    for path in inner:
        args += _hide(path)
    if view is not None:
        # Only now: bubblewrap made the mount points of the binds above in the home's tmpfs.
        args += ["--remount-ro", str(view.home)]
    args += ["--chdir", str(workdir), "--"]
    return args


def _identity(features: frozenset[str]) -> list[str]:
    # A new network namespace always: with no network its loopback is the only interface;
    # with one, drover's proxy is the only way out (never the host's loopback services).
    args = ["--unshare-all", "--unshare-user"]
    if runs_as_root():
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    # Explicit even where implied: as root, bubblewrap would otherwise keep every capability.
    args += ["--cap-drop", "ALL", "--die-with-parent"]
    if "--disable-userns" in features:
        args.append("--disable-userns")
    return args


def _dev(settings: SandboxSettings, features: frozenset[str], call: CallFiles) -> list[str]:
    """A private ``/dev``: its own tmpfs, read-only once ``/dev/shm`` (bounded) and the proxy's
    socket are in place (bubblewrap's ``/dev`` is otherwise a writable, unbounded tmpfs)."""
    args = ["--dev", "/dev", *_sized(features, shm_size(settings)), "--tmpfs", "/dev/shm"]
    if call.proxy_socket is not None:
        args += ["--ro-bind", str(call.proxy_socket), PROXY_SOCKET]
    return [*args, "--remount-ro", "/dev"]


def _sized(features: frozenset[str], size: int) -> list[str]:
    return ["--size", str(size)] if "--size" in features else []


def _home(
    settings: SandboxSettings, binds: Sequence[Path], hidden: Sequence[Path], call: CallFiles
) -> HomeView | None:
    home = Path.home()
    allowed = allowed_paths(home, settings.home_allow)
    if settings.proxied:
        # The forwarder runs on drover's own interpreter, which may live in the home
        # (pyenv, uv): its installation is shown, read-only.
        allowed.append(Path(sys.base_prefix))
    return home_view(home, allowed, hidden, binds, call.scratch)


def _hide(path: Path) -> list[str]:
    if path.is_dir():
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    if path.exists():
        # /dev/null mounted inside a user namespace is a node that cannot be opened: reads
        # fail with "Permission denied" instead of returning the secret.
        return ["--ro-bind", "/dev/null", str(path)]
    return []
