"""What a sandboxed ``bash`` command cannot do, and what it still can (real bubblewrap)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from drover.tools.base import ToolContext, ToolOutput
from drover.tools.builtin.bash import BashTool
from drover.tools.sandbox import SandboxStatus, probe_sandbox, sandbox_settings
from drover.tools.sandbox_argv import SANDBOX_UID

from .conftest import SandboxFactory


def exists(path: Path) -> bool:
    return path.exists()


def make_repo(workdir: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", str(workdir)], check=True)
    (workdir / "a.txt").write_text("a\n")
    subprocess.run([*git, "-C", str(workdir), "add", "a.txt"], check=True)
    subprocess.run([*git, "-C", str(workdir), "commit", "-qm", "first"], check=True)


async def run(status: SandboxStatus, command: str, workdir: Path) -> ToolOutput:
    return await BashTool(timeout=30, sandbox=status).run(
        {"command": command}, ToolContext(workdir=workdir)
    )


async def test_writes_outside_the_workdir_fail(
    sandbox: SandboxStatus, workdir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    home_file = Path.home() / f".drover-sandbox-test-{os.getpid()}"
    out = await run(sandbox, f"echo x > {outside}; echo y > {home_file}; touch /usr/x", workdir)
    assert out.is_error
    assert not exists(outside)
    assert not exists(home_file)
    assert not exists(Path("/usr/x"))
    assert "Read-only file system" in out.content
    assert f"only the working directory {workdir} and a private /tmp are writable" in out.content


async def test_the_private_tmp_is_writable_and_not_the_hosts(
    sandbox: SandboxStatus, workdir: Path
) -> None:
    name = f"drover-sandbox-tmp-{os.getpid()}"
    out = await run(sandbox, f"echo hi > /tmp/{name} && cat /tmp/{name} && echo $TMPDIR", workdir)
    assert out.content == "hi\n/tmp\n"
    assert not exists(Path("/tmp", name))


async def test_read_only_mode_refuses_writes_in_the_workdir_too(
    make_sandbox: SandboxFactory, workdir: Path
) -> None:
    status = make_sandbox("read-only")
    (workdir / "kept.txt").write_text("original\n")
    out = await run(status, "cat kept.txt; echo changed > kept.txt", workdir)
    assert out.is_error
    assert out.content.startswith("original\n")
    assert (workdir / "kept.txt").read_text() == "original\n"
    assert "read-only in this session, the working directory included" in out.content
    assert status.contained


async def test_writable_paths_from_the_config_can_be_written(
    make_sandbox: SandboxFactory, workdir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    status = make_sandbox(writable=[cache])
    out = await run(status, f"echo built > {cache}/obj", workdir)
    assert not out.is_error, out.content
    assert (cache / "obj").read_text() == "built\n"
    assert not status.contained  # writes beyond the workdir: permission prompts stay on


async def test_hidden_files_and_directories_cannot_be_read(
    make_sandbox: SandboxFactory, workdir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.env"
    secret.write_text("TOKEN=planted-secret-1\n")
    vault = workdir / "vault"
    vault.mkdir()
    (vault / "key.pem").write_text("planted-secret-2\n")
    status = make_sandbox(hidden=[secret, vault])
    out = await run(
        status, f"cat {secret}; cat vault/key.pem; ls vault; grep -r planted .", workdir
    )
    assert "planted-secret" not in out.content
    assert out.is_error
    assert "is hidden from commands on purpose" in out.content
    assert secret.read_text() == "TOKEN=planted-secret-1\n"  # hidden, not harmed


async def test_a_hidden_file_inside_a_hidden_directory_is_hidden_with_it(
    sandbox: SandboxStatus, workdir: Path, tmp_path: Path
) -> None:
    # As DROVER_CONFIG naming the default config.toml, inside the config directory.
    config = tmp_path / "config" / "drover"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("planted-secret-3\n")
    settings = sandbox_settings(
        mode="workdir", network=False, hidden=[config, config / "config.toml"]
    )
    status = probe_sandbox(settings)
    assert status.active, status.reason  # (this machine runs bubblewrap: `sandbox` says so)
    out = await run(status, f"ls {config}; cat {config / 'config.toml'}; echo ran", workdir)
    assert "ran" in out.content, out.content
    assert "planted-secret" not in out.content


async def test_drovers_own_data_and_credential_stores_are_hidden_by_default(
    sandbox: SandboxStatus, workdir: Path
) -> None:
    hidden = {str(p) for p in sandbox.settings.hidden}
    assert str(Path.home() / ".ssh") in hidden
    assert any(p.endswith("drover") for p in hidden)  # data and config directories
    assert Path("/etc/shadow") in sandbox.settings.hidden
    out = await run(sandbox, "cat /etc/shadow", workdir)
    assert out.is_error and "root:" not in out.content
    ssh = Path.home() / ".ssh"
    if ssh.is_dir() and any(ssh.iterdir()):
        out = await run(sandbox, "ls -A ~/.ssh | wc -l", workdir)
        assert out.content == "0\n"


async def test_no_network_not_even_loopback(make_sandbox: SandboxFactory, workdir: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        command = f"echo hello > /dev/tcp/127.0.0.1/{port} && echo connected"
        out = await run(make_sandbox(), command, workdir)
        assert "connected" not in out.content
        assert out.is_error
        assert "commands have no network access" in out.content
        with pytest.raises(BlockingIOError):
            listener.accept()

        # With the network allowed the command has a way out (drover's proxy), still not to
        # this machine's loopback: its own namespace has nothing listening there.
        out = await run(make_sandbox(network=True), command, workdir)
        assert "connected" not in out.content
        assert "/dev/tcp/127.0.0.1/" in out.content and "Connection refused" in out.content
        assert "only through drover's HTTP proxy" in out.content
        with pytest.raises(BlockingIOError):
            listener.accept()


async def test_api_keys_and_tokens_never_reach_the_command(
    make_sandbox: SandboxFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = {
        "ANTHROPIC_API_KEY": "sk-ant-planted",
        "OPENAI_API_KEY": "sk-planted",
        "GITHUB_TOKEN": "ghp_planted",
        "AWS_SECRET_ACCESS_KEY": "aws-planted",
        "PGPASSWORD": "pg-planted",
        "DROVER_DB": "postgresql://drover:db-planted@localhost/drover",
        "MIRROR_URL": "https://user:url-planted@example.com/simple",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    monkeypatch.setenv("LC_TIME", "C")
    out = await run(make_sandbox(), "env", workdir)
    assert "planted" not in out.content
    # An allow-list: a variable no one named stays out too.
    assert "HARMLESS_SETTING" not in out.content
    assert "PATH=" in out.content and "LC_TIME=C" in out.content
    # ... until the config file names it.
    out = await run(make_sandbox(env=["HARMLESS_*"]), "env", workdir)
    assert "HARMLESS_SETTING=visible" in out.content
    assert "planted" not in out.content


async def test_drover_and_other_processes_cannot_be_seen_or_signalled(
    sandbox: SandboxStatus, workdir: Path
) -> None:
    me = os.getpid()
    out = await run(
        sandbox, f"kill -TERM {me}; kill -0 {me} && echo visible; cat /proc/{me}/environ", workdir
    )
    assert out.is_error
    assert "visible" not in out.content
    assert f"kill: ({me}) - No such process" in out.content
    assert f"/proc/{me}/environ: No such file or directory" in out.content
    # Only the sandbox's own processes: bubblewrap's init, drover's watchdog (a bash), the
    # command's bash and ps itself.
    out = await run(sandbox, "ps -e -o comm=; true", workdir)
    assert sorted(out.content.split()) == ["bash", "bash", "bwrap", "ps"]


async def test_the_workdir_and_the_toolchain_work(sandbox: SandboxStatus, workdir: Path) -> None:
    out = await run(
        sandbox,
        "mkdir -p src && echo 'print(6 * 7)' > src/m.py && python3 src/m.py && "
        "cat /etc/os-release > /dev/null && ls /usr/bin/env && id -u",
        workdir,
    )
    assert not out.is_error, out.content
    # drover's own uid, or an unprivileged one when drover is root (see test_root_escape.py).
    uid = SANDBOX_UID if os.getuid() == 0 else os.getuid()
    assert out.content == f"42\n/usr/bin/env\n{uid}\n"
    assert (workdir / "src" / "m.py").exists()


async def test_git_reads_a_repository_workdir_and_cannot_change_it(
    make_sandbox: SandboxFactory, workdir: Path
) -> None:
    make_repo(workdir)
    (workdir / "b.txt").write_text("b\n")
    sandbox = make_sandbox()
    out = await run(sandbox, "git status --short && git log --oneline | wc -l", workdir)
    assert not out.is_error, out.content
    assert out.content == "?? b.txt\n1\n"
    commit = "git add b.txt && git -c user.name=t -c user.email=t@e commit -qm 2"
    out = await run(sandbox, commit, workdir)
    assert out.is_error
    assert "index.lock': Read-only file system" in out.content
    assert "[sandbox: .git is protected" in out.content
    # Listing .git as writable in the config file lets commands commit (and makes every
    # command ask in sandboxed mode, like any extra writable path).
    writable = make_sandbox(writable=[workdir / ".git"])
    out = await run(writable, commit, workdir)
    assert not out.is_error, out.content
    assert not writable.contained


async def test_no_capabilities_so_nothing_can_be_remounted_writable(
    sandbox: SandboxStatus, workdir: Path
) -> None:
    out = await run(
        sandbox,
        "grep CapEff /proc/self/status; mount -o remount,rw,bind /usr; touch /usr/drover-x; "
        "unshare -U true && echo nested",
        workdir,
    )
    assert "CapEff:\t0000000000000000" in out.content
    assert "nested" not in out.content  # no user namespaces inside to regain capabilities
    assert not exists(Path("/usr/drover-x"))
