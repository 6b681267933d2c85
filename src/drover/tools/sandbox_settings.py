"""What the user asked of the sandbox: ``--sandbox``, ``--sandbox-network`` and ``[sandbox]``.

:class:`SandboxSettings` holds the choices; :func:`sandbox_settings` builds them from flags and
config values (paths expanded, the default hidden paths added). What is hidden by default
(:func:`default_hidden`) and which environment variables a command gets (:func:`filtered_env`,
an allow-list) are decided here too; :mod:`drover.tools.sandbox` turns the settings into
bubblewrap options.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias, get_args

import platformdirs

from drover.config import Config
from drover.errors import ConfigError
from drover.tools.limits import DEFAULT_PROCESSES, default_memory

SandboxMode: TypeAlias = Literal["off", "workdir", "read-only"]
SANDBOX_MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)

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

#: The environment variables a sandboxed command gets; a name ending in ``*`` stands for every
#: name with that prefix. ``[sandbox] env`` adds names; every other variable stays out.
ENV_ALLOWED = ("PATH", "HOME", "USER", "LANG", "LC_*", "TERM", "TZ", "TMPDIR", "SHELL")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxSettings:
    """What the user asked for: ``--sandbox``, ``--sandbox-network`` and the config file."""

    mode: SandboxMode = "workdir"
    network: bool = False
    #: Extra paths commands may write (``workdir`` mode only), absolute.
    writable: tuple[Path, ...] = ()
    #: Paths commands must not read, absolute (the defaults of :func:`default_hidden` included).
    hidden: tuple[Path, ...] = ()
    #: Paths commands may read but not write, absolute, besides
    #: :data:`~drover.tools.protect.PROTECTED_NAMES` in the working directory.
    protected: tuple[Path, ...] = ()
    #: Environment variables commands get besides :data:`ENV_ALLOWED` (``NAME`` or ``PREFIX*``).
    env: tuple[str, ...] = ()
    #: Processes (and threads) a command may have at once.
    processes: int = DEFAULT_PROCESSES
    #: Bytes of memory one process of a command may allocate.
    memory: int = field(default_factory=default_memory)
    #: The bubblewrap executable; None looks ``bwrap`` up on ``PATH``.
    bwrap: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ConfigError(
                f"unknown sandbox mode {self.mode!r} (expected {', '.join(SANDBOX_MODES)})"
            )
        if self.processes < 1 or self.memory < 1:
            raise ConfigError("sandbox process and memory limits must be positive")


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


def filtered_env(
    env: Mapping[str, str] | None = None, allowed: Iterable[str] = ()
) -> dict[str, str]:
    """The environment of a sandboxed command: the variables of ``env`` that
    :data:`ENV_ALLOWED` or ``allowed`` name, ``TMPDIR`` private."""
    env = os.environ if env is None else env
    names = (*ENV_ALLOWED, *allowed)
    exact = {n for n in names if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith("*") and len(n) > 1)
    kept = {k: v for k, v in env.items() if k in exact or k.startswith(prefixes)}
    kept["TMPDIR"] = "/tmp"
    return kept


def sandbox_settings(
    *,
    mode: str,
    network: bool,
    writable: Iterable[str | Path] = (),
    hidden: Iterable[str | Path] = (),
    protected: Iterable[str | Path] = (),
    env: Iterable[str] = (),
    processes: int | None = None,
    memory: int | None = None,
    base: Path | None = None,
) -> SandboxSettings:
    """Settings from flags and config values: paths expanded, relative ones taken from ``base``,
    the default hidden paths added; None limits take the defaults."""
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
        protected=tuple(absolute(p) for p in protected),
        env=tuple(env),
        processes=DEFAULT_PROCESSES if processes is None else processes,
        memory=default_memory() if memory is None else memory,
    )


def settings_from_config(
    config: Config,
    *,
    mode: str | None = None,
    network: bool = False,
    hidden: Iterable[str | Path] = (),
    base: Path | None = None,
) -> SandboxSettings:
    """The settings of the config file's ``[sandbox]``, under the flags ``--sandbox MODE``
    (None: the file's mode) and ``--sandbox-network``; ``hidden`` adds paths (the journal)."""
    memory = config.sandbox_memory_mb
    return sandbox_settings(
        mode=mode or config.sandbox_mode,
        network=network or config.sandbox_network,
        writable=config.sandbox_writable,
        hidden=[*config.sandbox_hidden, *hidden],
        protected=config.sandbox_protected,
        env=config.sandbox_env,
        processes=config.sandbox_processes,
        memory=None if memory is None else memory << 20,
        base=base,
    )
