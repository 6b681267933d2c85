"""What the user asked of the sandbox: ``--sandbox``, ``--sandbox-network`` and ``[sandbox]``.

:class:`SandboxSettings` holds the choices; :func:`sandbox_settings` builds them from flags and
config values (paths expanded, the default hidden paths added). What is hidden by default
(:func:`default_hidden`), what it sees of the home directory (:data:`HOME_ALLOWED` plus
``[sandbox] home_allow``), which names its network may reach (``allow_domains``, checked by
:func:`domain_entry`) and which environment variables a command gets (:func:`filtered_env`,
an allow-list) are decided here too; :mod:`drover.tools.sandbox_argv` turns the settings into
bubblewrap options.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias, get_args

import platformdirs

from drover.config.settings import ANY_DOMAIN, Config, domain_entry
from drover.errors import ConfigError
from drover.tools.limits import DEFAULT_PROCESSES, default_memory

SandboxMode: TypeAlias = Literal["off", "workdir", "read-only"]
SANDBOX_MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)

#: What a sandboxed command sees of the home directory: toolchains, their installs and their
#: download caches (read-only), nothing else — dotfiles and credential stores stay out, whatever
#: they are called. ``[sandbox] home_allow`` adds paths; ``.gitconfig`` and git's XDG config are
#: shown without their credentials (:mod:`drover.tools.sandbox_home`).
HOME_ALLOWED = (
    # git (credentials, includes and tokens filtered out)
    ".gitconfig",
    ".config/git/config",
    ".config/git/ignore",
    ".config/git/attributes",
    # Python
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".local/pipx",
    ".local/share/pipx",
    ".cache/pip",
    ".cache/uv",
    ".cache/pypoetry",
    ".cache/pre-commit",
    ".conda/pkgs",
    "miniconda3",
    "miniforge3",
    "anaconda3",
    # JavaScript
    ".nvm",
    ".npm",
    ".node-gyp",
    ".cache/node-gyp",
    ".yarn",
    ".cache/yarn",
    ".local/share/pnpm",
    ".cache/pnpm",
    ".bun",
    ".volta",
    ".deno",
    ".cache/deno",
    # Rust
    ".rustup",
    ".cargo/bin",
    ".cargo/env",
    ".cargo/registry",
    ".cargo/git",
    ".cargo/config.toml",
    # Go
    "go",
    ".cache/go-build",
    ".config/go",
    # JVM, Ruby, .NET and version managers
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".sdkman",
    ".rbenv",
    ".gem",
    ".local/share/gem",
    ".nuget/packages",
    ".dotnet",
    ".asdf",
    ".local/share/mise",
    ".nix-profile",
    ".elan",
    ".ghcup",
    ".opam",
)

#: Credential stores under the home directory hidden from every sandboxed command, also when
#: the home directory is the working directory (the allow-list above cannot apply then) or a
#: path of the allow-list holds one.
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
    ".config/git/credentials",
    ".config/hub",
    ".config/op",
    ".config/rclone",
    ".my.cnf",
    ".claude",
    ".claude.json",
    ".codex",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".terraform.d",
    ".password-store",
    ".local/share/keyrings",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".node_repl_history",
    ".local/share/fish",
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
    #: What commands see of the home directory besides :data:`HOME_ALLOWED`, absolute.
    home_allow: tuple[Path, ...] = ()
    #: Names the network reaches through drover's proxy (:func:`domain_entry` forms); empty
    #: with ``network`` false: no network at all. ``network`` true admits every name.
    allow_domains: tuple[str, ...] = ()

    @property
    def domains(self) -> tuple[str, ...]:
        """The names the proxy admits: ``*`` with ``network``, else ``allow_domains``."""
        return (ANY_DOMAIN,) if self.network else self.allow_domains

    @property
    def proxied(self) -> bool:
        """Whether commands have a way out at all (drover's proxy)."""
        return bool(self.domains)

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ConfigError(
                f"unknown sandbox mode {self.mode!r} (expected {', '.join(SANDBOX_MODES)})"
            )
        if self.processes < 1 or self.memory < 1:
            raise ConfigError("sandbox process and memory limits must be positive")
        for entry in self.allow_domains:
            if domain_entry(entry) != entry:
                raise ConfigError(f"sandbox allow_domains entry not normalised: {entry!r}")


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
    home_allow: Iterable[str | Path] = (),
    allow_domains: Iterable[str] = (),
) -> SandboxSettings:
    """Settings from flags and config values: paths expanded, relative ones taken from ``base``,
    the default hidden paths added; None limits take the defaults."""
    if mode not in SANDBOX_MODES:
        raise ConfigError(f"unknown sandbox mode {mode!r} (expected {', '.join(SANDBOX_MODES)})")
    base = base or Path.cwd()

    def absolute(path: str | Path) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else base / p

    def in_home(path: str | Path) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path.home() / p

    return SandboxSettings(
        mode=mode,  # narrowed to SandboxMode by the check above
        network=network,
        writable=tuple(absolute(p) for p in writable),
        hidden=default_hidden() + tuple(absolute(p) for p in hidden),
        protected=tuple(absolute(p) for p in protected),
        env=tuple(env),
        processes=DEFAULT_PROCESSES if processes is None else processes,
        memory=default_memory() if memory is None else memory,
        home_allow=tuple(in_home(p) for p in home_allow),
        allow_domains=tuple(dict.fromkeys(domain_entry(d) for d in allow_domains)),
    )


def settings_from_config(
    config: Config,
    *,
    mode: str | None = None,
    network: bool = False,
    hidden: Iterable[str | Path] = (),
    base: Path | None = None,
    allow_domains: Iterable[str] = (),
) -> SandboxSettings:
    """The settings of the config file's ``[sandbox]``, under the flags ``--sandbox MODE``
    (None: the file's mode) and ``--sandbox-network``; ``hidden`` adds paths (the journal),
    ``allow_domains`` names (``--sandbox-allow-domain``) to the file's."""
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
        home_allow=config.sandbox_home_allow,
        allow_domains=[*config.sandbox_allow_domains, *allow_domains],
    )
