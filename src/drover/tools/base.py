"""The tool seam: what the loop needs from a tool, and what a tool gets from the loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

#: The type of a run's ``deps`` as a tool sees them (``ToolContext[MyDeps]``; bare: None).
DepsT = TypeVar("DepsT", default=None)

#: The ``deps`` of a context made without any (typed as every ``DepsT`` allows: it is None).
_NO_DEPS: Any = None


def _discard(_chunk: str) -> None:
    return None


async def _no_progress(_progress: float, _total: float | None, _message: str | None) -> None:
    return None


class FileImages(Protocol):
    """Where a tool that writes a file records what the file held first, before it writes, so
    the write can be undone (a turn's is the journal's: see ``drover.journal.file_images``)."""

    async def before_write(
        self, call_id: str, path: Path, shown: str, before: bytes | None, after: bytes
    ) -> str | None:
        """Record that the call is about to write ``after`` to ``path`` (``shown``: as the tool
        shows it), which holds ``before`` (None: it does not exist). Returns a note for the
        tool's result when the content before could not be kept (too large), else None.
        Raises :class:`~drover.errors.ToolError` when nothing could be recorded: the tool then
        does not write."""
        ...


class CallRules(Protocol):
    """The permission rules about one call, as its tool applies them to the paths it really
    touches when it runs (``ToolContext.rules``): the policy decided on the path as the model
    wrote it and where it led then; a link swapped in since, or a file found in a directory
    the call searches, is checked here."""

    def refusal(self, path: Path) -> str | None:
        """Why the call may not touch ``path`` (absolute, symbolic links resolved): a deny
        rule covers it, or the allow rule that let the call run without asking does not.
        None: it may."""
        ...

    def hides(self, path: Path) -> bool:
        """Whether a rule that refuses reading keeps ``path`` (absolute; a symbolic link is
        judged by where it leads too) out of what the call reports (``grep``, ``glob``)."""
        ...


# Not slotted: a slotted frozen dataclass cannot be built through its alias
# (``ToolContext[MyDeps](...)``), which sets ``__orig_class__`` on the instance.
@dataclass(frozen=True, kw_only=True)
class ToolContext(Generic[DepsT]):
    """Per-call context handed to a tool by the loop.

    ``ToolContext[MyDeps]`` types ``ctx.deps`` as what the run was given with ``deps=``::

        @tool
        async def lookup(ctx: ToolContext[Database], key: str) -> str:
            \"\"\"Look a key up.\"\"\"
            return await ctx.deps.get(key)
    """

    #: The directory every path from the model is confined to (already resolved).
    workdir: Path
    #: Called with output as a long-running tool produces it, so an interrupted call keeps what
    #: it printed until then. Tools that produce output incrementally should call it.
    on_output: Callable[[str], None] = field(default=_discard)
    #: Awaited with ``(progress, total, message)`` as a long-running tool advances (``total``
    #: and ``message`` may be None); consumers see it as a transient
    #: :class:`~drover.core.events.ToolProgress` event, which the journal does not keep.
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] = field(
        default=_no_progress
    )
    #: The tool call being run, and its position in the model's response.
    call_id: str = ""
    call_index: int = 0
    #: What the turn running the call offers a tool that acts as part of the turn (the
    #: ``task`` tool runs workers with it). Opaque at this layer; None outside a turn.
    scope: object | None = None
    #: What the caller of the run passed as ``deps=`` (None: nothing). Given per turn and
    #: never journaled: a resumed turn sees what its own ``run``/``resume`` call passes.
    deps: DepsT = _NO_DEPS
    #: Records a file's content before a tool writes it (None: nothing records it).
    files: FileImages | None = None
    #: The permission rules about this call's paths (None: no rules apply, outside a turn).
    rules: CallRules | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    content: str
    is_error: bool = False
    #: True when the content was cut to the output cap (the content then says so too).
    truncated: bool = False


class Tool(Protocol):
    """A tool the model may call.

    ``run`` returns a :class:`ToolOutput`, or raises :class:`drover.errors.ToolError` (the loop
    turns it into an ``is_error`` result). It must honour task cancellation promptly and leave no
    child process behind.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> Mapping[str, Any]: ...

    @property
    def read_only(self) -> bool:
        """True when the tool has no side effects (safe to run without asking, safe to repeat)."""
        ...

    async def run(self, args: Mapping[str, Any], ctx: ToolContext[Any]) -> ToolOutput: ...
