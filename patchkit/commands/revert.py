"""``patchkit revert``: put back the exact original bytes, and drop their bytecode.

Returns a ``RevertResult`` per target (``render/revert.py`` says it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from patchkit.digest import sha256
from patchkit.errors import OK, Refused
from patchkit.plan import REVERT, Plan, plan_revert
from patchkit.plan.reasons import ReleaseChanged
from patchkit.report import Where
from patchkit.targets.atomic import make_dir, write_atomic
from patchkit.targets.session import Session
from patchkit.targets.transaction import commit, exclusive


class ForceRefused(Refused):
    """``--force`` on a state of another release (``changed``, said first in the line: ``cli``)."""

    def __init__(self, path: str, changed: ReleaseChanged) -> None:
        super().__init__(path, "--force would write the originals recorded then into the files of the release here now; "
                               "refused, nothing written (`patchkit revert` without --force sets the old state aside)")
        self.changed = changed


class RevertResult(NamedTuple):
    """What revert did (or, with ``dry_run``, would do) at one target."""

    where: Where
    dry_run: bool
    locked: bool  # whether revert took the lock (to write, or to set an old state aside)
    pending: bool  # an interrupted transaction was pending (said when revert writes nothing)
    lock_notes: tuple[str, ...]  # what taking the lock said: that it waited, what recovery did
    old: ReleaseChanged | None  # why a state of another release is (or would be) set aside
    set_aside: Path | None  # where it was set aside
    plan: Plan
    kept: tuple[Path, ...]  # --force: the copies of files edited after apply
    dropped: tuple[Path, ...]  # bytecode files dropped
    jit_lines: tuple[str, ...]  # FlashInfer's JIT builds dropped or named (targets.session)
    jit_dropped: tuple[str, ...]
    restart: tuple  # targets.processes.Process that started before the change
    local: Callable[[str], str]  # how the target names a repository path
    exit_code: int = OK


def revert(
    path: Path, force: bool = False, dry_run: bool = False, patches: Path | None = None, project: str | None = None, install=None
) -> RevertResult:
    s = Session.open(path, project=project, install=install)
    pending = s.store.journal() is not None
    # As apply: look without the lock first, unless a killed run left something to finish.
    plan, old = _plan(s, force, patches) if dry_run or s.store.tidy(s.applied()) else (None, None)
    dropped: list[Path] = []
    kept: list[Path] = []
    lock_notes: list[str] = []
    aside = None
    locked = not (plan is not None and (dry_run or not (old or plan.action == REVERT)))
    if locked:
        with exclusive(s.target, s.store, s.version) as notes:
            lock_notes = notes
            plan, old = _plan(s, force, patches)
            if old:
                aside = s.set_aside(old[0])
            kept = _keep_edits(s, plan) if plan.action == REVERT else []
            had_state = s.applied() is not None
            dropped = commit(s.target, s.store, plan.changes, None, "revert", s.version) if plan.action == REVERT and (plan.changes or had_state) else []
    jit_lines, jit_dropped = s.drop_jit_builds([c.path for c in plan.changes], "from the patched sources", dry_run) \
        if plan.action == REVERT else ([], [])
    restart = s.old_processes([c.path for c in plan.changes]) if plan.action == REVERT and not dry_run else []
    return RevertResult(Where.of(s), dry_run, locked, pending, tuple(lock_notes), old[1] if old else None, aside, plan,
                        tuple(kept), tuple(dropped), tuple(jit_lines), tuple(jit_dropped), tuple(restart), s.target.local)


def _plan(s: Session, force: bool, patches: Path | None):
    """The plan, and the state of another release to set aside first (with why), if any."""
    applied, changed = s.state()
    if changed:
        if force:
            raise ForceRefused(str(s.store.state_file), changed)
        old, applied = (applied, changed), None
    else:
        old = None
    extra = tuple(f.path for f in applied.files) if applied else ()
    shipped = None if applied else s.shipped(patches)
    with s.local_errors():
        plan = plan_revert(s.current(extra), applied, s.originals(applied), shipped, force)
    return plan, old


def _keep_edits(s: Session, plan) -> list[Path]:
    """With --force, a file edited after apply is copied to the state dir before it is replaced."""
    applied = s.applied()
    posts = {f.path: f.post_sha256 for f in applied.files} if applied else {}
    kept = []
    for change in plan.changes:
        if change.path in posts and sha256(change.before) != posts[change.path]:
            folder = s.store.root / "edited"
            make_dir(folder)  # never through a symlink (the state dir was checked under the lock)
            copy = folder / f"{Path(change.path).name}.{sha256(change.before)[:12]}"
            write_atomic(copy, change.before)
            kept.append(copy)
    return kept
