"""The sandbox the ``bash`` tool runs commands in: bubblewrap namespaces on Linux.

A sandboxed command runs as ``bwrap … -- /bin/bash -c COMMAND`` with

- the whole file system mounted read-only, except the working directory (``workdir`` mode; in
  ``read-only`` mode it is read-only too), extra writable paths from the config file, and a
  private, size-bounded ``/tmp`` that vanishes with the call;
- hidden paths — drover's own data and config directories, well-known credential stores,
  ``/run`` (where host services listen on Unix sockets) and paths the user lists — covered by
  an empty read-only directory or an unreadable file;
- a fresh network namespace (only a loopback of its own) unless network is allowed;
- its own user namespace with every capability dropped (so even root cannot remount what is
  read-only, and cannot create further user namespaces), and its own PID, IPC and UTS
  namespaces: a command sees none of drover's processes and cannot signal them; when the
  namespace's first process ends, the kernel kills every process left in it;
- ``--die-with-parent``: when drover dies (even by SIGKILL) the whole sandbox dies with it;
- an environment without secrets: variables whose names look like keys, tokens or passwords,
  or whose values carry URL credentials, never reach the command.

:func:`probe_sandbox` checks once, by running a trivial command with the real flags, that
bubblewrap is installed and can create the namespaces here; the resulting
:class:`SandboxStatus` builds each call's command line. :func:`require_sandbox` is the check a
server makes at start-up. :func:`sandbox_hint` turns a failure the sandbox caused (read-only
file system, no network) into a sentence the model can act on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias, get_args

import platformdirs

from drover.errors import ConfigError

SandboxMode: TypeAlias = Literal["off", "workdir", "read-only"]
SANDBOX_MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)

#: Size bound of the private ``/tmp`` (bytes): it lives in memory, so a runaway command must
#: not be able to fill the machine's RAM through it.
TMP_SIZE = 1 << 30
#: Processes a sandboxed command may have at once (``ulimit -u``), so a fork bomb cannot use up
#: the machine's process table before the timeout ends it. The kernel does not apply the limit
#: to root, whose commands rely on the timeout alone.
PROCESS_LIMIT = 4096
#: Seconds the start-up probe may take before bubblewrap is declared unusable.
PROBE_TIMEOUT = 20.0

#: Credential stores under the home directory hidden from every sandboxed command.
HOME_SECRETS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
)

#: System files holding secrets, hidden too (``/etc/ssh/ssh_host_*_key`` as well).
SYSTEM_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-")

# A variable is a secret when its name says so, or its value is a URL with a password.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE|"
    r"(^|_)PAT$|DSN|DATABASE_URL|^DROVER_DB$|^SSH_AUTH_SOCK$|^GPG_AGENT",
    re.IGNORECASE,
)
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.IGNORECASE)

# Messages by which the usual tools report a write refused by a read-only mount.
_READ_ONLY = re.compile(r"read-only file system", re.IGNORECASE)
# ... and a network that is not there (DNS, refused or unreachable connections).
_NO_NETWORK = re.compile(
    r"could not resolve|temporary failure in name resolution|name or service not known|"
    r"no address associated with hostname|network is unreachable|failed to establish a new "
    r"connection|getaddrinfo|nodename nor servname|connection refused|could not connect to|"
    r"failed to connect to|unable to resolve|no route to host",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxSettings:
    """What the user asked for: ``--sandbox``, ``--sandbox-network`` and the config file."""

    mode: SandboxMode = "workdir"
    network: bool = False
    #: Extra paths commands may write (``workdir`` mode only), absolute.
    writable: tuple[Path, ...] = ()
    #: Paths commands must not read, absolute (the defaults of :func:`default_hidden` included).
    hidden: tuple[Path, ...] = ()
    #: The bubblewrap executable; None looks ``bwrap`` up on ``PATH``.
    bwrap: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ConfigError(
                f"unknown sandbox mode {self.mode!r} (expected {', '.join(SANDBOX_MODES)})"
            )


def default_hidden(
    *, home: Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[Path, ...]:
    """drover's own data and config directories, its config file, credential stores and the
    system's password hashes and host keys."""
    env = os.environ if env is None else env
    home = home if home is not None else Path.home()
    paths = [
        Path(platformdirs.user_data_dir("drover")),
        Path(platformdirs.user_config_dir("drover")),
    ]
    if env.get("DROVER_CONFIG"):
        paths.append(Path(env["DROVER_CONFIG"]).expanduser())
    paths += [home / name for name in HOME_SECRETS]
    # Readable when drover runs as root (the sandbox keeps the user's uid).
    paths += [Path("/etc", name) for name in SYSTEM_SECRETS]
    paths += sorted(Path("/etc/ssh").glob("ssh_host_*_key"))
    return tuple(paths)


def is_secret_variable(name: str, value: str) -> bool:
    """Whether an environment variable must not reach a sandboxed command."""
    return bool(_SECRET_NAME.search(name) or _URL_CREDENTIALS.search(value))


def filtered_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed command: ``env`` without secrets, ``TMPDIR`` private."""
    env = os.environ if env is None else env
    kept = {k: v for k, v in env.items() if not is_secret_variable(k, v)}
    kept["TMPDIR"] = "/tmp"
    return kept


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

    @property
    def mode(self) -> SandboxMode:
        return self.settings.mode

    @property
    def unavailable(self) -> bool:
        """The user wants a sandbox, and this machine cannot provide one."""
        return self.mode != "off" and not self.active

    @property
    def contained(self) -> bool:
        """A command can write only in the working directory (or nowhere) and has no network."""
        if not self.active or self.settings.network:
            return False
        return self.mode == "read-only" or not self.settings.writable

    def describe(self) -> str:
        """One line for start-up lines, e.g. ``sandbox: workdir (bubblewrap, no network)``."""
        if self.mode == "off":
            return "sandbox: off (commands run with your full rights)"
        if not self.active:
            return f"sandbox: unavailable ({self.reason}); bash commands are refused"
        net = "network allowed" if self.settings.network else "no network"
        extra = f", {len(self.settings.writable)} extra writable" if self.settings.writable else ""
        return f"sandbox: {self.mode} (bubblewrap, {net}{extra})"

    def label(self) -> str:
        """A short tag recorded on each tool call, e.g. ``workdir``, ``workdir+net``, ``off``."""
        if self.mode == "off":
            return "off"
        if not self.active:
            return "unavailable"
        tag = self.mode + ("+net" if self.settings.network else "")
        return tag + ("+writable" if self.settings.writable and self.mode == "workdir" else "")

    def argv(
        self, command: Sequence[str], workdir: Path, *, guard_fd: int | None = None
    ) -> list[str]:
        """``bwrap`` options that run ``command`` sandboxed in ``workdir``.

        ``guard_fd``: the read end of a pipe whose write end only drover holds. A watchdog in
        the sandbox kills every process in it when the pipe reports end-of-file, that is when
        drover is gone. ``--die-with-parent`` alone leaves a gap: a drover killed while
        bubblewrap is still setting up can orphan the namespace's init before it has asked to
        die with its parent, and the command then runs on unsupervised. The watchdog only acts
        inside a PID namespace other than drover's (see :func:`guard_argv`).
        """
        if not self.active or self.bwrap is None:
            raise RuntimeError("argv() of a sandbox that is not active")
        outside = pid_namespace()
        if guard_fd is None or outside is None:
            inner = list(command)
        else:
            inner = [*guard_argv(guard_fd, outside), *command]
        return [self.bwrap, *_bwrap_options(self.settings, workdir, self.features), *inner]

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        return filtered_env(env)

    def model_note(self) -> str:
        """What the model should know before it runs commands here ("" when unsandboxed)."""
        if not self.active:
            return ""
        writes = (
            "only /tmp (private to the command) can be written"
            if self.mode == "read-only"
            else "only the working directory and a private /tmp can be written"
        )
        net = "" if self.settings.network else ", there is no network access"
        return f"Commands run in a sandbox: {writes}{net}, and secret files are hidden."


def _bwrap_options(settings: SandboxSettings, workdir: Path, features: frozenset[str]) -> list[str]:
    workdir = workdir.resolve()
    args = ["--unshare-all"]
    if settings.network:
        args.append("--share-net")
    # Explicit even where implied: as root, bubblewrap would otherwise keep every capability.
    args += ["--unshare-user", "--cap-drop", "ALL", "--die-with-parent"]
    if "--disable-userns" in features:
        args.append("--disable-userns")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if "--size" in features:
        args += ["--size", str(TMP_SIZE)]
    args += ["--tmpfs", "/tmp"]
    writable = list(settings.writable) if settings.mode == "workdir" else []
    hidden = [p.resolve() for p in settings.hidden]
    if not settings.network:
        # Host services (container runtimes, databases, D-Bus) listen on sockets under /run,
        # and a read-only mount does not stop a connect(): hide them with the network.
        hidden += [Path("/run")]
    binds = [workdir, *(p.resolve() for p in writable)]
    # A hidden directory holding the workdir (or a writable path) is covered first, so the
    # bind on top of it stays visible; every other hidden path is covered last, so it wins
    # over the binds (a secret inside the workdir stays hidden).
    outer = [h for h in hidden if any(b.is_relative_to(h) for b in binds)]
    inner = [h for h in hidden if h not in outer]
    for path in outer:
        args += _hide(path)
    for path in writable:
        path = path.resolve()
        if path.exists():
            args += ["--bind", str(path), str(path)]
    args += ["--bind" if settings.mode == "workdir" else "--ro-bind", str(workdir), str(workdir)]
    for path in inner:
        args += _hide(path)
    args += ["--chdir", str(workdir), "--"]
    return args


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[INODE]``), or None where /proc cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def guard_argv(fd: int, outside: str) -> list[str]:
    """A shell that starts the watchdog (detached twice, so the command's ``wait`` never waits
    for it; the namespace's init reaps it), closes the pipe, sets :data:`PROCESS_LIMIT` and
    becomes the command (the arguments after these).

    The watchdog ends everything with ``kill -KILL -1``, which in the PID namespace drover runs
    in would mean every process the user may signal on the machine. It therefore checks first
    that its PID namespace is not ``outside`` (drover's) and does nothing if it is.
    """
    fd = int(fd)
    watchdog = (
        f'( (read -r _ <&{fd}; [ "$(readlink /proc/self/ns/pid)" != "$0" ] && kill -KILL -1) '
        f"</dev/null >/dev/null 2>&1 & ); exec {fd}<&-; ulimit -u {PROCESS_LIMIT} 2>/dev/null; "
        'exec "$@"'
    )
    return ["/bin/bash", "-c", watchdog, outside]


def _hide(path: Path) -> list[str]:
    if path.is_dir():
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    if path.exists():
        # /dev/null mounted inside a user namespace is a node that cannot be opened: reads
        # fail with "Permission denied" instead of returning the secret.
        return ["--ro-bind", "/dev/null", str(path)]
    return []


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
    with tempfile.TemporaryDirectory(prefix="drover-sandbox-probe-") as scratch:
        # A write in the private /tmp, and in the workdir when the mode makes it writable.
        probe = "echo > /tmp/probe" + (" && echo > probe" if settings.mode == "workdir" else "")
        argv = status.argv(["/bin/sh", "-c", probe], Path(scratch))
        try:
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
            return _unavailable(settings, f"bubblewrap did not start within {PROBE_TIMEOUT:g} s")
        except OSError as exc:
            return _unavailable(settings, f"cannot run {bwrap}: {exc.strerror or exc}")
        wrote = (Path(scratch) / "probe").exists() or settings.mode == "read-only"
    if done.returncode != 0 or not wrote:
        detail = _first_line(done.stderr) or f"exit code {done.returncode}"
        return _unavailable(settings, f"bubblewrap cannot create its namespaces here: {detail}")
    return status


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
    if _READ_ONLY.search(output):
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
    if not status.settings.network and _NO_NETWORK.search(output):
        notes.append(
            "[sandbox: commands have no network access (not even to services on this "
            "machine), so downloads and connections fail. Work with what is available "
            "offline, or tell the user it needs --sandbox-network.]"
        )
    return "\n".join(notes) or None


def sandbox_settings(
    *,
    mode: str,
    network: bool,
    writable: Iterable[str | Path] = (),
    hidden: Iterable[str | Path] = (),
    base: Path | None = None,
) -> SandboxSettings:
    """Settings from flags and config values: paths expanded, relative ones taken from ``base``,
    the default hidden paths added."""
    if mode not in SANDBOX_MODES:
        raise ConfigError(f"unknown sandbox mode {mode!r} (expected {', '.join(SANDBOX_MODES)})")
    base = base or Path.cwd()

    def absolute(path: str | Path) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else base / p

    return SandboxSettings(
        mode=mode,  # narrowed to SandboxMode by the check above
        network=network,
        writable=tuple(absolute(p) for p in writable),
        hidden=default_hidden() + tuple(absolute(p) for p in hidden),
    )
