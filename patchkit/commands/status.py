"""``patchkit status``: the project, version, what is applied, each file, bytecode, pending work.

Returns a ``StatusResult`` per target (``render/status.py`` says it).  Read only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC, Key
from patchkit.commands.given import Given, Targets, each
from patchkit.digest import sha256
from patchkit.errors import OK, PatchkitError
from patchkit.match import mentions
from patchkit.patch.manifest import Shipped
from patchkit.plan.reasons import NoShippedPatch, ReleaseChanged
from patchkit.report import Where
from patchkit.targets import bytecode
from patchkit.targets.after_write import jit_builds, old_processes
from patchkit.types import PATCHED, Applied
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.report import Result
    from patchkit.targets.jit_builds import Build
    from patchkit.targets.processes import Process


class FileState(Value):
    """A target file that holds a table, or that patchkit or the shipped patch knows."""

    path: str  # as the target names it
    state: str  # PATCHED, "original release file", "modified since apply", ...
    bytecode: int  # its cached bytecode files
    stale: int  # how many of them are stale


class ForCC(Value):
    """``status --to-cc``: whether what patchkit applied to this release adds that cc's key."""

    cc: CC  # as given
    key: Key  # as the project keys it
    applied: Key | None  # the key patchkit's state for this release adds (None: nothing applied)

    @property
    def in_effect(self) -> bool:
        return self.applied == self.key


class StatusResult(Value, kw_only=True):
    """What status found at one target."""

    where: Where
    label: str  # the project
    project: str
    kind: str  # git checkout, installed package
    editable: Path | None  # the package of an editable install
    root: Path  # the target
    state_dir: Path
    how: str  # how the version was found
    applied: Applied | None  # what patchkit applied for this release
    changed: ReleaseChanged | None  # why the recorded state belongs to another release
    aside: tuple[Path, ...]  # the states of earlier releases set aside (their state files)
    aside_dir: Path
    shipped: Shipped | None
    no_shipped: NoShippedPatch | None  # why no shipped patch fits
    files: tuple[FileState, ...]
    jit_error: PatchkitError | None  # why FlashInfer's JIT builds were not checked
    builds: tuple[Build, ...]  # older than the patched sources
    pending: dict[str, object] | None  # the journal of an interrupted transaction
    running: tuple[Process, ...]  # those that started before the files were written
    exit_code: int = OK
    for_cc: ForCC | None = None  # --to-cc


def status_targets(given: Targets, patches: Path | None = None, to_cc: CC | None = None) -> Result:
    """``patchkit status`` at each target of ``given``: one result."""
    return each("status", given, lambda g: status(g, patches, to_cc))


def status(given: Given, patches: Path | None = None, to_cc: CC | None = None) -> StatusResult:
    s = given.open()
    read: dict[str, bytes] = {}
    applied, changed = s.state(read)
    shipped = s.shipped_series.shipped(patches)
    if changed:
        applied = None
    no_shipped = None if shipped else s.shipped_series.no_shipped(patches, s.version, s.project.from_cc, s.project.to_cc)
    recorded = {f.path: f for f in applied.files} if applied else {}
    known = {f.path: f for f in shipped.files} if shipped else {}
    files: list[FileState] = []
    shown: list[str] = []
    # The files the state was told by are the ones to show, when it is used: read once (none were
    # read while a transaction is pending).
    for rel, data in (read if applied and read else s.current(tuple(recorded))).items():
        if rel not in recorded and rel not in known and not mentions(data, s.project.tables):
            continue
        digest = sha256(data)
        if rel in recorded:
            f = recorded[rel]
            state = {f.post_sha256: PATCHED, f.pre_sha256: "original again (restored outside patchkit)"}.get(digest, "modified since apply")
        elif rel in known:
            state = {known[rel].pre_sha256: "original release file", known[rel].post_sha256: "patched (no patchkit record)"}.get(
                digest, "differs from the release (local edits?)")
        else:
            state = "not recorded"
        pycs = bytecode.check(s.target.path(rel), data)
        files.append(FileState(s.target.local(rel), state, len(pycs), sum(p.status is bytecode.STALE for p in pycs)))
        shown.append(rel)
    try:
        builds, jit_error = (jit_builds(s.target, s.version, list(recorded)) if recorded else []), None
    except PatchkitError as exc:
        builds, jit_error = [], exc
    pending = s.journal()[0]  # its own, or its part of its environment's
    running = old_processes(s.target, shown)
    install = s.target.install
    return StatusResult(
        where=Where.of(s), label=s.project.label, project=s.project.name, kind=s.target.kind,
        editable=install.package if install is not None else None, root=s.target.root, state_dir=s.store.root, how=s.how,
        applied=applied, changed=changed, aside=tuple(s.store.set_aside_states()), aside_dir=s.store.aside, shipped=shipped,
        no_shipped=no_shipped, files=tuple(files), jit_error=jit_error, builds=tuple(builds), pending=pending,
        running=tuple(running),
        for_cc=None if to_cc is None else ForCC(cc=to_cc, key=s.project.key(to_cc), applied=applied.to_cc if applied else None),
    )
