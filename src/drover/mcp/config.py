"""MCP server configuration: the ``.mcp.json`` format users already keep, read and expanded.

A file holds ``{"mcpServers": {NAME: SERVER}}`` where SERVER is a child process spoken to over
stdio — ``{"command", "args"?, "env"?, "cwd"?}`` (``"type": "stdio"`` optional; a relative
``cwd`` is relative to the file's directory, and where a server starts without one is
:mod:`drover.mcp.launch`'s) — or a
streamable-HTTP endpoint, ``{"type": "http", "url", "headers"?}``. drover reads a few keys of
its own in the same object and ignores keys it does not know (other clients' settings):

=====================  ==========================================================================
``"trust"``            ``true``: the server's tools run without asking; or a list of tool names
                       (as the server names them) that do. They still count as side-effecting.
``"readOnly"``         ``true``: every tool of the server has no side effects (it never asks, may
                       run under ``--permission-mode deny``, and a call cut off while running is
                       not "outcome unknown"); or a list of tool names that have none.
``"timeout"``          seconds a call may go without an answer or a progress notification
                       before it fails and the server is restarted on its next use (600)
``"startupTimeout"``   seconds the server has to start and list its tools (30)
=====================  ==========================================================================

``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url`` and ``headers`` are
expanded from the environment. A server naming a variable that is not set is kept with an
``error`` (it does not start; ``drover mcp list`` says why) instead of failing the whole file.

What expands from a variable, every header value and the values of ``env`` entries whose name
looks like a credential (``…KEY``, ``…TOKEN``, ``…SECRET``, ``…PASSWORD``…) are the server's
*secrets*: nothing drover shows, logs or stores contains them. Only the text as written (with
its ``${VAR}``) is ever displayed, and :attr:`McpServerConfig.secrets` feeds the journal's
redactor, so a server that echoes a secret back has it redacted before it is persisted.

Files are read in order and a later definition of a name replaces an earlier one: the
user-level file (``mcp.json`` next to drover's ``config.toml``), the workdir's ``.mcp.json``,
then each file given (``--mcp-config``). A file that is not valid JSON or not of this shape is
a :class:`~drover.errors.ConfigError` naming the file and the problem. A project's file
(``.mcp.json``) that leads outside its directory, or is no regular file, is skipped with a
warning (:mod:`drover.tools.project_files`). A file may be given as
an :class:`McpFile` to take only some of its servers (the command line takes a project's
servers only once approved: :mod:`drover.mcp.approval`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from drover.config.expand import Expander, kept_secrets, scrub, secret_patterns
from drover.config.settings import default_config_path
from drover.errors import ConfigError
from drover.tools.project_files import ProjectFileRefused, read_project_file

log = logging.getLogger(__name__)

Transport: TypeAlias = Literal["stdio", "http"]
#: ``True`` (every tool of the server) or the names of some of its tools.
ToolMarks: TypeAlias = bool | frozenset[str]

PROJECT_FILE = ".mcp.json"
USER_FILE = "mcp.json"
DEFAULT_TIMEOUT = 600.0
DEFAULT_STARTUP_TIMEOUT = 30.0
#: ``env`` names whose values are credentials.
_SECRET_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|AUTH|CREDENTIAL|COOKIE)")
_HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerConfig:
    """One configured MCP server, expanded; see the module docstring."""

    name: str
    transport: Transport
    #: The command and arguments as expanded (they may hold a secret: never shown).
    command: str = field(default="", repr=False)
    args: tuple[str, ...] = field(default=(), repr=False)
    #: Environment of a stdio server, over the few variables the SDK passes on (PATH, HOME…).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Where the entry says the server starts: absolute, or relative to the workdir (an entry
    #: of the library's ``mcp_servers``, which has no file).
    cwd: str | None = None
    #: The directory of the project file (``.mcp.json``) that defines the server, where it
    #: starts when the entry names no ``cwd`` (None: a file of the user's own, or
    #: ``mcp_servers``: :mod:`drover.mcp.launch`).
    project_dir: str | None = None
    url: str = field(default="", repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    trust: ToolMarks = False
    read_only: ToolMarks = False
    timeout: float = DEFAULT_TIMEOUT
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    #: Where it was defined (a file path, or ``mcp_servers`` for the agent's parameter).
    source: str = ""
    #: The command line or URL as written, ``${VAR}`` unexpanded: safe to show.
    display: str = ""
    #: The values nothing may show, log or store (longest first).
    secrets: tuple[str, ...] = field(default=(), repr=False)
    #: Why the server cannot be used as configured (then it is never started).
    error: str | None = None

    def is_trusted(self, tool: str) -> bool:
        return _marked(self.trust, tool)

    def is_read_only(self, tool: str) -> bool:
        return _marked(self.read_only, tool)

    def scrub(self, text: str) -> str:
        """``text`` with every secret of the server replaced by ``[REDACTED]``."""
        return scrub(text, self.secrets)


def _marked(marks: ToolMarks, tool: str) -> bool:
    return marks if isinstance(marks, bool) else tool in marks


# -- files -------------------------------------------------------------------------------------


def user_config_file(env: Mapping[str, str] | None = None) -> Path:
    """The user-level file: ``mcp.json`` next to drover's ``config.toml``."""
    return default_config_path(env).parent / USER_FILE


def default_config_files(workdir: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """The files the command line reads before ``--mcp-config``: the user-level one and the
    workdir's ``.mcp.json``, those that exist."""
    candidates = [user_config_file(env), workdir / PROJECT_FILE]
    return [path for path in candidates if path.is_file()]


@dataclass(frozen=True, slots=True)
class McpFile:
    """A config file of which only some servers are taken (a project's ``.mcp.json``, whose
    servers start only once approved).

    ``servers`` names the servers taken (None: all). ``sha256`` is the content the choice was
    made on: a file whose content changed since is refused, so a server approved as one
    program never starts as another.
    """

    path: Path
    servers: frozenset[str] | None = None
    sha256: str | None = None


def load_servers(
    files: Iterable[Path | str | McpFile] = (),
    servers: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> list[McpServerConfig]:
    """The servers of ``files`` (in order) and then of ``servers`` (the ``mcpServers``
    mapping itself), a later definition of a name replacing an earlier one."""
    env = os.environ if env is None else env
    found: dict[str, McpServerConfig] = {}
    for item in files:
        chosen = item if isinstance(item, McpFile) else McpFile(Path(item))
        path = chosen.path.expanduser()
        where = str(path)
        try:
            data = read_config_bytes(path)
        except ProjectFileRefused as exc:
            log.warning("MCP servers not started: %s", exc)
            continue
        if chosen.sha256 is not None and hashlib.sha256(data).hexdigest() != chosen.sha256:
            raise ConfigError(f"{path}: changed while drover started; start it again")
        for name, raw in parse_config_bytes(data, path).items():
            if chosen.servers is not None and name not in chosen.servers:
                continue
            found.pop(name, None)  # (a redefinition moves to the end)
            found[name] = parse_server(name, raw, where, env, file=path)
    if servers is not None:
        where = "mcp_servers"
        for name, raw in _servers_of(servers, where).items():
            found.pop(name, None)
            found[name] = parse_server(name, raw, where, env)
    return list(found.values())


def read_config_bytes(path: Path) -> bytes:
    """A config file's content (what its approval is keyed by, and what is parsed). A
    project's file (``.mcp.json``) is read only as :mod:`drover.tools.project_files` allows, in its
    own directory: :class:`~drover.tools.project_files.ProjectFileRefused` otherwise."""
    try:
        if path.name == PROJECT_FILE:
            data = read_project_file(path, path.absolute().parent)
            if data is None:
                raise FileNotFoundError(path)
            return data
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such MCP config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the MCP config file: {exc}") from None


def parse_config_bytes(content: bytes, path: Path) -> Mapping[str, Any]:
    """The ``mcpServers`` mapping of a file's content, its shape checked."""
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read the MCP config file: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict) or "mcpServers" not in data:
        raise ConfigError(f'{path}: expected an object with "mcpServers": {{NAME: SERVER, …}}')
    return _servers_of(data["mcpServers"], f"{path}: mcpServers")


def _servers_of(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected an object of servers by name")
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: a server needs a non-empty name")
    return value


# -- one server --------------------------------------------------------------------------------


def parse_server(
    name: str, raw: object, source: str, env: Mapping[str, str], *, file: Path | None = None
) -> McpServerConfig:
    """One server of ``file`` (None: of the ``mcp_servers`` mapping); raises
    :class:`ConfigError` when its shape is wrong."""
    where = f"{source}: mcpServers.{name}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    kind = raw.get("type", "stdio" if "command" in raw else None)
    expand = Expander(env)
    secrets: list[str] = []
    common: dict[str, Any] = {
        "name": name,
        "source": source,
        "trust": _marks(raw.get("trust", False), f"{where}.trust"),
        "read_only": _marks(raw.get("readOnly", False), f"{where}.readOnly"),
        "timeout": _seconds(raw.get("timeout", DEFAULT_TIMEOUT), f"{where}.timeout"),
        "startup_timeout": _seconds(
            raw.get("startupTimeout", DEFAULT_STARTUP_TIMEOUT), f"{where}.startupTimeout"
        ),
    }
    if kind == "stdio":
        command = _string(raw.get("command"), f"{where}.command")
        args = _strings(raw.get("args", []), f"{where}.args")
        env_raw = _string_map(raw.get("env", {}), f"{where}.env")
        cwd = raw.get("cwd")
        if cwd is not None:
            cwd = expand(_string(cwd, f"{where}.cwd"))
            if file is not None:
                cwd = str(file.absolute().parent / Path(cwd).expanduser())
        in_project = file is not None and file.name == PROJECT_FILE
        server_env = {key: expand(value) for key, value in env_raw.items()}
        secrets += [v for k, v in server_env.items() if _SECRET_NAME.search(k)]
        config = McpServerConfig(
            transport="stdio",
            command=expand(command),
            args=tuple(expand(arg) for arg in args),
            env=server_env,
            cwd=cwd,
            project_dir=str(file.absolute().parent) if in_project and file else None,
            display=" ".join([command, *args]),
            **common,
        )
    elif kind in _HTTP_TYPES:
        url = _string(raw.get("url"), f"{where}.url")
        headers = {
            k: expand(v) for k, v in _string_map(raw.get("headers", {}), f"{where}.headers").items()
        }
        secrets += headers.values()
        expanded_url = expand(url)
        if not expanded_url.startswith(("http://", "https://")) and not expand.missing:
            raise ConfigError(f"{where}.url: expected an http:// or https:// URL, not {url!r}")
        config = McpServerConfig(
            transport="http", url=expanded_url, headers=headers, display=url, **common
        )
    elif kind == "sse":
        raise ConfigError(
            f'{where}: the "sse" transport is not supported; use "type": "http" (streamable HTTP)'
        )
    elif kind is None:
        raise ConfigError(f'{where}: expected "command" (stdio) or "type": "http" with "url"')
    else:
        raise ConfigError(f'{where}.type: expected "stdio" or "http", not {kind!r}')
    secrets += expand.substituted
    error = None
    if expand.missing:
        error = f"{expand.missing_text()} is not set in the environment"
    return replace(config, secrets=kept_secrets(secrets), error=error)


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected a non-empty string")
    return value


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return list(value)


def _string_map(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where}: expected an object of strings")
    return dict(value)


def _marks(value: object, where: str) -> ToolMarks:
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise ConfigError(f"{where}: expected true, false or a list of tool names")


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{where}: expected a positive number of seconds, not {value!r}")
    return seconds


def redact_patterns(servers: Sequence[McpServerConfig]) -> list[str]:
    """The servers' secrets as patterns for the journal's redactor."""
    return secret_patterns(s for c in servers for s in c.secrets)
