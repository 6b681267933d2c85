"""The working directory a run is given: checked, and made absolute.

Its own module so that commands which only read a workdir's files (``drover mcp approve``)
check it without loading what an agent is built from."""

from __future__ import annotations

from pathlib import Path

from drover.errors import ConfigError


def resolve_workdir(path: Path | str | None) -> Path:
    """The working directory (default: the current one), checked and made absolute."""
    workdir = (Path(path) if path is not None else Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise ConfigError(f"working directory does not exist or is not a directory: {workdir}")
    try:
        str(workdir).encode("utf-8")
    except UnicodeEncodeError:
        # The journal and the model see the path as text: it must be valid UTF-8.
        raise ConfigError(f"working directory path is not valid UTF-8: {workdir}") from None
    return workdir.resolve()
