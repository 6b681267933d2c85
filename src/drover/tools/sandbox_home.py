"""What a sandboxed command sees of the home directory: an allow-list, not everything minus secrets.

The home directory is covered by an empty read-only directory; the paths of
:data:`~drover.tools.sandbox_settings.HOME_ALLOWED` (toolchains, their installs and download
caches) and ``[sandbox] home_allow`` that exist are mounted back into it, read-only. A dotfile
nobody listed — ``~/.my.cnf``, ``~/.vault-token``, an agent's credentials, a shell history —
is simply not there, whatever its name.

git's global configuration is shown without what authenticates: :func:`sanitized_gitconfig`
drops ``[credential]`` and ``[include]``/``[includeIf]`` sections (what they include is not
visible anyway), ``url`` sections and values whose URLs carry a user or password,
``http.extraHeader``/``cookieFile`` and any key naming a token, password or secret. The copy is
written into the call's private directory and mounted over the original.

An allowed path that resolves into a hidden one (``~/.cargo`` a link to ``~/.ssh``) is left out.
When the working directory is the home directory or holds it, the home cannot be covered (the
command works there); the hidden list then still covers the credential stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drover.tools.sandbox_settings import HOME_ALLOWED

#: The allowed paths whose content is git configuration, shown sanitized.
GIT_CONFIGS = (".gitconfig", ".config/git/config")

_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]')
_DROPPED_SECTIONS = frozenset({"credential", "include", "includeif"})
_SECRET_KEY = re.compile(
    r"^\s*(extraheader|cookiefile|[a-z0-9-]*(token|password|passwd|secret|oauth)[a-z0-9-]*)\s*(=|$)",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@]*@", re.IGNORECASE)


def sanitized_gitconfig(text: str) -> str:
    """``text`` (a git config file) without what authenticates (see the module docstring)."""
    out: list[str] = []
    dropping = False
    for line in text.splitlines():
        header = _SECTION.match(line)
        if header:
            name, sub = header.group(1).lower(), header.group(2) or ""
            section = name.split(".", 1)[0]
            dropping = section in _DROPPED_SECTIONS or bool(_URL_USERINFO.search(sub))
            if section == "url" and "@" in sub:
                dropping = True
            # A header may carry a key on the same line: keep the header alone.
            if not dropping:
                out.append(line[: header.end()])
                rest = line[header.end() :]
                if rest.strip() and not _secret_line(rest):
                    out.append(rest)
            continue
        if dropping or _secret_line(line):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _secret_line(line: str) -> bool:
    return bool(_SECRET_KEY.match(line) or _URL_USERINFO.search(line))


@dataclass(frozen=True, slots=True)
class HomeView:
    """The home directory as one call's sandbox shows it."""

    home: Path
    #: (source, destination) pairs mounted read-only into the covered home.
    binds: tuple[tuple[Path, Path], ...]


def home_view(
    home: Path,
    allowed: Iterable[Path],
    hidden: Sequence[Path],
    covered_by: Sequence[Path],
    scratch: Path | None,
) -> HomeView | None:
    """The view of ``home`` (None: it cannot be covered, because one of ``covered_by`` — the
    working directory, the writable paths — is it or holds it, or it is not a directory).

    ``allowed``: absolute paths under ``home`` to show; ``hidden``: paths never to show;
    ``scratch``: the call's private directory, where sanitized git configs are written (None:
    they are left out).
    """
    try:
        home = home.resolve()
    except (OSError, RuntimeError):
        return None
    if home == Path("/") or not home.is_dir():
        return None
    if any(home == c or home.is_relative_to(c) for c in covered_by):
        return None
    secret = [h.resolve() for h in hidden]
    binds: list[tuple[Path, Path]] = []
    for path in dict.fromkeys(allowed):
        if not path.is_relative_to(home) or path == home:
            continue
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # missing: nothing to show
        # One that holds a hidden path is fine (that path is covered again over it).
        if any(real == s or real.is_relative_to(s) for s in secret):
            continue
        relative = path.relative_to(home).as_posix()
        if relative in GIT_CONFIGS:
            if scratch is None or not real.is_file():
                continue
            copy = scratch / relative.replace("/", "-")
            try:
                text = real.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            copy.write_text(sanitized_gitconfig(text), encoding="utf-8")
            binds.append((copy, path))
        else:
            binds.append((real, path))
    # A path inside another one is mounted after it, or the outer mount would cover it (a
    # sanitized ~/.config/git/config under a ~/.config the user allowed).
    binds.sort(key=lambda bind: len(bind[1].parts))
    return HomeView(home, tuple(binds))


def allowed_paths(home: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """The built-in allow-list under ``home``, then ``extra`` (absolute)."""
    return [home / name for name in HOME_ALLOWED] + list(extra)
