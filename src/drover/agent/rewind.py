"""Rewinding a session: the conversation back to before a turn, and the files its tools wrote.

A rewind of turn T undoes T and every later turn: they stay in the journal, marked rewound
(and discarded, so the history the model sees skips them), and the next message goes on from
the turns before T. With ``files`` it also puts back what ``write_file`` and ``edit_file``
changed in those turns, from the content the journal kept before each write
(:mod:`drover.journal.file_images`): for each file, its content before the first write since
T (a file those turns created is deleted).

It is refused (:class:`RewindConflict`) when a file changed outside drover since: it holds
neither what the last of those writes left (its hash is recorded) nor its content before T —
unless ``force``, which overwrites it. A file whose content before was over the journal's cap
cannot be put back (:attr:`RewindPlan.unrestorable`); nor can what other tools did — commands
run by ``bash``, or any other tool with side effects — which :attr:`RewindPlan.not_rewindable`
names. The files are written first, then the turns are marked in one transaction: a rewind
cut off between the two is finished by running it again (a restored file counts as restored).

A rewind reads, writes and deletes only inside the working directory, as the file tools do:
each file's path is resolved there again (:func:`~drover.tools.workspace.resolve_in_workdir`)
and must lead where the tool wrote, with no symbolic link on the way — a directory replaced by
a link since (to a directory outside, or elsewhere inside) makes the file ``unreachable``: not
read (a plan shows nothing of it), not touched (not even when forced), and named unrestorable.
What is read or changed is opened so that a link swapped in meanwhile is refused too.

:func:`plan_rewind` says what a rewind would do (with a unified diff of each file), without
doing it; :func:`apply_rewind` does it.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from drover.errors import DroverError, SessionBusyError, ToolError
from drover.journal.file_images import digest
from drover.journal.protocol import Store
from drover.journal.records import EventRecord, FileImageRecord
from drover.tools.builtin.files import read_bytes, remove_file, write_bytes
from drover.tools.workspace import resolve_in_workdir

#: Tools whose writes a rewind puts back.
FILE_TOOLS = frozenset({"write_file", "edit_file"})
#: Most characters of one file's diff a plan shows.
MAX_DIFF_CHARS = 20_000


class RewindConflict(DroverError):
    """Files changed outside drover since the turns being rewound wrote them."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        named = ", ".join(f"'{p}'" for p in self.paths)
        super().__init__(
            f"not rewound: {named} changed outside drover since the turns being rewound wrote "
            "it; rewinding would overwrite that change (force overwrites it, or rewind without "
            "files)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRestore:
    """What a rewind does to one file."""

    #: The file's absolute path, and as the tools showed it.
    path: str
    shown: str
    #: ``restore`` (write the content before), ``delete`` (the turns created it),
    #: ``unchanged`` (it already holds the content before), ``unrestorable`` (the content
    #: before was over the journal's cap), ``unreachable`` (its path no longer leads there
    #: from inside the working directory: a symbolic link on the way; left alone, unread).
    action: Literal["restore", "delete", "unchanged", "unrestorable", "unreachable"]
    #: It holds something else than what drover's last write left (changed outside drover).
    conflict: bool
    #: What the rewind puts back (None: delete, or unknown).
    before: bytes | None
    #: What the file holds now (None: it does not exist).
    current: bytes | None
    #: The images (``(turn_id, seq)``) this restore undoes.
    images: tuple[tuple[str, int], ...]

    def diff(self) -> str:
        """A unified diff from what the file holds now to what the rewind puts back."""
        if self.action in ("unchanged", "unrestorable", "unreachable"):
            return ""
        old, new = _text(self.current), _text(self.before)
        if old is None or new is None:
            return f"Binary file {self.shown} differs\n"
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{self.shown}" if self.current is not None else "/dev/null",
            tofile=f"b/{self.shown}" if self.action == "restore" else "/dev/null",
        )
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        if len(text) > MAX_DIFF_CHARS:
            text = text[:MAX_DIFF_CHARS] + f"[… diff cut at {MAX_DIFF_CHARS:,} characters]\n"
        return text


def _text(data: bytes | None) -> str | None:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RewindPlan:
    """What rewinding ``turn_id`` of ``session_id`` would do."""

    session_id: str
    turn_id: str
    #: The turns it undoes (``turn_id`` and the later ones not rewound yet), in order.
    turns: tuple[str, ...]
    #: The user message of ``turn_id`` (what a front door may offer to edit and send again).
    prompt: str
    files: tuple[FileRestore, ...]
    #: What those turns did that a rewind cannot undo (``bash: COMMAND``, or a tool's name).
    not_rewindable: tuple[str, ...]
    #: The working directory the files are confined to (resolved).
    workdir: Path

    @property
    def conflicts(self) -> tuple[str, ...]:
        return tuple(f.shown for f in self.files if f.conflict)

    @property
    def unrestorable(self) -> tuple[str, ...]:
        """The files it cannot put back: content before over the cap, or now unreachable."""
        return tuple(f.shown for f in self.files if f.action in ("unrestorable", "unreachable"))

    def diff(self) -> str:
        return "".join(f.diff() for f in self.files)


@dataclass(frozen=True, slots=True, kw_only=True)
class RewindResult:
    """What a rewind did."""

    session_id: str
    turn_id: str
    #: The turns marked rewound.
    rewound: tuple[str, ...]
    #: The files put back (as shown), deleted ones included; empty without ``files``.
    restored: tuple[str, ...]
    unrestorable: tuple[str, ...]
    not_rewindable: tuple[str, ...]


async def plan_rewind(store: Store, session_id: str, turn_id: str, workdir: Path) -> RewindPlan:
    """What rewinding ``turn_id`` of ``session_id`` would do to the files inside ``workdir``
    (the working directory the tools were confined to); :class:`DroverError` when the turn is
    not the session's, or was rewound already."""
    turns = await store.turns(session_id)
    cut = next((t for t in turns if t.id == turn_id), None)
    if cut is None:
        raise DroverError(f"no turn {turn_id} in session {session_id}")
    if cut.rewound:
        raise DroverError(f"turn {turn_id} was rewound already")
    running = next((t for t in turns if t.status == "running"), None)
    if running is not None:
        raise SessionBusyError(session_id, running.id)
    undone = [t for t in turns if t.seq >= cut.seq and not t.rewound]
    images = [i for i in await store.file_images(session_id, cut.seq) if i.restored_at is None]
    by_path: dict[str, list[FileImageRecord]] = {}
    for image in images:
        by_path.setdefault(image.path, []).append(image)
    root = await asyncio.to_thread(workdir.resolve)
    files = [await _restore_of(store, root, writes) for writes in by_path.values()]
    skipped: list[str] = []
    for turn in undone:
        for call in await store.tool_calls(turn.id):
            if call.read_only or call.name in FILE_TOOLS:
                continue
            command = (call.input or {}).get("command") if call.name == "bash" else None
            skipped.append(f"bash: {command}" if isinstance(command, str) else call.name)
    prompt = "" if cut.user_message is None else cut.user_message.text
    return RewindPlan(
        session_id=session_id,
        turn_id=turn_id,
        turns=tuple(t.id for t in undone),
        prompt=prompt,
        files=tuple(files),
        not_rewindable=tuple(skipped),
        workdir=root,
    )


def reachable(root: Path, image: FileImageRecord) -> Path | None:
    """The path of ``image``'s file when it still leads there from inside ``root`` (the
    resolved working directory) with no symbolic link on the way; None otherwise."""
    try:
        resolved = resolve_in_workdir(root, image.path)
    except ToolError:  # (a PathEscapeError too)
        return None
    return resolved if resolved == Path(image.path) else None


def _read_reachable(root: Path, image: FileImageRecord) -> tuple[bool, bytes | None]:
    """Whether ``image``'s file is reachable, and what it holds (None: no such file)."""
    path = reachable(root, image)
    if path is None:
        return False, None
    try:
        return True, read_bytes(path)
    except ToolError:  # a link swapped in while it was opened
        return False, None


async def _restore_of(store: Store, root: Path, writes: list[FileImageRecord]) -> FileRestore:
    """What putting the file of ``writes`` (its writes since the turn, in order) back does."""
    first, last = writes[0], writes[-1]
    keys = tuple((w.turn_id, w.seq) for w in writes)
    found, current = await asyncio.to_thread(_read_reachable, root, first)
    if not found:
        return FileRestore(
            path=first.path,
            shown=first.shown,
            action="unreachable",
            conflict=False,
            before=None,
            current=None,
            images=keys,
        )
    now = None if current is None else digest(current)
    before: bytes | None = None
    action: Literal["restore", "delete", "unchanged", "unrestorable", "unreachable"]
    if first.before == "too_large":
        action = "unrestorable"
    elif first.before == "absent":
        action = "delete" if current is not None else "unchanged"
    else:
        assert first.before_hash is not None
        before = await store.file_blob(first.before_hash)
        if before is None:  # (the blob went missing: nothing to put back)
            action = "unrestorable"
        else:
            action = "unchanged" if now == first.before_hash else "restore"
    conflict = action in ("restore", "delete") and now != last.after_hash
    return FileRestore(
        path=first.path,
        shown=first.shown,
        action=action,
        conflict=conflict,
        before=before,
        current=current,
        images=keys,
    )


async def apply_rewind(
    store: Store,
    plan: RewindPlan,
    *,
    files: bool,
    force: bool = False,
    logged: Callable[[EventRecord], None] | None = None,
    hold: str | None = None,
) -> RewindResult:
    """Do what ``plan`` says: with ``files``, put the files back (refused with
    :class:`RewindConflict` when one changed outside drover, unless ``force``), then mark the
    turns rewound — those of the plan, else nothing is marked; ``hold``: the token of the
    hold on the session the rewind works under, released as the turns are marked. ``logged``
    is told of the ``turns_rewound`` event the journal logged."""
    restored: list[str] = []
    undone: list[tuple[str, int]] = []
    if files:
        if plan.conflicts and not force:
            raise RewindConflict(plan.conflicts)
        for change in plan.files:
            if change.action in ("unrestorable", "unreachable"):
                continue
            if change.action != "unchanged":
                await asyncio.to_thread(_put_back, plan.workdir, change)
                restored.append(change.shown)
            undone += change.images
    rewound, event = await store.rewind_turns(
        plan.session_id, plan.turn_id, undone, hold=hold, planned=plan.turns
    )
    if event is not None and logged is not None:
        logged(event)
    return RewindResult(
        session_id=plan.session_id,
        turn_id=plan.turn_id,
        rewound=tuple(rewound),
        restored=tuple(restored),
        unrestorable=plan.unrestorable if files else (),
        not_rewindable=plan.not_rewindable,
    )


def _put_back(root: Path, change: FileRestore) -> None:
    # Resolved again: the plan is a moment old, and a link planted since must not be followed.
    try:
        path = resolve_in_workdir(root, change.path)
    except ToolError:
        path = None
    if path != Path(change.path):
        raise DroverError(
            f"not rewound: '{change.shown}' now leads outside the working directory, or "
            "through a symbolic link"
        )
    try:
        if change.action == "delete":
            remove_file(path, change.shown)
            return
        assert change.before is not None
        write_bytes(path, change.shown, change.before)
    except DroverError as exc:
        raise DroverError(f"could not put '{change.shown}' back: {exc}") from None
