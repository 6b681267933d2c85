"""A griffe extension: docstrings' reStructuredText as Markdown in the library reference.

mkdocstrings renders docstrings as Markdown; drover's use ``literal`` spans, roles and simple
tables (see ``rst.py``), converted here as griffe loads each object.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).parent))
from rst import to_markdown  # (a sibling module; griffe loads this file by path)


class RstDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
