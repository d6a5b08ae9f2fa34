"""``patchkit revert``: put back the exact original bytes, and drop their bytecode.

As apply: what was read of the target, once (``Session.snapshot``), the plan made from it alone
(``plan.plan_revert``), then the commit under the lock (``targets.transaction``).  Returns a
``RevertResult`` per target (``render/revert.py`` says it).  With ``--to-cc``, only what adds
that cc (as the project keys it) is reverted: a state that adds another key is refused (exit 3,
nothing written), every target checked first (``applied_for``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.commands.given import Given, Targets, each
from patchkit.commands.given import sessions as given_sessions
from patchkit.commands.transact import Done, Job, Transacted, shared, transact, transact_all
from patchkit.errors import OK, Refused, localized
from patchkit.plan.apply import Look, Snapshot
from patchkit.plan.plans import REVERT, Plan
from patchkit.plan.reasons import ReleaseChanged
from patchkit.plan.write_revert import plan_revert
from patchkit.report import combine
from patchkit.targets.session import Session
from patchkit.targets.transaction import keep_edits
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.commands.transact import Part_
    from patchkit.report import Result


class ForceRefused(Refused):
    """``--force`` on a state of another release (``changed``, said first in the line: ``cli``)."""

    def __init__(self, path: str, changed: ReleaseChanged) -> None:
        super().__init__(path, "--force would write the originals recorded then into the files of the release here now; "
                               "refused, nothing written (`patchkit revert` without --force sets the old state aside)")
        self.changed = changed


class RevertResult(Transacted, kw_only=True):
    """What revert did (or, with ``dry_run``, would do) at one target."""

    kept: tuple[Path, ...]  # --force: the copies of files edited after apply
    exit_code: int = OK


class RevertRequest(Value, kw_only=True):
    """What the command line asked of revert, at every target."""

    force: bool = False
    dry_run: bool = False
    patches: Path | None = None
    to_cc: CC | None = None  # revert only what adds this cc's key


class _Revert(Job[RevertResult]):
    """Revert's steps (``commands.transact``) at the target of ``session``."""

    verb = "revert"
    final = (ForceRefused,)

    def __init__(self, session: Session, request: RevertRequest) -> None:
        super().__init__(session, request.dry_run)
        self.request = request

    def read(self) -> Snapshot:
        snap = self.session.snapshot(self.request.patches)
        _other_key(self.session, snap, self.request.to_cc)
        return snap

    def look(self, snap: Snapshot) -> Look:
        return Look(_plan(snap, self.request.force), snap.old, ())

    def writes(self, found: Look) -> bool:
        return found.old is not None or found.plan.action == REVERT

    def same(self, first: Snapshot, again: Snapshot) -> bool:
        return _same(first, again)

    def prepare(self, snap: Snapshot, found: Look) -> list[Path]:
        return keep_edits(self.session.store, found.plan.changes, snap.applied) if found.plan.action == REVERT else []

    def part(self, snap: Snapshot, found: Look) -> Part_ | None:
        plan = found.plan
        return (plan.changes, None) if plan.action == REVERT and (plan.changes or snap.applied is not None) else None

    def written(self, plan: Plan) -> list[str] | None:
        return [c.path for c in plan.changes] if plan.action == REVERT else None

    def result(self, done: Done) -> RevertResult:
        return RevertResult(**shared(self, done)._asdict(), kept=tuple(done.prepared or ()))


def revert_targets(given: Targets, request: RevertRequest) -> Result:
    """``patchkit revert`` at each target of ``given``: one result.  With ``--to-cc``, every target
    is checked before the first is written (``applied_for``); an environment's projects are one
    transaction (``commands.transact.transact_all``), every refusal raised before the first write."""
    if request.to_cc is not None:
        for g in given.found:
            applied_for(g, request.to_cc)
    if given.env is not None:
        jobs = [_Revert(s, request) for s in given_sessions(given)]
        home = jobs[0].session.home() if jobs else None  # an environment's projects: their one home
        return combine("revert", transact_all(home, jobs) if home is not None else [transact(j) for j in jobs])
    return each("revert", given, lambda g: transact(_Revert(g.open(), request)))


def _same(first: Snapshot, again: Snapshot) -> bool:
    return first._replace(read=None, tidy=None, stale=None) == again._replace(read=None, tidy=None, stale=None)


def applied_for(given: Given, to_cc: CC) -> None:
    """Refuse ``revert --to-cc`` at the target ``given`` when what patchkit applied to this
    release adds another key than ``to_cc``'s: one Refused line (exit 3), nothing written."""
    s = given.open()
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

