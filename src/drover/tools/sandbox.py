"""The sandbox the ``bash`` tool runs commands in: bubblewrap namespaces on Linux.

A sandboxed command runs as ``bwrap … -- /bin/bash -c COMMAND`` with (the options are built
in one place, :mod:`drover.tools.sandbox_argv`)

- the whole file system mounted read-only, except the working directory (``workdir`` mode; in
  ``read-only`` mode it is read-only too), extra writable paths from the config file, and a
  private, size-bounded ``/tmp`` that vanishes with the call;
- protected paths inside the writable directories mounted read-only again: ``.git``, ``.envrc``
  and the others of :mod:`drover.tools.protect`, where code planted by a command would run
  outside the sandbox later;
- of the home directory only an allow-list of toolchain paths (:mod:`drover.tools.sandbox_home`);
- hidden paths — drover's own data and config directories, well-known credential stores,
  ``/run`` (where host services listen on Unix sockets) and paths the user lists — covered by
  an empty read-only directory or an unreadable file;
- a private ``/dev`` (read-only, ``/dev/shm`` bounded) and ``/proc`` (its global knobs such as
  ``/proc/sys`` read-only);
- a fresh network namespace always (only a loopback of its own); with ``allow_domains`` or
  ``--sandbox-network`` its one way out is drover's HTTP proxy
  (:mod:`drover.tools.sandbox_proxy`), reached through a forwarder on the sandbox's loopback
  (:mod:`drover.tools.sandbox_bridge`) and named by ``HTTP_PROXY``/``HTTPS_PROXY``;
- its own user namespace with every capability dropped (so even root cannot remount what is
  read-only, and cannot create further user namespaces) and, for a drover running as root, an
  unprivileged uid; its own PID, IPC and UTS namespaces: a command sees none of drover's
  processes and cannot signal them; when the namespace's first process ends, the kernel kills
  every process left in it;
- ``--die-with-parent``: when drover dies (even by SIGKILL) the whole sandbox dies with it;
- limits on processes and memory (:mod:`drover.tools.limits`);
- an environment built from an allow-list (:data:`ENV_ALLOWED` plus ``[sandbox] env``):
  every other variable — keys, tokens, passwords, ``MYSQL_PWD``, ``CI_JOB_JWT`` — stays out.

:func:`probe_sandbox` checks once, by running a trivial command with the real flags, that
bubblewrap is installed and can create the namespaces here; the resulting
:class:`SandboxStatus` builds each call's command line (:meth:`SandboxStatus.launch`).
:func:`require_sandbox` is the check a server makes at start-up. :func:`sandbox_hint` turns a
failure the sandbox caused (read-only file system, protected path, no network, a name the
proxy refused) into a sentence the model can act on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drover.errors import ConfigError
from drover.tools import sandbox_bridge, sandbox_proxy
from drover.tools.limits import DEFAULT_PROCESSES, PidsCgroup, limit_shell, pids_cgroup_root
from drover.tools.protect import (
    Protection,
    make_placeholders,
    name_pattern,
    placeholders_guarded,
    plan_protection,
    protected_names,
    protected_paths,
    writes_protected,
)
from drover.tools.sandbox_argv import (
    NO_CALL_FILES,
    PROXY_PORT,
    PROXY_SOCKET,
    SANDBOX_UID,
    CallFiles,
    bwrap_options,
    runs_as_root,
    shm_size,
)
from drover.tools.sandbox_argv import TMP_SIZE as TMP_SIZE
from drover.tools.sandbox_settings import ENV_ALLOWED as ENV_ALLOWED
from drover.tools.sandbox_settings import HOME_SECRETS as HOME_SECRETS
from drover.tools.sandbox_settings import SANDBOX_MODES as SANDBOX_MODES
from drover.tools.sandbox_settings import SYSTEM_SECRETS as SYSTEM_SECRETS
from drover.tools.sandbox_settings import SandboxMode as SandboxMode
from drover.tools.sandbox_settings import SandboxSettings as SandboxSettings
from drover.tools.sandbox_settings import default_hidden as default_hidden
from drover.tools.sandbox_settings import filtered_env as filtered_env
from drover.tools.sandbox_settings import sandbox_settings as sandbox_settings
from drover.tools.sandbox_settings import settings_from_config as settings_from_config

#: Processes a sandboxed command may have at once by default (see :mod:`drover.tools.limits`).
PROCESS_LIMIT = DEFAULT_PROCESSES
#: Seconds the start-up probe may take before bubblewrap is declared unusable.
PROBE_TIMEOUT = 20.0

# What clients print when the proxy refused a request (its own body, curl's and others').
_PROXY_REFUSED = re.compile(
    r"drover sandbox: |CONNECT tunnel failed, response 403|tunnel connection failed: 403|"
    r"403 forbidden|proxyerror",
    re.IGNORECASE,
)
# Messages by which the usual tools report a write refused by a read-only mount.
_READ_ONLY = re.compile(r"read-only file system", re.IGNORECASE)
# ... or by a protected path (writing over a placeholder says it is a directory; moving or
# removing a mount point says the device is busy).
_REFUSED_WRITE = re.compile(
    r"read-only file system|is a directory|permission denied|device or resource busy",
    re.IGNORECASE,
)
# ... and a network that is not there (DNS, refused or unreachable connections).
_NO_NETWORK = re.compile(
    r"could not resolve|temporary failure in name resolution|name or service not known|"
    r"no address associated with hostname|network is unreachable|failed to establish a new "
    r"connection|getaddrinfo|nodename nor servname|connection refused|could not connect to|"
    r"failed to connect to|unable to resolve|no route to host",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxStatus:
    """Whether commands run sandboxed here, and how; builds each call's command line."""

    settings: SandboxSettings
    #: True when commands run inside bubblewrap (the mode is not ``off`` and the probe worked).
    active: bool
    #: Why the sandbox cannot be used (None when active or turned off).
    reason: str | None = None
    bwrap: str | None = None
    #: Options of this bubblewrap build that drover uses when present.
    features: frozenset[str] = field(default_factory=frozenset)
    #: Where each call's ``pids`` cgroup is made (None: the process limit is an rlimit only).
    pids_cgroup: Path | None = None

    @property
    def mode(self) -> SandboxMode:
        return self.settings.mode

    @property
    def unavailable(self) -> bool:
        """The user wants a sandbox, and this machine cannot provide one."""
        return self.mode != "off" and not self.active

    @property
    def contained(self) -> bool:
        """A command can write only in the working directory (or nowhere) and has no network
        (not even through the proxy: an allowed name can still carry data away)."""
        if not self.active or self.settings.proxied:
            return False
        return self.mode == "read-only" or not self.settings.writable

    @property
    def process_limited(self) -> bool:
        """Whether the process limit binds: a cgroup, or an rlimit for a user other than root
        (the kernel exempts root from RLIMIT_NPROC)."""
        return self.pids_cgroup is not None or os.getuid() != 0

    def contains(self, command: str) -> bool:
        """Whether ``command`` is contained and names no protected path (see
        :func:`~drover.tools.protect.writes_protected` for the check and its limits)."""
        if not self.contained:
            return False
        if self.mode == "read-only":
            return True  # nothing in the working directory can be written
        return not writes_protected(command, protected_names(self.settings.protected))

    def network_text(self) -> str:
        """``no network``, ``network: pypi.org, *.example.org (proxy)`` or ``network: any
        name (proxy)``."""
        if not self.settings.proxied:
            return "no network"
        if self.settings.network:
            return "network: any name through drover's proxy"
        return f"network: {', '.join(self.settings.allow_domains)} through drover's proxy"

    def describe(self) -> str:
        """One line for start-up lines, e.g. ``sandbox: workdir (bubblewrap, no network)``."""
        if self.mode == "off":
            return "sandbox: off (commands run with your full rights)"
        if not self.active:
            return f"sandbox: unavailable ({self.reason}); bash commands are refused"
        extra = f", {len(self.settings.writable)} extra writable" if self.settings.writable else ""
        limit = "" if self.process_limited else "; no process limit (root without a pids cgroup)"
        return f"sandbox: {self.mode} (bubblewrap, {self.network_text()}{extra}){limit}"

    def features_active(self) -> list[str]:
        """What this sandbox enforces, one short phrase each (``drover doctor`` lists them)."""
        if not self.active:
            return []
        settings = self.settings
        home = "home directory: only the toolchain allow-list"
        if settings.home_allow:
            home += f" and {len(settings.home_allow)} home_allow paths"
        shm = f"at most {shm_size(settings) >> 20} MiB"
        if "--size" not in self.features:
            shm = "unbounded (bubblewrap without --size)"
        processes = f"at most {settings.processes} processes"
        if self.pids_cgroup is not None:
            processes += " (pids cgroup)"
        elif not self.process_limited:
            processes += " (not binding: root without a pids cgroup)"
        found = [
            "own user, PID, IPC, UTS, mount and network namespaces",
            "every capability dropped",
            f"uid {SANDBOX_UID} inside (drover runs as root)" if runs_as_root() else "your uid",
            "/proc/sys and the other global /proc knobs read-only",
            home,
            f"/dev read-only, /dev/shm {shm}",
            self.network_text(),
            processes,
            f"{settings.memory >> 20} MiB per process",
        ]
        if "--disable-userns" in self.features:
            found.append("no nested user namespaces")
        return found

    def label(self) -> str:
        """A short tag recorded on each tool call, e.g. ``workdir``, ``workdir+net``, ``off``."""
        if self.mode == "off":
            return "off"
        if not self.active:
            return "unavailable"
        net = "+net" if self.settings.network else "+proxy" if self.settings.proxied else ""
        tag = self.mode + net
        return tag + ("+writable" if self.settings.writable and self.mode == "workdir" else "")

    def protected(self, workdir: Path) -> tuple[Path, ...]:
        """The paths commands may read but not write in ``workdir`` (a writable path the user
        listed is not protected)."""
        return protected_paths(workdir, self.settings.protected, self.settings.writable)

    @contextlib.asynccontextmanager
    async def launch(
        self, command: Sequence[str], workdir: Path, *, guard_fd: int | None = None
    ) -> AsyncIterator[list[str]]:
        """The argv that runs ``command`` sandboxed in ``workdir``, valid while the context is
        open: the placeholders of missing protected paths exist, the call's ``pids`` cgroup
        is made, its private directory (sanitized git configs) exists and, when the network is
        allowed, drover's proxy listens for it; all go when the context closes (see
        :mod:`drover.tools.protect`, :mod:`drover.tools.limits` and
        :mod:`drover.tools.sandbox_proxy`).

        ``guard_fd``: the read end of a pipe whose write end only drover holds. A watchdog in
        the sandbox kills every process in it when the pipe reports end-of-file, that is when
        drover is gone. ``--die-with-parent`` alone leaves a gap: a drover killed while
        bubblewrap is still setting up can orphan the namespace's init before it has asked to
        die with its parent, and the command then runs on unsupervised. The watchdog only acts
        inside a PID namespace other than drover's (see :func:`guard_argv`).

        Raises :class:`~drover.errors.ToolError` when a protected path cannot be protected.
        """
        if not self.active or self.bwrap is None:
            raise RuntimeError("launch() of a sandbox that is not active")
        workdir, roots, paths = self._protected_roots(workdir)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(placeholders_guarded(workdir, paths, roots))
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="drover-call-")))
            call = CallFiles(scratch=scratch)
            if self.settings.proxied:
                socket_path = scratch / "proxy.sock"
                await stack.enter_async_context(
                    sandbox_proxy.serving(socket_path, self.settings.domains)
                )
                call = CallFiles(scratch=scratch, proxy_socket=socket_path)
            plan = plan_protection(paths, roots)
            make_placeholders(plan)
            argv = self._argv(command, workdir, guard_fd, plan, call)
            cgroup = None
            if self.pids_cgroup is not None:
                with contextlib.suppress(OSError):  # then the rlimit alone bounds processes
                    cgroup = PidsCgroup.create(self.pids_cgroup, self.settings.processes)
            try:
                yield argv if cgroup is None else cgroup.wrap(argv)
            finally:
                if cgroup is not None:
                    await cgroup.remove()

    def _protected_roots(self, workdir: Path) -> tuple[Path, list[Path], tuple[Path, ...]]:
        """(the resolved workdir, the writable roots, the protected paths)."""
        workdir = workdir.resolve()
        if self.mode != "workdir":
            return workdir, [], ()
        roots = [workdir, *(p.resolve() for p in self.settings.writable)]
        return workdir, roots, self.protected(workdir)

    def _argv(
        self,
        command: Sequence[str],
        workdir: Path,
        guard_fd: int | None,
        protections: Sequence[Protection] = (),
        call: CallFiles = NO_CALL_FILES,
    ) -> list[str]:
        assert self.bwrap is not None
        setup = _bridge_shell() if call.proxy_socket is not None else ""
        setup += limit_shell(self.settings.processes, self.settings.memory)
        outside = pid_namespace()
        if guard_fd is None or outside is None:
            inner = ["/bin/bash", "-c", setup + 'exec "$@"', "drover-limits", *command]
        else:
            inner = [*guard_argv(guard_fd, outside, limits=setup), *command]
        options = bwrap_options(self.settings, workdir, self.features, protections, call)
        return [self.bwrap, *options, *inner]

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        kept = filtered_env(env, self.settings.env)
        if self.settings.proxied:
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            # The sandbox's own loopback (a server a command starts) is reached directly; a
            # name the allow-list gives (``localhost``: the host's) goes through the proxy.
            local = [n for n in ("localhost", "127.0.0.1", "::1") if n not in self.settings.domains]
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                kept[name] = proxy
            kept["NO_PROXY"] = kept["no_proxy"] = ",".join(local)
        return kept

    def model_note(self) -> str:
        """What the model should know before it runs commands here ("" when unsandboxed)."""
        if not self.active:
            return ""
        writes = (
            "only /tmp (private to the command) can be written"
            if self.mode == "read-only"
            else "only the working directory (not its .git and other protected paths) and a "
            "private /tmp can be written"
        )
        if not self.settings.proxied:
            net = ", there is no network access"
        elif self.settings.network:
            net = ", the network is reached only through an HTTP proxy (HTTPS_PROXY is set)"
        else:
            net = (
                ", the network is reached only through an HTTP proxy (HTTPS_PROXY is set) "
                f"and only for {', '.join(self.settings.allow_domains)}"
            )
        return f"Commands run in a sandbox: {writes}{net}, and secret files are hidden."


def _bridge_shell() -> str:
    """Shell commands that start the forwarder to the proxy (:mod:`drover.tools.sandbox_bridge`)
    detached, and wait for its ``ready`` line."""
    source = Path(sandbox_bridge.__file__).read_text(encoding="utf-8")
    python = os.path.realpath(sys.executable)
    start = shlex.join([python, "-I", "-S", "-c", source, PROXY_SOCKET, str(PROXY_PORT)])
    return (
        f"exec 8< <( ({start} </dev/null 2>/dev/null &) ); "
        'read -r _ <&8 || echo "drover: the sandbox\'s network forwarder did not start" >&2; '
        "exec 8<&-; "
    )


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[INODE]``), or None where /proc cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def guard_argv(fd: int, outside: str, *, limits: str | None = None) -> list[str]:
    """A shell that starts the watchdog (detached twice, so the command's ``wait`` never waits
    for it; the namespace's init reaps it), closes the pipe, sets the limits (``limits``: shell
    commands, by default :data:`PROCESS_LIMIT` processes) and becomes the command (the
    arguments after these).

    The watchdog ends everything with ``kill -KILL -1``, which in the PID namespace drover runs
    in would mean every process the user may signal on the machine. It therefore checks first
    that its PID namespace is not ``outside`` (drover's) and does nothing if it is.
    """
    fd = int(fd)
    if limits is None:
        limits = f"ulimit -u {PROCESS_LIMIT} 2>/dev/null; "
    watchdog = (
        f'( (read -r _ <&{fd}; [ "$(readlink /proc/self/ns/pid)" != "$0" ] && kill -KILL -1) '
        f"</dev/null >/dev/null 2>&1 & ); exec {fd}<&-; {limits}"
        'exec "$@"'
    )
    return ["/bin/bash", "-c", watchdog, outside]


def _features(bwrap: str) -> frozenset[str]:
    """The optional bubblewrap options this build knows (older builds lack some)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    text = done.stdout + done.stderr
    return frozenset(opt for opt in ("--disable-userns", "--size") if opt in text)


def probe_sandbox(settings: SandboxSettings) -> SandboxStatus:
    """Check that bubblewrap runs here with the namespaces ``settings`` need.

    Runs ``/bin/true`` in a sandbox on a throwaway working directory with the real options;
    the status says why when it cannot (not installed, namespaces refused, bad path).
    """
    if settings.mode == "off":
        return SandboxStatus(settings=settings, active=False)
    if not Path("/proc/self/ns").is_dir():
        return _unavailable(settings, "bubblewrap needs Linux namespaces (not on this system)")
    bwrap = settings.bwrap or shutil.which("bwrap")
    if bwrap is None or not os.access(bwrap, os.X_OK):
        return _unavailable(settings, "bubblewrap is not installed (apt-get install bubblewrap)")
    for path in settings.writable:
        if not path.exists():
            raise ConfigError(f"sandbox writable path does not exist: {path}")
    features = _features(bwrap)
    status = SandboxStatus(settings=settings, active=True, bwrap=bwrap, features=features)
    cgroups = pids_cgroup_root()
    if cgroups is not None:
        # The call's cgroup is joined by a shell outside the sandbox: check that it can be.
        with_cgroup = dataclasses.replace(status, pids_cgroup=cgroups)
        if _probe_run(with_cgroup) is None:
            return with_cgroup
    failure = _probe_run(status)
    return status if failure is None else _unavailable(settings, failure)


def _probe_run(status: SandboxStatus) -> str | None:
    """Run the probe command; None when it worked, else why not."""
    settings = status.settings
    with tempfile.TemporaryDirectory(prefix="drover-sandbox-probe-") as scratch:
        # A write in the private /tmp, and in the workdir when the mode makes it writable.
        probe = "echo > /tmp/probe" + (" && echo > probe" if settings.mode == "workdir" else "")
        argv = status._argv(["/bin/sh", "-c", probe], Path(scratch).resolve(), None)
        cgroup = None
        try:
            if status.pids_cgroup is not None:
                cgroup = PidsCgroup.create(status.pids_cgroup, settings.processes)
                argv = cgroup.wrap(argv)
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT,
                stdin=subprocess.DEVNULL,
                check=False,
                env=filtered_env(),
            )
        except subprocess.TimeoutExpired:
            return f"bubblewrap did not start within {PROBE_TIMEOUT:g} s"
        except OSError as exc:
            return f"cannot run {status.bwrap}: {exc.strerror or exc}"
        finally:
            if cgroup is not None:
                cgroup.remove_now()
        wrote = (Path(scratch) / "probe").exists() or settings.mode == "read-only"
    if done.returncode != 0 or not wrote:
        detail = _first_line(done.stderr) or f"exit code {done.returncode}"
        return f"bubblewrap cannot create its namespaces here: {detail}"
    return None


def _unavailable(settings: SandboxSettings, reason: str) -> SandboxStatus:
    return SandboxStatus(settings=settings, active=False, reason=reason)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def require_sandbox(settings: SandboxSettings) -> SandboxStatus:
    """The start-up check of ``drover serve``: a working sandbox, or ``--sandbox off`` given.

    Raises :class:`~drover.errors.ConfigError` with a one-line reason when the sandbox is
    wanted and cannot run here.
    """
    status = probe_sandbox(settings)
    if status.unavailable:
        raise ConfigError(
            f"refusing to serve without a sandbox for bash: {status.reason}; "
            "pass --sandbox off to run commands unsandboxed"
        )
    return status


def sandbox_hint(status: SandboxStatus, output: str, workdir: Path) -> str | None:
    """A note the model can act on when ``output`` shows a failure the sandbox caused."""
    if not status.active:
        return None
    notes: list[str] = []
    protected = _protected_in(status, output, workdir)
    if protected is not None:
        notes.append(
            f"[sandbox: {protected} is protected: commands may read it but not change or "
            "create it, because code placed there would run outside the sandbox (git hooks "
            "and config, .envrc, drover's own settings). Do not try another way; tell the user "
            "which command to run themselves (e.g. the git commit).]"
        )
    elif _READ_ONLY.search(output):
        if status.mode == "read-only":
            notes.append(
                "[sandbox: the file system is read-only in this session, the working "
                "directory included (only a private /tmp is writable). Do not retry the write; "
                "tell the user it needs a session with --sandbox workdir.]"
            )
        else:
            notes.append(
                f"[sandbox: only the working directory {workdir} and a private /tmp are "
                "writable; everything else is read-only. Write inside the working directory "
                "(e.g. caches or virtual environments under it) instead.]"
            )
    hidden = [str(p) for p in status.settings.hidden if str(p) in output]
    if hidden and "permission denied" in output.lower():
        notes.append(
            f"[sandbox: {hidden[0]} is hidden from commands on purpose (it may hold secrets). "
            "Do not try to read it another way; ask the user if you need what it holds.]"
        )
    if not status.settings.proxied and _NO_NETWORK.search(output):
        notes.append(
            "[sandbox: commands have no network access (not even to services on this "
            "machine), so downloads and connections fail. Work with what is available "
            "offline, or tell the user it needs --sandbox-network or "
            "--sandbox-allow-domain NAME.]"
        )
    elif status.settings.proxied and _PROXY_REFUSED.search(output):
        names = ", ".join(status.settings.domains)
        notes.append(
            f"[sandbox: the network is reached only through drover's HTTP proxy, which admits "
            f"{names} and never this machine's own services; it refused a request (403). Do "
            "not try another way; tell the user which name the task needs "
            "(--sandbox-allow-domain NAME).]"
        )
    elif status.settings.proxied and _NO_NETWORK.search(output):
        notes.append(
            "[sandbox: the network is reached only through drover's HTTP proxy (HTTP_PROXY and "
            "HTTPS_PROXY are set); a program that ignores them, a direct connection, DNS "
            "lookups and services on this machine fail. Use a proxy-aware client (curl, pip, "
            "git over https).]"
        )
    return "\n".join(notes) or None


def _protected_in(status: SandboxStatus, output: str, workdir: Path) -> str | None:
    """The protected name a failed write in ``output`` names, if any."""
    if status.mode != "workdir" or not _REFUSED_WRITE.search(output):
        return None
    pattern = name_pattern(protected_names(status.protected(workdir)))
    for line in output.splitlines():
        found = pattern.search(line) if pattern and _REFUSED_WRITE.search(line) else None
        if found:
            return found.group(0)
    return None
