"""``patchkit revert``: put back the exact original bytes, and drop their bytecode.

Returns a ``RevertResult`` per target (``render/revert.py`` says it).  With ``--to-cc``, only
what adds that cc (as the project keys it) is reverted: a state that adds another key is
refused (exit 3, nothing written), every target checked first (``applied_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from patchkit.cc import CC
from patchkit.digest import sha256
from patchkit.errors import OK, Refused
from patchkit.plan import REVERT, Plan, plan_revert
from patchkit.report import Where
from patchkit.targets.atomic import make_dir, write_atomic
from patchkit.targets.session import Session
from patchkit.targets.transaction import commit, exclusive


class RevertResult(NamedTuple):
    """What revert did (or, with ``dry_run``, would do) at one target."""

    where: Where
    dry_run: bool
    locked: bool  # whether revert took the lock (to write, or to set an old state aside)
    pending: bool  # an interrupted transaction was pending (said when revert writes nothing)
    lock_notes: tuple[str, ...]  # what taking the lock said: that it waited, what recovery did
    old: str | None  # why a state of another release is (or would be) set aside
    set_aside: str | None  # where it was set aside
    plan: Plan
    kept: tuple[Path, ...]  # --force: the copies of files edited after apply
    dropped: tuple[Path, ...]  # bytecode files dropped
    jit_lines: tuple[str, ...]  # FlashInfer's JIT builds dropped or named (targets.session)
    jit_dropped: tuple[str, ...]
    restart: tuple  # targets.processes.Process that started before the change
    local: Callable[[str], str]  # how the target names a repository path
    exit_code: int = OK


def revert(
    path: Path, force: bool = False, dry_run: bool = False, patches: Path | None = None, project: str | None = None, install=None,
    to_cc: CC | None = None,
) -> RevertResult:
    s = Session.open(path, project=project, install=install)
    pending = s.store.journal() is not None
    # As apply: look without the lock first, unless a killed run left something to finish.
    plan, old = _plan(s, force, patches, to_cc) if dry_run or s.store.tidy(s.applied()) else (None, None)
    dropped: list[Path] = []
    kept: list[Path] = []
    lock_notes: list[str] = []
    aside = None
    locked = not (plan is not None and (dry_run or not (old or plan.action == REVERT)))
    if locked:
        with exclusive(s.target, s.store, s.version) as notes:
            lock_notes = notes
            plan, old = _plan(s, force, patches, to_cc)
            if old:
                aside = s.set_aside(*old)
            kept = _keep_edits(s, plan) if plan.action == REVERT else []
            had_state = s.applied() is not None
            dropped = commit(s.target, s.store, plan.changes, None, "revert", s.version) if plan.action == REVERT and (plan.changes or had_state) else []
    jit_lines, jit_dropped = s.drop_jit_builds([c.path for c in plan.changes], "from the patched sources", dry_run) \
        if plan.action == REVERT else ([], [])
    restart = s.old_processes([c.path for c in plan.changes]) if plan.action == REVERT and not dry_run else []
    return RevertResult(Where.of(s), dry_run, locked, pending, tuple(lock_notes), old[1] if old else None, aside, plan,
                        tuple(kept), tuple(dropped), tuple(jit_lines), tuple(jit_dropped), tuple(restart), s.target.local)


def applied_for(path: Path, to_cc: CC, project: str | None = None, install=None) -> None:
    """Refuse ``revert --to-cc`` at the target at ``path`` when what patchkit applied to this
    release adds another key than ``to_cc``'s: one Refused line (exit 3), nothing written."""
    _other_key(Session.open(path, project=project, install=install), to_cc)


def _other_key(s: Session, to_cc: CC | None) -> None:
    applied, changed = s.state()
    if to_cc is None or applied is None or changed:  # nothing applied to this release: nothing of another cc
        return
    key = s.project.key(to_cc)
    if applied.to_cc != key:
        raise Refused(str(s.store.state_file),
                      f"what patchkit applied adds {s.project.label} key {applied.to_cc!r}, not key {key!r} (--to-cc {to_cc}); "
                      "nothing reverted (`patchkit revert` without --to-cc reverts it)")


def _plan(s: Session, force: bool, patches: Path | None, to_cc: CC | None = None):
    """The plan, and the state of another release to set aside first (with why), if any."""
    _other_key(s, to_cc)
    applied, changed = s.state()
    if changed:
        if force:
            raise Refused(
                str(s.store.state_file),
                f"{changed}: --force would write the originals recorded then into the files of the release here now; "
                "refused, nothing written (`patchkit revert` without --force sets the old state aside)",
            )
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
