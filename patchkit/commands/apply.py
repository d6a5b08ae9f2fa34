"""``patchkit apply``: patch a checkout, all or nothing, idempotent, bytecode-aware.

At each target: what the command line asked (``plan.apply.ApplyRequest``), what was read of the
target, once (``Session.snapshot``), the plan made from the two alone (``plan.apply.look``), then
the commit (``targets.transaction``: under the lock, read and planned again, then written).
Returns an ``ApplyResult`` per target (``render/apply.py`` says it); ``--to-cc auto`` takes
its keys from ``judge.auto`` and runs the same apply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import OK, PatchkitError
from patchkit.fixes.registry import default_fixes
from patchkit.plan import APPLY, Plan
from patchkit.plan.apply import ApplyRequest, Look, Snapshot, look, unchanged
from patchkit.report import Auto, AutoTarget, Where, combine
from patchkit.targets import bytecode
from patchkit.targets.after_write import drop_jit_builds, old_processes
from patchkit.targets.env_transaction import Part, commit_all, exclusive_all
from patchkit.targets.session import Session
from patchkit.targets.state import Store
from patchkit.targets.transaction import LockTaken, SetAside, commit, exclusive, set_aside
from patchkit.types import ALREADY_APPLIED
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.targets.jit_builds import JitCheck


class ApplyResult(Value, kw_only=True):
    """What apply did (or, with ``dry_run``, would do) at one target."""

    where: Where
    project: str  # the project's name and label, for what each fix patched here prevents
    label: str
    fixes: tuple[str, ...]  # the fixes applied: those asked for and those kept
    kept: tuple[str, ...]  # the fixes of ``fixes`` there because an earlier apply applied them
    dry_run: bool
    pending: bool  # an interrupted transaction was pending (said when apply writes nothing)
    lock: LockTaken | None  # what taking the lock did (None: apply took none, having nothing to write)
    set_aside: SetAside | None  # a state of another release set aside (its folder None: a real run would)
    plan: Plan
    stale: tuple[Path, ...]  # stale bytecode of the files the plan does not write
    dropped: tuple[Path, ...]  # bytecode files dropped
    effects: tuple  # (fix, fixes.effects.Effect) of each fix patched here that has one
    jit: JitCheck | None  # FlashInfer's stale JIT builds of the files written: dropped, or named (None: not FlashInfer, or nothing written)
    restart: tuple  # targets.processes.Process that started before the change
    local: Callable[[str], str]  # how the target names a repository path
    spare: dict = {}  # a plain apply: the fixes left out, name -> why (judge.reasons.Unneeded or Unread)
    judged: str = ""  # what they were judged for: "here" (nvidia-smi's SM12x GPUs), "for cc 12.0", ...
    exit_code: int = OK


def apply_one(s: Session, request: ApplyRequest) -> ApplyResult:
    """``request`` at the target of ``s``: read it (``Session.snapshot``) and plan (``plan.apply.look``);
    when there is something to write, the same again under the lock, then the commit."""
    before = _read(s, request)
    found = None
    # Without the lock, look first: a target with nothing to do is never written, so a
    # read-only one answers too.  A killed run's leftovers need the lock (recovery) first.
    if request.dry_run or before.tidy:
        found = look(request, before)
    snap, lock, aside, dropped = before, None, None, ()
    if found is None or not request.dry_run and found.writes():
        with exclusive(s.target, s.store, s.version) as lock:
            snap = _read(s, request)
            if found is None or not unchanged(before, snap):  # else the look without the lock is this one's
                found = look(request, snap)
            aside = set_aside(s.store, *found.old) if found.old else None
            plan = found.plan
            wrote = commit(s.target, s.store, plan.changes, plan.applied, "apply", s.version) if plan.action == APPLY else []
            dropped = tuple(wrote) + tuple(bytecode.unlink(found.stale))
    elif found.old:
        aside = SetAside(None, found.old.reason)
    return _result(s, request, before, snap, found, lock, aside, dropped)


def _result(s: Session, request: ApplyRequest, before: Snapshot, snap: Snapshot, found: Look, lock: LockTaken | None,
            aside: SetAside | None, dropped: tuple, versions: dict | None = None) -> ApplyResult:
    """``versions``: the releases of the environment's projects (project -> release), which what a fix
    needs may depend on (the FlashInfer whose JIT builds the fusion); the target's own by default."""
    plan = found.plan
    written = _written(plan) if plan.action in (APPLY, ALREADY_APPLIED) else None
    return ApplyResult(
        where=Where.of(s), project=s.project.name, label=s.project.label, fixes=snap.fixes, kept=snap.kept,
        dry_run=request.dry_run, pending=before.pending, lock=lock, set_aside=aside, plan=plan, stale=found.stale,
        dropped=dropped, effects=_effects([t.fix for t in plan.tables if t.patched], s, versions) if plan.action == APPLY else (),
        jit=drop_jit_builds(s.target, s.version, written, request.dry_run) if written is not None else None,
        restart=tuple(old_processes(s.target, written)) if written is not None and not request.dry_run else (),
        local=s.target.local,
    )


def apply_environment(home: Store, asked: list[tuple[Session, ApplyRequest]]) -> list[ApplyResult]:
    """Each (session, request) of ``asked``, the projects of one environment, as one transaction
    (``targets.env_transaction``): read and planned without the lock first (nothing to write: no
    lock taken); else, under the environment's lock and each project's, every project read and
    planned again, every refusal raised, before the first write; then one commit for all."""
    dry_run = asked[0][1].dry_run if asked else False
    versions = {s.project.name: s.version for s, _ in asked}
    befores = [_read(s, r) for s, r in asked]
    firsts = _first_looks(asked, befores) if dry_run or all(b.tidy for b in befores) else None
    if firsts is not None and (dry_run or not any(f.writes() for f in firsts)):
        return [_result(s, r, b, b, f, None, SetAside(None, f.old.reason) if f.old else None, (), versions)
                for (s, r), b, f in zip(asked, befores, firsts, strict=True)]
    with exclusive_all(home, [(s.target, s.store, s.version) for s, _ in asked]) as taken:
        snaps = [_read(s, r) for s, r in asked]
        founds = [firsts[i] if firsts is not None and unchanged(befores[i], snap) else look(r, snap)
                  for i, ((_, r), snap) in enumerate(zip(asked, snaps, strict=True))]
        asides = [set_aside(s.store, *f.old) if f.old else None for (s, _), f in zip(asked, founds, strict=True)]
        applying = [(s, f) for (s, _), f in zip(asked, founds, strict=True) if f.plan.action == APPLY]
        wrote = dict(zip([id(f) for _, f in applying], commit_all(home, [
            Part(s.target, s.store, s.version, f.plan.changes, f.plan.applied) for s, f in applying], "apply"), strict=True))
        dropped = [tuple(wrote.get(id(f), ())) + tuple(bytecode.unlink(f.stale)) for f in founds]
    return [_result(s, r, b, snap, f, lock, aside, d, versions) for (s, r), b, snap, f, lock, aside, d
            in zip(asked, befores, snaps, founds, taken, asides, dropped, strict=True)]


def _first_looks(asked: list[tuple[Session, ApplyRequest]], befores: list[Snapshot]) -> list[Look] | None:
    """The looks at what was read without the lock; None where one refused and the targets read
    again differ (another run was writing meanwhile: the read was of a moment between its steps,
    so its refusal is not trusted, and the lock is taken to look again)."""
    try:
        return [look(r, b) for (_, r), b in zip(asked, befores, strict=True)]
    except PatchkitError:
        if all(unchanged(b, _read(s, r)) for (s, r), b in zip(asked, befores, strict=True)):
            raise  # a refusal of what is there
        return None


def _read(s: Session, request: ApplyRequest) -> Snapshot:
    return s.snapshot(request.patches, request.fixes, request.from_cc, request.to_cc)


def _effects(fixes: list, s: Session, versions: dict | None = None) -> tuple:
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


def apply_all(sessions: list[Session], request: ApplyRequest, keys=None) -> list[ApplyResult]:
    """``request`` on each of ``sessions``: the projects of an environment as one transaction
    (``apply_environment``), every project's plan made (and any refusal raised) before the first write.  ``keys``: what ``--to-cc auto`` gives each session
    (``judge.auto.Keys``: the cc to add, the fixes there), instead of the request's ``to_cc``
    and ``fixes``.  Each target's request has its project's cc pair and the fixes it gets."""
    fixes = default_fixes() if request.fixes is None else request.fixes
    runs = [(k.session, k.pairs[0], fixes if k.fixes is None else k.fixes, tuple(k.spare)) for k in keys if k.pairs] \
        if keys is not None else [(s, (request.from_cc, request.to_cc), fixes, ()) for s in sessions]
    asked = []
    for s, pair, f, left in runs:
        from_cc, to_cc = s.project.cc_pair(*pair)
        asked.append((s, request._replace(fixes=f, from_cc=from_cc, to_cc=to_cc, left_out=left)))
    home = asked[0][0].home() if asked and asked[0][0].whole else None
    if home is None:  # a checkout or a package named by PATH: one target, its own lock and journal
        return [apply_one(s, r) for s, r in asked]
    return apply_environment(home, asked)


def request_of(patches, no_generate, from_cc, to_cc, dry_run, fixes, named) -> ApplyRequest:
    """The command line's options as one ``ApplyRequest``."""
    return ApplyRequest(fixes=fixes, named=named, from_cc=from_cc, to_cc=to_cc, patches=patches, no_generate=no_generate,
                        dry_run=dry_run)


def apply_targets(found, patches, no_generate, from_cc, to_cc, dry_run, version, fixes, named=None):
    """``apply`` on each (path, project, install) of ``found`` (``apply_all``): one result.  ``fixes``:
    None for the fixes on by default; ``named``: the fixes asked for by name (None: every one;
    ``--all-fixes`` names none, and a fix that cannot be applied whole on a release is then left
    out there and said).  A fix not named is left out where it is not needed on the GPUs judged
    for (``judge.auto.for_plain``: the verdict doctor gives), and said."""
    sessions = [Session.open(path, version, name, install) for path, name, install in found]
    request = request_of(patches, no_generate, from_cc, to_cc, dry_run, fixes, named)
    asked = default_fixes() if fixes is None else fixes
    spare, judged = plain_spare(sessions, to_cc, asked, named or ())
    if not any(spare):
        return combine("apply", apply_all(sessions, request))
    from patchkit.judge.auto import Keys

    keys = [Keys(s, ((from_cc, to_cc),), tuple(f for f in asked if f not in left), left, ()) for s, left in zip(sessions, spare, strict=True)]
    results = apply_all(sessions, request, keys)
    return combine("apply", [r._replace(spare=left, judged=judged) for r, left in zip(results, spare, strict=True)])


def plain_spare(sessions: list[Session], to_cc, fixes: tuple[str, ...], named: tuple[str, ...]) -> tuple[list[dict], str]:
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


def apply_auto(found, patches, no_generate, from_cc, dry_run, version, fixes, named=()) -> Auto:
    """``apply --to-cc auto``: at each target the key this machine's GPUs need (``judge.auto``),
    the fixes not needed here left out; ``named``: the fixes --fix named, applied even there."""
    from patchkit.judge import auto

    m = auto.read_machine()
    fixes = default_fixes() if fixes is None else fixes
    sessions = [Session.open(path, version, name, install) for path, name, install in found]
    keys = auto.for_apply(sessions, m, from_cc, fixes, named)
    request = request_of(patches, no_generate, from_cc, None, dry_run, fixes, named)
    results = iter(apply_all(sessions, request, keys) if any(k.pairs for k in keys) else ())
    return Auto("apply", m, tuple(AutoTarget(Where.of(k.session), k.session.project.name, k.session.project.label, k.held,
                                             k.spare, (next(results),) if k.pairs else (), k.not_for, k.ours) for k in keys))
