"""Suite-wide settings: no fixtures, on purpose.

The suite runs with the garbage collector on. (It once had to turn the collector off, because
SDK generators that streams left suspended were finalised from the fake server's thread; the
providers now close them, see ``tests/providers/test_generator_leak.py``.) What the test
modules import is frozen once they are collected, as ``drover serve`` does with what it
imports (:mod:`drover.server.gc_settings`): drover, the SDKs and their pydantic schemas are a
few hundred thousand objects that live as long as the run, and every full collection walked
them all again — ~28 s of ~190 s over tests/{core,library,loop,providers,store}, ~9 s once
frozen. Objects the tests make are collected as before.

The processes the tests start (every ``drover`` run, server, worker) keep their compiled
modules in one cache of the run's, outside the tree, where ``PYTHONDONTWRITEBYTECODE`` (set in
these sandboxes) had each of hundreds of them compile drover's modules again on start.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile

import pytest

_PYCACHE = tempfile.mkdtemp(prefix="drover-test-pycache-")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
atexit.register(shutil.rmtree, _PYCACHE, True)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()  # (what collecting left as garbage is freed, not frozen)
    gc.freeze()
