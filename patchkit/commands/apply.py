"""``patchkit apply``: patch a checkout, all or nothing, idempotent, bytecode-aware.

At each target: what the command line asked (``plan.apply.ApplyRequest``), what was read of the
target, once (``Session.snapshot``), the plan made from the two alone (``plan.apply.look``), then
the commit (``targets.transaction``: under the lock, read and planned again, then written).
Returns an ``ApplyResult`` per target (``render/apply.py`` says it); ``--to-cc auto`` takes
its keys from ``judge.auto`` and runs the same apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import AUTO, CC
from patchkit.commands.given import Targets
from patchkit.commands.given import sessions as given_sessions
from patchkit.commands.transact import Done, Job, Transacted, shared, transact, transact_all
from patchkit.errors import OK
from patchkit.fixes.registry import default_fixes
from patchkit.plan.apply import ApplyRequest, Look, Snapshot, look, unchanged
from patchkit.plan.plans import APPLY, Plan
from patchkit.report import Auto, AutoTarget, Where, combine
from patchkit.targets import bytecode
from patchkit.targets.session import Session
from patchkit.types import ALREADY_APPLIED

if TYPE_CHECKING:
    from patchkit.commands.transact import Part_
    from patchkit.fixes.effects import Effect
    from patchkit.judge.auto import Keys
    from patchkit.judge.reasons import Unneeded, Unread
    from patchkit.report import Result
    from patchkit.targets.state import Store


class ApplyResult(Transacted, kw_only=True):
    """What apply did (or, with ``dry_run``, would do) at one target."""

    project: str  # the project's name and label, for what each fix patched here prevents
    label: str
    fixes: tuple[str, ...]  # the fixes applied: those asked for and those kept
    kept: tuple[str, ...]  # the fixes of ``fixes`` there because an earlier apply applied them
    stale: tuple[Path, ...]  # stale bytecode of the files the plan does not write
    effects: tuple[tuple[str, Effect], ...]  # (fix, its effect) of each fix patched here that has one
    spare: dict[str, Unneeded | Unread] = {}  # a plain apply: the fixes left out, name -> why
    judged: str = ""  # what they were judged for: "here" (nvidia-smi's SM12x GPUs), "for cc 12.0", ...
    exit_code: int = OK


class _Apply(Job[ApplyResult]):
    """Apply's steps (``commands.transact``): ``request`` at the target of ``session``.  ``versions``:
    the releases of the environment's projects (project -> release), which what a fix needs may
    depend on (the FlashInfer whose JIT builds the fusion); the target's own by default."""

    verb = "apply"

    def __init__(self, session: Session, request: ApplyRequest, versions: dict[str, str | None] | None = None) -> None:
        super().__init__(session, request.dry_run)
        self.request, self.versions = request, versions

    def read(self) -> Snapshot:
        r = self.request
        return self.session.snapshot(r.patches, r.fixes, *r.keys(self.session.project))

    def look(self, snap: Snapshot) -> Look:
        return look(self.request, snap)

    def writes(self, found: Look) -> bool:
        return found.writes()

    def same(self, first: Snapshot, again: Snapshot) -> bool:
        return unchanged(first, again)

    def part(self, snap: Snapshot, found: Look) -> Part_ | None:
        return (found.plan.changes, found.plan.applied) if found.plan.action == APPLY else None

    def drop(self, found: Look, wrote: list[Path]) -> tuple[Path, ...]:
        return tuple(wrote) + tuple(bytecode.unlink(found.stale))

    def written(self, plan: Plan) -> list[str] | None:
        return _written(plan) if plan.action in (APPLY, ALREADY_APPLIED) else None

    def result(self, done: Done) -> ApplyResult:
        s, plan = self.session, done.look.plan
        effects = _effects([t.fix for t in plan.tables if t.patched and t.fix is not None], s, self.versions) if plan.action == APPLY else ()
        return ApplyResult(**shared(self, done)._asdict(), project=s.project.name, label=s.project.label, fixes=done.snap.fixes,
                           kept=done.snap.kept, stale=done.look.stale, effects=effects)


def apply_one(s: Session, request: ApplyRequest) -> ApplyResult:
    """``request`` at the target of ``s``, one transaction (``commands.transact``)."""
    return transact(_Apply(s, request))


def apply_environment(home: Store, asked: list[tuple[Session, ApplyRequest]]) -> list[ApplyResult]:
    """Each (session, request) of ``asked``, the projects of one environment, as one transaction
    (``commands.transact.transact_all``): every project's plan made (and any refusal raised) before the first write."""
    versions = {s.project.name: s.version for s, _ in asked}
    return transact_all(home, [_Apply(s, r, versions) for s, r in asked])


def _effects(fixes: list[str], s: Session, versions: dict[str, str | None] | None = None) -> tuple[tuple[str, Effect], ...]:
    """(fix, its ``[effect]``) of each fix of ``fixes`` that has one, once each; for a release newer
    than the data, with what its files show it does without the fix (``Effect.read_newer``); what it
    needs of the machine as said with ``versions`` installed (else the target's own release)."""
    from patchkit.fixes.effects import KEY, read_effects

    effects = read_effects()
    out = []
    for name in dict.fromkeys(f for f in fixes if f in effects):
        effect = effects[name]
        if effect.newer(s.project.name, s.version):
            read = effect.read_newer(s.project.name, s.version, s.reader(), KEY)  # "{key}" kept, filled when said
            effect = effect._replace(written=(effect.written or effect.fails) + tuple(read))
        installed = versions or {s.project.name: s.version}
        out.append((name, effect._replace(needs=tuple(n.with_versions(installed) for n in effect.needs))))
    return tuple(out)


def _written(plan: Plan) -> list[str]:
    """The files apply wrote, or that an earlier apply wrote."""
    if plan.changes:
        return [c.path for c in plan.changes]
    return [f.path for f in plan.applied.files] if plan.applied else [t.path for t in plan.tables if t.path]


def apply_all(sessions: list[Session], request: ApplyRequest, keys: list[Keys] | None = None) -> list[ApplyResult]:
    """``request`` on each of ``sessions``: the projects of an environment as one transaction
    (``apply_environment``), every project's plan made (and any refusal raised) before the first write.  ``keys``: what ``--to-cc auto`` gives each session
    (``judge.auto.Keys``: the cc to add, the fixes there), instead of the request's ``to_cc``
    and ``fixes``.  Each target's request has its project's cc pair and the fixes it gets."""
    fixes = default_fixes() if request.fixes is None else request.fixes
    runs = [(k.session, k.pairs[0], fixes if k.fixes is None else k.fixes, tuple(k.spare)) for k in keys if k.pairs] \
        if keys is not None else [(s, (request.from_cc, _given_cc(request)), fixes, ()) for s in sessions]
    asked = []
    for s, pair, f, left in runs:
        s.project.cc_pair(*pair)  # refuses a pair the project keys as one
        from_cc, to_cc = (CC.of(key) if cc is None else cc for cc, key in zip(pair, (s.project.from_cc, s.project.to_cc), strict=True))
        asked.append((s, request._replace(fixes=f, from_cc=from_cc, to_cc=to_cc, left_out=left)))
    home = asked[0][0].home() if asked and asked[0][0].whole else None
    if home is None:  # a checkout or a package named by PATH: one target, its own lock and journal
        return [apply_one(s, r) for s, r in asked]
    return apply_environment(home, asked)


def _given_cc(request: ApplyRequest) -> CC | None:
    """The cc ``request`` adds, or None for the project's own: ``apply`` sends ``--to-cc auto`` to ``apply_auto``."""
    if request.to_cc is AUTO:
        raise ValueError("--to-cc auto is apply_auto's: it gives each target its key")
    return request.to_cc


def apply(given: Targets, request: ApplyRequest, version: str | None = None) -> Result:
    """``patchkit apply`` at each target of ``given``: ``request`` as the command line asked it (its
    cc pair as given, ``to_cc`` ``AUTO`` for ``--to-cc auto``); ``version``: the release to treat
    each target as.  One result (``apply_targets``, ``apply_auto``)."""
    if request.to_cc is AUTO:
        return apply_auto(given, request._replace(to_cc=None, named=request.named or ()), version)
    return apply_targets(given_sessions(given, version), request)


def apply_targets(sessions: list[Session], request: ApplyRequest) -> Result:
    """``request`` on each of ``sessions`` (``apply_all``): one result.  ``request.fixes``: None for
    the fixes on by default; ``request.named``: the fixes asked for by name (None: every one;
    ``--all-fixes`` names none, and a fix that cannot be applied whole on a release is then left
    out there and said).  A fix not named is left out where it is not needed on the GPUs judged
    for (``judge.auto.for_plain``: the verdict doctor gives), and said."""
    asked, to_cc = default_fixes() if request.fixes is None else request.fixes, _given_cc(request)
    spare, judged = plain_spare(sessions, to_cc, asked, request.named or ())
    if not any(spare):
        return combine("apply", apply_all(sessions, request))
    from patchkit.judge.auto import Keys

    pair = ((request.from_cc, to_cc),)
    keys = [Keys(s, pair, tuple(f for f in asked if f not in left), left, ()) for s, left in zip(sessions, spare, strict=True)]
    results = apply_all(sessions, request, keys)
    return combine("apply", [r._replace(spare=left, judged=judged) for r, left in zip(results, spare, strict=True)])


def plain_spare(sessions: list[Session], to_cc: CC | None, fixes: tuple[str, ...],
                named: tuple[str, ...]) -> tuple[list[dict[str, Unneeded | Unread]], str]:
    """The fixes of ``fixes`` not ``named`` that a plain apply (and a plain verify) leaves out at each
    session, and what they were judged for.  Only where the data says a machine may not need one (``Effect.may_spare``: a
    release the fix helps everywhere needs no GPU looked at) is the machine asked."""
    from patchkit.fixes.effects import read_effects
    from patchkit.fixes.registry import fixes_for

    effects = read_effects()
    if not any(n in effects and n not in named and effects[n].may_spare(s.project.name, s.version)
               for s in sessions for n in fixes_for(s.project.name, fixes)):
        return [{} for _ in sessions], ""
    from patchkit.judge import auto

    m, judged = auto.plain_machine(to_cc)
    return [auto.for_plain(s, m, to_cc, fixes, named) for s in sessions], judged


def apply_auto(given: Targets, request: ApplyRequest, version: str | None = None) -> Auto:
    """``apply --to-cc auto``: at each target the key this machine's GPUs need (``judge.auto``),
    the fixes not needed here left out; ``request.named``: the fixes --fix named, applied even there."""
    from patchkit.judge import auto

    m = auto.read_machine()
    sessions = given_sessions(given, version)
    fixes = default_fixes() if request.fixes is None else request.fixes
    keys = auto.for_apply(sessions, m, request.from_cc, fixes, request.named or ())
    request = request._replace(fixes=fixes)
    results = iter(apply_all(sessions, request, keys) if any(k.pairs for k in keys) else ())
    return Auto("apply", m, tuple(AutoTarget(Where.of(k.session), k.session.project.name, k.session.project.label, k.held,
                                             k.spare, (next(results),) if k.pairs else (), k.not_for, k.ours) for k in keys))
