"""``patchkit revert``: put back the exact original bytes, and drop their bytecode.

As apply: what was read of the target, once (``Session.snapshot``), the plan made from it alone
(``plan.plan_revert``), then the commit under the lock (``targets.transaction``).  Returns a
``RevertResult`` per target (``render/revert.py`` says it).  With ``--to-cc``, only what adds
that cc (as the project keys it) is reverted: a state that adds another key is refused (exit 3,
nothing written), every target checked first (``applied_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.errors import OK, PatchkitError, Refused
from patchkit.plan import REVERT, Plan, plan_revert
from patchkit.plan.apply import Snapshot, localized
from patchkit.plan.reasons import ReleaseChanged
from patchkit.report import Where
from patchkit.targets.after_write import drop_jit_builds, old_processes
from patchkit.targets.env_transaction import Part, commit_all, exclusive_all
from patchkit.targets.session import Session
from patchkit.targets.transaction import LockTaken, SetAside, commit, exclusive, keep_edits, set_aside
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.targets.jit_builds import JitCheck


class ForceRefused(Refused):
    """``--force`` on a state of another release (``changed``, said first in the line: ``cli``)."""

    def __init__(self, path: str, changed: ReleaseChanged) -> None:
        super().__init__(path, "--force would write the originals recorded then into the files of the release here now; "
                               "refused, nothing written (`patchkit revert` without --force sets the old state aside)")
        self.changed = changed


class RevertResult(Value, kw_only=True):
    """What revert did (or, with ``dry_run``, would do) at one target."""

    where: Where
    dry_run: bool
    pending: bool  # an interrupted transaction was pending (said when revert writes nothing)
    lock: LockTaken | None  # what taking the lock did (None: revert took none, having nothing to write)
    set_aside: SetAside | None  # a state of another release set aside (its folder None: a real run would)
    plan: Plan
    kept: tuple[Path, ...]  # --force: the copies of files edited after apply
    dropped: tuple[Path, ...]  # bytecode files dropped
    jit: JitCheck | None  # FlashInfer's stale JIT builds of the files written: dropped, or named (None: not FlashInfer, or nothing written)
    restart: tuple  # targets.processes.Process that started before the change
    local: Callable[[str], str]  # how the target names a repository path
    exit_code: int = OK


def revert(
    path: Path, force: bool = False, dry_run: bool = False, patches: Path | None = None, project: str | None = None, install=None,
    to_cc: CC | None = None,
) -> RevertResult:
    s = Session.open(path, project=project, install=install)
    before = s.snapshot(patches)
    _other_key(s, before, to_cc)
    # As apply: look without the lock first, unless a killed run left something to finish.
    plan = _plan(before, force) if dry_run or before.tidy else None
    old = before.old
    lock = aside = None
    kept: list[Path] = []
    dropped: list[Path] = []
    if plan is None or not dry_run and (old or plan.action == REVERT):
        with exclusive(s.target, s.store, s.version) as lock:
            snap = s.snapshot(patches)
            _other_key(s, snap, to_cc)
            plan, old = _plan(snap, force), snap.old
            aside = set_aside(s.store, *old) if old else None
            if plan.action == REVERT:
                kept = keep_edits(s.store, plan.changes, snap.applied)
                if plan.changes or snap.applied is not None:
                    dropped = commit(s.target, s.store, plan.changes, None, "revert", s.version)
    elif old:
        aside = SetAside(None, old.reason)
    return _result(s, before, plan, dry_run, lock, aside, kept, dropped)


def _result(s: Session, before: Snapshot, plan: Plan, dry_run: bool, lock: LockTaken | None, aside: SetAside | None,
            kept: list[Path], dropped: list[Path]) -> RevertResult:
    written = [c.path for c in plan.changes] if plan.action == REVERT else None
    return RevertResult(
        where=Where.of(s), dry_run=dry_run, pending=before.pending, lock=lock, set_aside=aside, plan=plan, kept=tuple(kept),
        dropped=tuple(dropped), jit=drop_jit_builds(s.target, s.version, written, dry_run) if written is not None else None,
        restart=tuple(old_processes(s.target, written)) if written is not None and not dry_run else (), local=s.target.local,
    )


def revert_environment(found, force: bool = False, dry_run: bool = False, patches: Path | None = None,
                       to_cc: CC | None = None) -> list[RevertResult]:
    """``revert`` of the projects ``--python`` found (each (path, project, install) of ``found``) as
    one transaction (``targets.env_transaction``), as ``commands.apply.apply_environment``: every
    project read and planned (every refusal raised) before the first write."""
    sessions = [Session.open(path, project=name, install=install) for path, name, install in found]
    if not sessions:
        return []
    befores = [s.snapshot(patches) for s in sessions]
    for s, b in zip(sessions, befores, strict=True):
        _other_key(s, b, to_cc)
    plans = _first_plans(sessions, befores, patches, force) if dry_run or all(b.tidy for b in befores) else None
    if plans is not None and (dry_run or not any(b.old or p.action == REVERT for b, p in zip(befores, plans, strict=True))):
        return [_result(s, b, p, dry_run, None, SetAside(None, b.old.reason) if b.old else None, [], [])
                for s, b, p in zip(sessions, befores, plans, strict=True)]
    home = sessions[0].home()
    with exclusive_all(home, [(s.target, s.store, s.version) for s in sessions]) as taken:
        snaps = [s.snapshot(patches) for s in sessions]
        for s, snap in zip(sessions, snaps, strict=True):
            _other_key(s, snap, to_cc)
        plans = [_plan(snap, force) for snap in snaps]
        asides = [set_aside(s.store, *snap.old) if snap.old else None for s, snap in zip(sessions, snaps, strict=True)]
        kept = [keep_edits(s.store, p.changes, snap.applied) if p.action == REVERT else []
                for s, snap, p in zip(sessions, snaps, plans, strict=True)]
        reverting = [i for i, (snap, p) in enumerate(zip(snaps, plans, strict=True))
                     if p.action == REVERT and (p.changes or snap.applied is not None)]
        wrote = dict(zip(reverting, commit_all(home, [Part(sessions[i].target, sessions[i].store, sessions[i].version,
                                                           plans[i].changes, None) for i in reverting], "revert"), strict=True))
    return [_result(s, b, p, dry_run, lock, aside, k, wrote.get(i, []))
            for i, (s, b, p, lock, aside, k) in enumerate(zip(sessions, befores, plans, taken, asides, kept, strict=True))]


def _first_plans(sessions: list[Session], befores: list[Snapshot], patches: Path | None, force: bool) -> list[Plan] | None:
    """The plans from what was read without the lock; None where one refused and the targets read
    again differ (another run was writing meanwhile: its refusal is not trusted)."""
    try:
        return [_plan(b, force) for b in befores]
    except ForceRefused:
        raise
    except PatchkitError:
        if all(_same(b, s.snapshot(patches)) for s, b in zip(sessions, befores, strict=True)):
            raise  # a refusal of what is there
        return None


def _same(first: Snapshot, again: Snapshot) -> bool:
    return first._replace(read=None, tidy=None, stale=None) == again._replace(read=None, tidy=None, stale=None)


def applied_for(path: Path, to_cc: CC, project: str | None = None, install=None) -> None:
    """Refuse ``revert --to-cc`` at the target at ``path`` when what patchkit applied to this
    release adds another key than ``to_cc``'s: one Refused line (exit 3), nothing written."""
    s = Session.open(path, project=project, install=install)
    _other_key(s, s.snapshot(None), to_cc)


def _other_key(s: Session, snap: Snapshot, to_cc: CC | None) -> None:
    applied = snap.applied  # None: nothing applied to this release (or a state of another one, ``old``)
    if to_cc is None or applied is None:
        return
    key = s.project.key(to_cc)
    if applied.to_cc != key:
        raise Refused(str(snap.state_file),
                      f"what patchkit applied adds {s.project.label} key {applied.to_cc!r}, not key {key!r} (--to-cc {to_cc}); "
                      "nothing reverted (`patchkit revert` without --to-cc reverts it)")


def _plan(snap: Snapshot, force: bool) -> Plan:
    """The plan from what was read; a state of another release (``snap.old``) is set aside first."""
    if snap.old and force:
        raise ForceRefused(str(snap.state_file), snap.old.reason)
    with localized(snap.local):
        return plan_revert(dict(snap.current), snap.applied, dict(snap.originals), snap.shipped, force)

