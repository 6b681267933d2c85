"""Choosing, checking and reporting the sandbox: settings, fallbacks, permissions, hints.

Most of these need no bubblewrap: they check what drover decides and says. A stand-in
``bwrap`` (a real executable that fails the way bubblewrap does without namespaces) covers a
machine where it is installed but cannot run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from drover.agent.agent import Agent
from drover.config.settings import load_config
from drover.errors import ConfigError, ToolError
from drover.tools.base import ToolContext
from drover.tools.builtin.bash import BashTool
from drover.tools.registry import default_registry
from drover.tools.sandbox import (
    SandboxSettings,
    SandboxStatus,
    filtered_env,
    probe_sandbox,
    require_sandbox,
    sandbox_hint,
    sandbox_settings,
    settings_from_config,
)
from drover.turn.permissions import PermissionPolicy

ACTIVE = SandboxStatus(
    settings=SandboxSettings(),
    active=True,
    bwrap="/usr/bin/bwrap",
    pids_cgroup=Path("/sys/fs/cgroup/pids"),
)


def fake_bwrap(tmp_path: Path) -> str:
    """An executable that fails like bubblewrap on a kernel that refuses user namespaces."""
    path = tmp_path / "bwrap"
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --help ]; then echo "usage: bwrap --disable-userns --size"; exit 0; fi\n'
        'echo "bwrap: No permissions to create a new namespace" >&2\nexit 1\n'
    )
    path.chmod(0o755)
    return str(path)


def test_missing_bubblewrap_is_reported_not_hidden(tmp_path: Path) -> None:
    settings = SandboxSettings(bwrap=str(tmp_path / "no-such-bwrap"))
    status = probe_sandbox(settings)
    assert status.unavailable and not status.active and not status.contained
    assert status.reason == "bubblewrap is not installed (apt-get install bubblewrap)"
    assert status.describe() == (
        "sandbox: unavailable (bubblewrap is not installed (apt-get install bubblewrap)); "
        "bash commands are refused"
    )


def test_bubblewrap_without_namespaces_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    status = probe_sandbox(SandboxSettings(bwrap=fake_bwrap(tmp_path)))
    assert status.unavailable
    assert status.reason == (
        "bubblewrap cannot create its namespaces here: "
        "bwrap: No permissions to create a new namespace"
    )


def test_serve_refuses_without_a_sandbox_unless_it_is_off(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        require_sandbox(SandboxSettings(bwrap=fake_bwrap(tmp_path)))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("refusing to serve without a sandbox for bash: bubblewrap cannot")
    assert message.endswith("pass --sandbox off to run commands unsandboxed")
    off = require_sandbox(SandboxSettings(mode="off", bwrap=fake_bwrap(tmp_path)))
    assert not off.active and not off.unavailable
    assert off.describe() == "sandbox: off (commands run with your full rights)"


async def test_an_unavailable_sandbox_refuses_commands_instead_of_running_them(
    tmp_path: Path, workdir: Path
) -> None:
    status = probe_sandbox(SandboxSettings(bwrap=fake_bwrap(tmp_path)))
    bash = BashTool(sandbox=status)
    with pytest.raises(ToolError, match="bash is disabled: the sandbox is unavailable") as caught:
        await bash.run({"command": "touch ran"}, ToolContext(workdir=workdir))
    assert "--sandbox off" in str(caught.value)
    assert not (workdir / "ran").exists()
    # --sandbox off: the same command runs, unsandboxed.
    off = BashTool(sandbox=probe_sandbox(SandboxSettings(mode="off")))
    out = await off.run({"command": "touch ran"}, ToolContext(workdir=workdir))
    assert not out.is_error
    assert (workdir / "ran").exists()


def test_writable_paths_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sandbox writable path does not exist: .*/nope"):
        probe_sandbox(SandboxSettings(writable=(tmp_path / "nope",), bwrap="/bin/true"))


def test_settings_resolve_paths_and_add_the_default_hidden_ones(tmp_path: Path) -> None:
    settings = sandbox_settings(
        mode="read-only", network=True, writable=["~/x"], hidden=["rel/secret"], base=tmp_path
    )
    assert settings.mode == "read-only" and settings.network
    assert settings.writable == (Path.home() / "x",)
    assert tmp_path / "rel/secret" in settings.hidden
    assert Path.home() / ".ssh" in settings.hidden
    assert Path.home() / ".aws" in settings.hidden
    with pytest.raises(ConfigError, match="unknown sandbox mode 'strict'"):
        sandbox_settings(mode="strict", network=False)


def test_labels_and_containment() -> None:
    assert ACTIVE.label() == "workdir" and ACTIVE.contained
    net = replace(ACTIVE, settings=SandboxSettings(network=True))
    assert net.label() == "workdir+net" and not net.contained
    listed = replace(ACTIVE, settings=SandboxSettings(allow_domains=("pypi.org", "*.example.org")))
    # An allowed name can still carry data away: not contained.
    assert listed.label() == "workdir+proxy" and not listed.contained
    assert listed.describe() == (
        "sandbox: workdir (bubblewrap, network: pypi.org, *.example.org through drover's proxy)"
    )
    assert "only for pypi.org, *.example.org" in BashTool(sandbox=listed).description
    proxied_env = listed.env({"PATH": "/usr/bin", "HTTPS_PROXY": "http://corp:8080"})
    assert proxied_env["HTTPS_PROXY"] == proxied_env["http_proxy"] == "http://127.0.0.1:3128"
    assert proxied_env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    own = replace(ACTIVE, settings=SandboxSettings(allow_domains=("localhost",)))
    assert own.env({})["no_proxy"] == "127.0.0.1,::1"  # the host's localhost, via the proxy
    assert "HTTP_PROXY" not in ACTIVE.env({"HTTP_PROXY": "http://corp:8080"})
    wider = replace(ACTIVE, settings=SandboxSettings(writable=(Path("/var/cache"),)))
    assert wider.label() == "workdir+writable" and not wider.contained
    ro = replace(ACTIVE, settings=SandboxSettings(mode="read-only"))
    assert ro.label() == "read-only" and ro.contained
    assert ro.describe() == "sandbox: read-only (bubblewrap, no network)"
    assert BashTool().sandbox_label == "off" and not BashTool().contained
    # The model is told what the sandbox allows; unsandboxed, the description is unchanged.
    assert BashTool(sandbox=ACTIVE).description.endswith(
        "Commands run in a sandbox: only the working directory (not its .git and other "
        "protected paths) and a private /tmp can be written, there is no network access, and "
        "secret files are hidden."
    )
    assert "read-only" not in BashTool(sandbox=ro).description
    assert "only /tmp (private to the command) can be written" in BashTool(sandbox=ro).description
    assert "sandbox" not in BashTool().description


def test_the_environment_is_an_allow_list() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "k",
        "OPENAI_API_KEY": "k",
        "GH_TOKEN": "t",
        "npm_config__authToken": "t",
        "AWS_SESSION_TOKEN": "t",
        "MYSQL_PASSWORD": "p",
        "SSH_AUTH_SOCK": "/run/ssh.sock",
        "DROVER_DB": "/data/journal.db",
        "PIP_INDEX_URL": "https://u:p@pypi.example/simple",
        "PIP_EXTRA_INDEX_URL": "https://pypi.example/simple",
        "TMPDIR": "/var/tmp/me",
        "MYSQL_PWD": "p",
        "CI_JOB_JWT": "j",
        "PGPASSFILE": "/home/u/.pgpass",
        "LC_ALL": "C",
        "TERM": "xterm",
    }
    assert filtered_env(env) == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TERM": "xterm",
        "TMPDIR": "/tmp",
    }
    # Names the config file adds, exactly or by prefix; a lone "*" is no prefix.
    extra = filtered_env(env, ["PIP_*", "MYSQL_PWD", "*"])
    assert extra["PIP_INDEX_URL"] == "https://u:p@pypi.example/simple"
    assert extra["MYSQL_PWD"] == "p"
    assert "CI_JOB_JWT" not in extra and "GH_TOKEN" not in extra


def test_hints_name_the_cause_and_what_to_do(workdir: Path) -> None:
    ro = sandbox_hint(ACTIVE, "touch: cannot touch '/etc/x': Read-only file system", workdir)
    assert ro is not None and f"only the working directory {workdir}" in ro
    git = sandbox_hint(
        ACTIVE, "error: could not lock config file .git/config: Read-only file system", workdir
    )
    assert git is not None and git.startswith("[sandbox: .git is protected")
    assert "only the working directory" not in git  # not the generic advice
    envrc = sandbox_hint(ACTIVE, "bash: line 1: .envrc: Is a directory", workdir)
    assert envrc is not None and envrc.startswith("[sandbox: .envrc is protected")
    assert sandbox_hint(ACTIVE, "cat: .gitignore: Permission denied", workdir) is None
    net = sandbox_hint(ACTIVE, "curl: (6) Could not resolve host: pypi.org", workdir)
    assert net is not None and "no network access" in net and "--sandbox-network" in net
    assert sandbox_hint(ACTIVE, "SyntaxError: invalid syntax", workdir) is None
    allowed = replace(ACTIVE, settings=SandboxSettings(network=True))
    direct = sandbox_hint(allowed, "/dev/tcp/127.0.0.1/80: Connection refused", workdir)
    assert direct is not None and "only through drover's HTTP proxy" in direct
    listed = replace(ACTIVE, settings=SandboxSettings(allow_domains=("pypi.org",)))
    refused = sandbox_hint(listed, "curl: (56) CONNECT tunnel failed, response 403", workdir)
    assert refused is not None and "admits pypi.org" in refused
    assert "--sandbox-allow-domain" in refused
    off = SandboxStatus(settings=SandboxSettings(mode="off"), active=False)
    assert sandbox_hint(off, "Read-only file system", workdir) is None


@pytest.mark.parametrize(
    ("status", "asks"),
    [
        (ACTIVE, False),
        (replace(ACTIVE, settings=SandboxSettings(network=True)), True),
        (replace(ACTIVE, settings=SandboxSettings(writable=(Path("/opt"),))), True),
        (SandboxStatus(settings=SandboxSettings(), active=False, reason="missing"), True),
        (None, True),
    ],
)
def test_sandboxed_mode_runs_contained_commands_without_asking(
    status: SandboxStatus | None, asks: bool
) -> None:
    tools = default_registry(sandbox=status)
    bash, write = tools.get("bash"), tools.get("write_file")
    assert bash is not None and write is not None
    policy = PermissionPolicy("sandboxed")
    assert policy.needs_prompt(bash, {"command": "make test"}) is asks
    # Without the call's input the policy cannot tell, and asks.
    assert policy.needs_prompt(bash)
    # A command that would write a protected path asks, though the sandbox would stop it.
    assert policy.needs_prompt(bash, {"command": "git config core.fsmonitor x"})
    assert policy.needs_prompt(write)  # only what the sandbox contains skips the prompt
    assert not policy.denied_outright(bash)
    assert PermissionPolicy("ask").needs_prompt(bash, {"command": "ls"})  # plain mode asks


def test_the_config_file_sets_the_sandbox(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[sandbox]\nmode = "read-only"\nnetwork = true\nwritable = ["~/.cache"]\n'
        'hidden = ["secrets"]\nprotected = [".husky"]\nenv = ["PYTHONPATH", "CARGO_*"]\n'
        "processes = 100\nmemory_mb = 512\n"
        'home_allow = [".bashrc", "/opt/x"]\nallow_domains = ["PyPI.org", "*.example.org"]\n'
    )
    config = load_config(path, env={})
    assert config.sandbox_mode == "read-only" and config.sandbox_network
    assert config.sandbox_writable == ["~/.cache"] and config.sandbox_hidden == ["secrets"]
    settings = settings_from_config(config, base=tmp_path)
    assert settings.protected == (tmp_path / ".husky",)
    assert settings.env == ("PYTHONPATH", "CARGO_*")
    assert (settings.processes, settings.memory) == (100, 512 << 20)
    assert settings.home_allow == (Path.home() / ".bashrc", Path("/opt/x"))
    assert settings.allow_domains == ("pypi.org", "*.example.org")
    # --sandbox-allow-domain adds to the file's, once each.
    more = settings_from_config(config, base=tmp_path, allow_domains=["pypi.org", "x.test"])
    assert more.allow_domains == ("pypi.org", "*.example.org", "x.test")
    assert load_config(tmp_path / "none.toml", env={}).sandbox_mode == "workdir"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('sandbox = "off"', "[sandbox] must be a table"),
        ('[sandbox]\nmode = "strict"', "sandbox.mode must be one of off, workdir, read-only"),
        ('[sandbox]\nnetwork = "yes"', "sandbox.network must be true or false"),
        ("[sandbox]\nhidden = 3", "sandbox.hidden must be a list of paths"),
        ("[sandbox]\nproxy = 1", "unknown setting 'sandbox.proxy'"),
        ('[sandbox]\nenv = ["MY VAR"]', "sandbox.env must be a list of variable names"),
        ('[sandbox]\nenv = ["*"]', "sandbox.env must be a list of variable names"),
        ("[sandbox]\nprocesses = 0", "sandbox.processes must be a positive integer"),
        ('[sandbox]\nprotected = [""]', "sandbox.protected must be a list of paths"),
        ('[sandbox]\nallow_domains = "pypi.org"', "sandbox.allow_domains must be a list of names"),
        (
            '[sandbox]\nallow_domains = ["https://pypi.org"]',
            "sandbox.allow_domains: not a domain name for the sandbox's allow-list",
        ),
        ("[sandbox]\nhome_allow = [1]", "sandbox.home_allow must be a list of paths"),
    ],
)
def test_bad_sandbox_settings_name_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert problem in str(caught.value)
    assert str(path) in str(caught.value)


async def test_a_server_agent_requires_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``drover serve`` gets from ``Agent(..., require_sandbox=True)``: a one-line
    refusal without bubblewrap, and an agent when ``--sandbox off`` is explicit."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to be found
    monkeypatch.setenv("DROVER_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")

    def agent(**kwargs: object) -> Agent:
        return Agent("anthropic:x", workdir=tmp_path, store=str(tmp_path / "j.db"), **kwargs)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match=r"^refusing to serve without a sandbox for bash: "):
        async with agent(require_sandbox=True):
            pass
    async with agent(sandbox="off", require_sandbox=True) as opened:
        assert opened.sandbox is not None and opened.sandbox.mode == "off"
        session = await opened.session()
        bash = session.engine.tools.get("bash")
        assert isinstance(bash, BashTool) and bash.sandbox_label == "off"
    # Without require_sandbox (-p, the REPL) the agent opens and bash refuses commands.
    async with agent() as opened:
        assert opened.sandbox is not None and opened.sandbox.unavailable
