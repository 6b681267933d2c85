"""Permission rules on commands, as a prompt-injected model attacks them.

The model's calls go through a real turn (the scripted provider, the library, the real
``bash`` tool, a SQLite journal) under the rules a user would write: ``bash(git status*)``
allowed, ``bash(rm*)`` denied. Each attack hides a second command from a reading of the text
that bash does not share (a quote inside a comment, ``$'…'`` quoting), or spells a denied
command another way. Whether a command ran is read from the working directory afterwards,
not from what the tool said.

The property test builds commands from a rule's prefix and hostile pieces and runs every
command the allow rule admits in a real bash that records each simple command it executes
(a ``DEBUG`` trap inherited by functions, substitutions and subshells) and has nothing but a
do-nothing ``git`` to run: an admitted command may run ``git`` and nothing else, and write
no file. Generated commands are hostile by construction (``echo >/bin/rm`` is one of them,
and the tests run as root): each runs in bubblewrap with the file system read-only but its
own scratch directory, or not at all.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drover import Agent
from drover.agent.session import NO_HANDLER_TEXT
from drover.config.settings import Config
from drover.core.messages import ToolResultBlock
from drover.core.rules import Rule
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.sandbox import SandboxSettings, probe_sandbox

SANDBOX = probe_sandbox(SandboxSettings())
needs_sandbox = pytest.mark.skipif(
    not SANDBOX.active, reason=f"bubblewrap cannot run here: {SANDBOX.reason}"
)

#: Commands that pass ``bash(git status*)`` on a text reading and run ``touch pwned``.
DESYNCS = [
    # A quote inside a comment: the comment ends at the newline, the quote never opens.
    "git status #'\ntouch pwned\n#'",
    'git status #"\ntouch pwned\n#"',
    # $'\'' is one quote character to bash; a reader of '…' sees a quote left open.
    "git status $'\\'' ; touch pwned #'",
    "git status $'\\''\ntouch pwned #'",
]

#: Ways to run ``rm`` that a deny rule on ``bash(rm*)`` must see.
RM_SPELLINGS = [
    "echo ok && rm -f victim",
    "(cd . ; rm -f victim)",
    "echo $(rm -f victim)",
    "echo ${unset:-$(rm -f victim)}",
    "X=1 rm -f victim",
    '"rm" -f victim',
    "\\rm -f victim",
    "/bin/rm -f victim",
    "env X=1 rm -f victim",
    "command rm -f victim",
    "nice -n 5 rm -f victim",
    "timeout 5 rm -f victim",
    "bash -c 'rm -f victim'",
    "sh -ec 'true; rm -f victim'",
    "eval 'rm -f victim'",
    "find . -name victim -exec rm -f {} +",
    "for f in victim; do rm -f $f; done",
    "f() { rm -f victim; }; f",
]


def results(provider: ScriptedProvider, index: int = 1) -> list[ToolResultBlock]:
    return list(provider.requests[index].messages[-1].tool_results)


async def run_calls(
    tmp_path: Path,
    commands: list[str],
    *,
    allow: list[str] = (),  # type: ignore[assignment]
    deny: list[str] = (),  # type: ignore[assignment]
    mode: str = "ask",
) -> tuple[Path, list[ToolResultBlock]]:
    """One turn whose model runs ``commands`` in one response; the workdir and the results."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    provider = ScriptedProvider(
        [Reply(calls=[call("bash", command=c) for c in commands]), Reply(text="done")]
    )
    async with Agent(
        provider,
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        sandbox="workdir",  # hostile commands run confined, whatever the rules let through
        permission_mode=mode,  # type: ignore[arg-type]
        allow=allow,
        deny=deny,
    ) as agent:
        result = await agent.run("tidy up the repository")
    assert result.status == "completed"
    return work, results(provider)


@needs_sandbox
async def test_a_quoting_desync_does_not_pass_a_prefix_rule(tmp_path: Path) -> None:
    work, told = await run_calls(
        tmp_path, ["git status --short", *DESYNCS], allow=["bash(git status*)"]
    )
    assert not (work / "pwned").exists()
    # The plain command ran without asking; every desync needed a permission nobody gave.
    assert told[0].content != NO_HANDLER_TEXT
    assert [r.content for r in told[1:]] == [NO_HANDLER_TEXT] * len(DESYNCS)


@needs_sandbox
async def test_a_deny_rule_sees_rm_wherever_it_runs(tmp_path: Path) -> None:
    """In ``allow`` mode, where nothing else would stop it: each spelling is refused and the
    victim survives every one of them (each call would delete it)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "victim").write_text("keep me\n")
    work, told = await run_calls(tmp_path, RM_SPELLINGS, deny=["bash(rm*)"], mode="allow")
    assert (work / "victim").read_text() == "keep me\n"
    refused = 'Not run: the deny rule "bash(rm*)" (deny=) refuses this call.'
    assert {c: r.content for c, r in zip(RM_SPELLINGS, told, strict=True)} == dict.fromkeys(
        RM_SPELLINGS, refused
    )


# -- the property: what an allow rule admits runs only what it names ----------------------------

#: Loaded by bash before the command (BASH_ENV): a do-nothing git, no PATH, and a record of
#: every simple command executed, in functions, substitutions and subshells too.
PRELUDE = r"""
set -T
git() { :; }
command_not_found_handle() { printf 'not found: %s\0' "$1" >> "$DROVER_LOG"; return 127; }
trap 'printf "%s\0" "$BASH_COMMAND" >> "$DROVER_LOG"' DEBUG
"""

PREFIX = "git status"
#: Pieces of text that quote, comment, escape, join, redirect or substitute.
PIECES = [
    " ", "\n", "\t", "\r", ";", "&", "&&", "||", "|", "#", "'", '"', "\\", "$'", '$"', "$(",
    ")", "(", "`", "<(", ">", "<", "<<E\n", "\nE\n", "{", "}", "$", "${x}", "$x", "$((1))",
    "!", "*", "~", "x=1 ", "--short", "a", "\\'", '\\"', "\\\n", "$'\\''", "\\\r\n",
]  # fmt: skip
NOISE = st.lists(st.sampled_from(PIECES), max_size=5).map("".join)
#: A rule's prefix, hostile text, then a command the rule does not name, then more text.
HOSTILE = st.tuples(NOISE, NOISE, st.sampled_from(["\n", ";", " ", ""]), NOISE).map(
    lambda parts: f"{parts[0]}{parts[1]}{parts[2]}touch pwned{parts[3]}"
)


#: How every generated command runs: in bubblewrap, the whole file system read-only but its
#: scratch directory, a private /tmp, no network, no capabilities (drover's tests run as root:
#: a generated ``echo >/bin/rm`` must not overwrite anything), dying with the test.
CONFINED = [
    "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc",
    "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv",
]  # fmt: skip


@functools.cache
def confinement() -> str | None:
    """Why generated commands cannot be run confined here (None: they can)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    with tempfile.TemporaryDirectory(prefix="drover-rules-") as scratch:
        probe = [*CONFINED, "--bind", scratch, scratch, "/bin/sh", "-c", "! touch /usr/x"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        # The probe must run, and its write outside the scratch directory must fail.
        if done.returncode != 0:
            return f"bubblewrap cannot confine commands here: {done.stderr.strip()[-300:]}"
    return None


def run_bash(command: str, prelude: str) -> tuple[list[str], list[str]]:
    """Run ``command`` in real bash, confined (:data:`CONFINED`), after ``prelude`` (loaded by
    ``BASH_ENV``) in a directory holding only ``victim``, with no ``PATH``; what the prelude
    logged (NUL-separated) and the files left. The test is skipped where it cannot be
    confined: a generated command never runs unconfined."""
    why = confinement()
    if why is not None:
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="drover-rules-") as scratch:
        root = Path(scratch)
        (root / "cwd").mkdir()
        (root / "cwd" / "victim").write_text("keep me\n")
        (root / "prelude.sh").write_text(prelude)
        log = root / "log"
        log.write_bytes(b"")
        env = {"BASH_ENV": str(root / "prelude.sh"), "DROVER_LOG": str(log), "PATH": "/no-bin"}
        argv = [*CONFINED, "--bind", scratch, scratch, "--chdir", str(root / "cwd")]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        done = subprocess.run(
            [*argv, "/bin/bash", "-c", command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,  # a failure bound: these commands loop nowhere
            check=False,
        )
        assert b"bwrap:" not in done.stderr, done.stderr  # the sandbox itself must have run
        logged = [c for c in log.read_bytes().decode(errors="replace").split("\0") if c]
        return logged, sorted(os.listdir(root / "cwd"))


def ran_in_bash(command: str) -> tuple[list[str], list[str]]:
    """What real bash executed for ``command`` (each simple command, as the DEBUG trap
    saw it) and the files it left besides ``victim``."""
    executed, files = run_bash(command, PRELUDE)
    return executed, [f for f in files if f != "victim"]


def test_a_generated_command_writes_nowhere_but_its_scratch_directory() -> None:
    outside = Path("/usr/local/drover-rules-probe")
    host_tmp = Path(tempfile.gettempdir()) / "drover-rules-probe"
    command = f"echo x > {outside}; echo x > {host_tmp}; echo x > ../scratch-file; : > here"
    _executed, files = ran_in_bash(command)
    assert files == ["here"]
    assert not outside.exists() and not host_tmp.exists()


def test_the_oracle_sees_what_a_desync_hides() -> None:
    """The bash oracle itself: the first attack runs ``touch``, which it records."""
    executed, _files = ran_in_bash(DESYNCS[0])
    assert executed[0] == "git status"
    assert "touch pwned" in executed


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(HOSTILE)
@example(DESYNCS[0].removeprefix(PREFIX))
@example(DESYNCS[2].removeprefix(PREFIX))
def test_an_allow_rule_admits_only_what_it_names(suffix: str) -> None:
    command = PREFIX + suffix
    rule = Rule.parse(f"bash({PREFIX}*)")
    if not rule.matches("bash", {"command": command}, argument="command"):
        return
    executed, files = ran_in_bash(command)
    strays = [c for c in executed if c != ":" and not c.startswith(PREFIX)]
    assert not strays, f"{command!r} is admitted and runs {strays}"
    assert not files, f"{command!r} is admitted and writes {files}"


#: Loaded by bash for the deny property: an ``rm`` that says it ran.
RM_PRELUDE = r"""
set -T
rm() { printf 'rm ran\0' >> "$DROVER_LOG"; }
command_not_found_handle() { printf 'not found: %s\0' "$1" >> "$DROVER_LOG"; return 127; }
"""
RM_PIECES = [
    *PIECES, "\\\n", "\n\\", "eval ", "bash -c ", "x=1 ", "command ", "env ", "$x ", "${x}",
    "$''", '$""', "'r'", "r", "\\", "/bin/",
]  # fmt: skip
RM_NOISE = st.lists(st.sampled_from(RM_PIECES), max_size=5).map("".join)


def rm_ran(command: str) -> bool:
    """Whether real bash runs ``rm`` for ``command``: the prelude's function, a lookup of
    ``rm`` (``command rm``), or the victim file gone (``/bin/rm``)."""
    said, files = run_bash(command, RM_PRELUDE)
    return "rm ran" in said or "not found: rm" in said or "victim" not in files


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    RM_NOISE,
    st.sampled_from(
        ["rm -f victim", "\\rm victim", "'rm' victim", "r\\m victim", "/bin/rm victim"]
    ),
    RM_NOISE,
)
def test_a_deny_rule_refuses_whatever_runs_rm(before: str, payload: str, after: str) -> None:
    """The other side: every command of these pieces that makes bash run ``rm`` is refused
    by ``bash(rm*)``."""
    command = f"echo {before}{payload}{after}"
    rule = Rule.parse("bash(rm*)")
    if rule.matches("bash", {"command": command}, argument="command", anywhere=True):
        return
    assert not rm_ran(command), f"{command!r} runs rm and passes bash(rm*)"


@pytest.mark.parametrize("command", DESYNCS)
def test_each_desync_really_runs_its_payload(command: str) -> None:
    """The attacks are real: bash runs the hidden command of each."""
    executed, _ = ran_in_bash(command)
    assert "touch pwned" in executed
