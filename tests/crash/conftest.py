"""The crash harness: real ``drover -p`` processes, watched through their output and killed.

Starting drover: :class:`ExecLauncher` runs ``python -m drover.cli.main ARGS`` — the literal
command line. It costs an interpreter start, and importing the provider SDKs alone takes 3 s
of CPU on the test machines, so most runs come from the test run's
:class:`~support.forkserver.ForkServer` (shared with the other suites): one interpreter that
imports drover and the SDKs once, then forks a child per run which sets up its argv, standard
streams and environment and calls ``drover.cli.main.main(argv)`` — the function the module
runs. Either way the run is its own OS process (own pid, own SQLite connection, own owner id,
killed with a real SIGKILL); only the imports happened before the fork. Set
``DROVER_CRASH_SPAWN=exec`` to start every run with the literal command line instead.

Watching it: :class:`DroverProcess` reads the ``--output-format stream-json`` lines in a thread
and stamps each with the monotonic time it was read (a line is read no earlier than it was
written, so a stamp can only err late). A kill point is a :data:`Trigger`, a function that
blocks until the process reaches the state to kill it in, built from waits on observable
state: a line on the pipe, a file in the working directory, a row in the database (read-only
connection), a request at the fake server, or a stretch of silence on the pipe. Every wait is
bounded by :data:`DEADLINE`, which only turns a hang into a failure. With each line the watcher
also samples how long the process's threads have waited for a CPU (:mod:`.sched`): the time
bound on lost text, and a stretch of silence, count the process's own running time, so a
loaded machine cannot make them fail.

After the kill, :func:`recover` opens the database with a new store in this process, records
what the dead process left, recovers it and records the result; :func:`resume` runs the next
``drover -p`` on a copy of that database against a fresh fake server.
"""

from __future__ import annotations

import pytest
from support import forkserver
from support.forkserver import ForkServer


@pytest.fixture(scope="session")
def fork_server() -> ForkServer:
    return forkserver.shared()  # (stopped when the run ends)
