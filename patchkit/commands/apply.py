"""``patchkit apply``: patch a checkout, all or nothing, idempotent, bytecode-aware.

Returns an ``ApplyResult`` per target (``render/apply.py`` says it); ``--to-cc auto`` takes
its keys from ``judge.auto`` and runs the same apply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from patchkit.cc import CC
from patchkit.errors import OK, PatchkitError, Refused
from patchkit.fixes.registry import default_fixes, fixes_for, no_rule, rules_for
from patchkit.plan import APPLY, Plan, plan_apply
from patchkit.report import Auto, AutoTarget, Where, combine
from patchkit.targets import bytecode
from patchkit.targets.locate import INSTALLED
from patchkit.targets.session import Session
from patchkit.targets.transaction import commit, exclusive
from patchkit.types import ALREADY_APPLIED, NOTHING_TO_PATCH, Applied


class Look(NamedTuple):
    """What apply found, before writing anything."""

    plan: Plan
    old: tuple[Applied, str] | None  # a state of another release, and why
    stale: list[Path]  # stale bytecode of the target files that the plan does not write

    def writes(self) -> bool:
        """Whether apply must take the lock: to write, or to set a state aside."""
        return self.old is not None or self.plan.action == APPLY or bool(self.stale)


class ApplyResult(NamedTuple):
    """What apply did (or, with ``dry_run``, would do) at one target."""

    where: Where
    project: str  # the project's name and label, for what each fix patched here prevents
    label: str
    fixes: tuple[str, ...]  # the fixes applied: those asked for and those kept
    kept: tuple[str, ...]  # the fixes of ``fixes`` there because an earlier apply applied them
    dry_run: bool
    locked: bool  # whether apply took the lock (to write, or to set an old state aside)
    pending: bool  # an interrupted transaction was pending (said when apply writes nothing)
    lock_notes: tuple[str, ...]  # what taking the lock said: that it waited, what recovery did
    old: str | None  # why a state of another release is (or would be) set aside
    set_aside: str | None  # where it was set aside
    plan: Plan
    stale: tuple[Path, ...]  # stale bytecode of the files the plan does not write
    dropped: tuple[Path, ...]  # bytecode files dropped
    effects: tuple  # (fix, fixes.effects.Effect) of each fix patched here that has one
    jit_lines: tuple[str, ...]  # FlashInfer's JIT builds dropped or named (targets.session)
    jit_dropped: tuple[str, ...]
    restart: tuple  # targets.processes.Process that started before the change
    local: Callable[[str], str]  # how the target names a repository path
    exit_code: int = OK


def apply(
    path: Path,
    patches: Path | None = None,
    no_generate: bool = False,
    from_cc: CC | None = None,
    to_cc: CC | None = None,
    dry_run: bool = False,
    version: str | None = None,
    project: str | None = None,
    fixes: tuple[str, ...] | None = None,
    install=None,
) -> ApplyResult:
    """Apply ``fixes`` (default: the fixes on by default) to the target at ``path``."""
    s = Session.open(path, version, project, install)
    fixes, kept = with_applied(s, default_fixes() if fixes is None else fixes)
    return _apply(s, patches, no_generate, *s.project.cc_pair(from_cc, to_cc), dry_run, fixes, kept=kept)


def with_applied(s: Session, fixes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``fixes`` and every fix already applied to this release of the target, the ones added):
    a fix once applied stays applied until ``patchkit revert``, whatever a later apply names."""
    from patchkit.fixes.registry import FIXES

    applied, changed = s.state()
    if applied is None or changed:  # a state of another release is set aside: a fresh start
        return fixes, ()
    had = set(applied.fixes())
    kept = tuple(n for n in FIXES if n in had and n not in fixes)
    return tuple(n for n in FIXES if n in fixes or n in kept), kept


def _apply(s: Session, patches, no_generate, from_cc, to_cc, dry_run: bool, fixes, first: Look | None = None,
           kept: tuple[str, ...] = (), named=None) -> ApplyResult:
    """apply on the session ``s``; ``first``: a look taken without the lock already (apply_all's);
    ``kept``: the fixes of ``fixes`` that are there because an earlier apply applied them."""
    pending = s.store.journal() is not None
    # Without the lock, look first: a target with nothing to do is never written, so a
    # read-only one answers too.  A killed run's leftovers need the lock (recovery) first.
    look = None
    if dry_run or s.store.tidy(s.applied()):
        look = first or _kept_look(s, patches, no_generate, from_cc, to_cc, fixes, kept, named)
    dropped: list[Path] = []
    lock_notes: list[str] = []
    aside = None
    locked = not (look is not None and (dry_run or not look.writes()))
    if locked:
        with exclusive(s.target, s.store, s.version) as notes:
            lock_notes = notes
            look = _kept_look(s, patches, no_generate, from_cc, to_cc, fixes, kept, named)
            if look.old:
                aside = s.set_aside(*look.old)
            plan = look.plan
            if plan.action == APPLY:
                dropped = commit(s.target, s.store, plan.changes, plan.applied, "apply", s.version)
            dropped += bytecode.unlink(look.stale)
    plan = look.plan
    written = plan.action in (APPLY, ALREADY_APPLIED)
    jit_lines, jit_dropped = s.drop_jit_builds(_written(plan), "before the patch", dry_run) if written else ([], [])
    restart = s.old_processes(_written(plan)) if written and not dry_run else []
    return ApplyResult(
        Where.of(s), s.project.name, s.project.label, tuple(fixes), tuple(kept), dry_run, locked, pending, tuple(lock_notes),
        look.old[1] if look.old else None, aside, plan, tuple(look.stale), tuple(dropped),
        _effects([t.fix for t in plan.tables if t.patched]) if plan.action == APPLY else (),
        tuple(jit_lines), tuple(jit_dropped), tuple(restart), s.target.local,
    )


def _effects(fixes: list) -> tuple:
    """(fix, its ``[effect]``) of each fix of ``fixes`` that has one, once each."""
    from patchkit.fixes.effects import read_effects

    effects = read_effects()
    return tuple((name, effects[name]) for name in dict.fromkeys(f for f in fixes if f in effects))


def _written(plan: Plan) -> list[str]:
    """The files apply wrote, or that an earlier apply wrote."""
    if plan.changes:
        return [c.path for c in plan.changes]
    return [f.path for f in plan.applied.files] if plan.applied else [t.path for t in plan.tables if t.path]


def _kept_look(s: Session, patches, no_generate, from_cc, to_cc, fixes, kept: tuple[str, ...], named=None) -> Look:
    """``_look``; a refusal that names a fix kept from an earlier apply says how to go without it."""
    try:
        return _look(s, patches, no_generate, from_cc, to_cc, fixes, named)
    except PatchkitError as exc:
        held = [f for f in kept if f in exc.reason]
        if not held:
            raise
        raise type(exc)(exc.path, f"{exc.reason} ({', '.join(held)}: applied before, it stays until "
                                  "`patchkit revert`; revert, then apply the fixes you want)") from None


def _look(s: Session, patches, no_generate, from_cc, to_cc, fixes, named=None) -> Look:
    """``named``: the fixes asked for by name (None: all of ``fixes``); a fix the release's
    manifest says cannot be applied whole is refused when named, else left out with a note."""
    fixes, left_out = _refuse_blocked(s, patches, fixes, named)
    look = _look_at(s, patches, no_generate, from_cc, to_cc, fixes)
    if not left_out:
        return look
    plan = look.plan
    if plan.action == NOTHING_TO_PATCH and not rules_for(s.project.name, fixes):
        plan = plan._replace(notes=())
    return look._replace(plan=plan._replace(notes=tuple(left_out) + tuple(plan.notes)))


def _look_at(s: Session, patches, no_generate, from_cc, to_cc, fixes) -> Look:
    applied, changed = s.state()
    old = (applied, changed) if changed else None
    if old:
        applied = None
    extra = tuple(f.path for f in applied.files) if applied else ()
    originals = s.originals(applied)
    missing = [p for p, data in originals.items() if data is None]
    if missing:
        raise Refused(
            s.target.local(missing[0]),
            f"its original bytes are missing from {s.store.objects}; restore the file "
            f"({'reinstall the package' if s.target.kind == INSTALLED else 'e.g. `git checkout -- FILE`'}) and remove {s.store.state_file}",
        )
    current = s.current(extra)
    rules = rules_for(s.project.name, fixes, from_cc, to_cc)
    if not rules:
        return Look(Plan(NOTHING_TO_PATCH, notes=(no_rule(s.project.label, s.project.name, fixes),)), old, [])
    shipped = s.shipped(patches, from_cc, to_cc, fixes)
    with s.local_errors():
        plan = plan_apply(
            current, applied, originals, shipped, rules=rules, from_cc=from_cc, to_cc=to_cc,
            version=s.version, no_generate=no_generate, missing="" if shipped else s.why_no_shipped(patches, from_cc, to_cc),
            read=s.reader(), root=s.project.source_root, local=s.target.local,
            files="the installed files" if s.target.kind == INSTALLED else "the checkout's files",
        )
    if plan.action == APPLY and shipped is None:
        _refuse_gates_left(s, plan, fixes, from_cc, to_cc)
    written = {c.path for c in plan.changes}
    stale = s.stale_bytecode({rel: data for rel, data in current.items() if rel not in written})
    return Look(plan, old, stale)


def _refuse_blocked(s: Session, patches, fixes, named=None) -> tuple[tuple, list[str]]:
    """(the fixes to apply, notes on those left out).  A fix the release's manifest says cannot
    apply here or is incomplete is applied whole or not at all: refused (exit 3, nothing
    written) when ``named`` (None: every fix of ``fixes`` is), else left out and said."""
    blocked = s.blocked(patches, fixes)
    asked = [b for b in blocked if named is None or b.fix in named]
    if asked:
        b = asked[0]
        others = [f for f in fixes_for(s.project.name, fixes) if f not in {x.fix for x in blocked}]
        rest = f"; `--fix {' --fix '.join(others)}` applies the others" if others else ""
        raise Refused(None, f"{b.fix} {b.status} on {s.project.label} {s.version}: {b.reason}; nothing written{rest}")
    notes = [f"{b.fix} left out: {b.status} on {s.project.label} {s.version}: {b.reason}" for b in blocked]
    return tuple(f for f in fixes if f not in {b.fix for b in blocked}), notes


def _refuse_gates_left(s: Session, plan: Plan, fixes, from_cc, to_cc) -> None:
    """A patch generated from the files (no manifest to tell): refuse it where a gate on a
    fix's feature path still refuses the GPU after the rules."""
    from patchkit.fixes.registry import FIXES
    from patchkit.scan.feature_path import gates_left

    after = {c.path: c.after for c in plan.changes}
    read = s.reader()
    for name in fixes:
        path = FIXES[name].path(s.project.name, s.version)
        if path is None:
            continue
        files = {g: after[g] if g in after else read(g) for g in path.globs() if "*" not in g}
        gates = gates_left({k: v for k, v in files.items() if v is not None}, path, from_cc, to_cc)
        if gates:
            raise Refused(None, f"{name} incomplete on {s.project.label} {s.version}: the feature's path still refuses the "
                                f"GPU at {s.target.local(gates[0].path)}:{gates[0].line}: {gates[0].snippet}; nothing written")


def apply_all(sessions: list[Session], patches, no_generate, from_cc, to_cc, dry_run, fixes, named=None, keys=None):
    """``apply`` on each of ``sessions``: every project's plan is made (and any refusal raised)
    before the first one is written.  ``keys``: what ``--to-cc auto`` gives each session
    (``judge.auto.Keys``: the cc to add, the fixes there), instead of ``to_cc`` and ``fixes``;
    ``named``: the fixes asked for by name (None: every one; ``--all-fixes`` names none, and a
    fix that cannot be applied whole on a release is then left out there and said)."""
    fixes = default_fixes() if fixes is None else fixes
    runs = [(k.session, k.pairs[0], fixes if k.fixes is None else k.fixes) for k in keys if k.pairs] if keys is not None else \
        [(s, (from_cc, to_cc), fixes) for s in sessions]
    pairs = [s.project.cc_pair(*pair) for s, pair, _ in runs]
    each = [with_applied(s, f) for s, _, f in runs]
    looks = [_kept_look(s, patches, no_generate, *pair, f, kept, named) if len(runs) > 1 else None
             for (s, _, _), pair, (f, kept) in zip(runs, pairs, each, strict=True)]
    return [_apply(s, patches, no_generate, *pair, dry_run, f, look, kept, named)
            for (s, _, _), pair, (f, kept), look in zip(runs, pairs, each, looks, strict=True)]


def apply_targets(found, patches, no_generate, from_cc, to_cc, dry_run, version, fixes, named=None):
    """``apply`` on each (path, project, install) of ``found`` (``apply_all``): one result."""
    sessions = [Session.open(path, version, name, install) for path, name, install in found]
    return combine("apply", apply_all(sessions, patches, no_generate, from_cc, to_cc, dry_run, fixes, named))


def apply_auto(found, patches, no_generate, from_cc, dry_run, version, fixes, named=()) -> Auto:
    """``apply --to-cc auto``: at each target the key this machine's GPUs need (``judge.auto``),
    the fixes not needed here left out; ``named``: the fixes --fix named, applied even there."""
    from patchkit.judge import auto

    m = auto.read_machine()
    fixes = default_fixes() if fixes is None else fixes
    sessions = [Session.open(path, version, name, install) for path, name, install in found]
    keys = auto.for_apply(sessions, m, from_cc, fixes, named)
    runs = any(k.pairs for k in keys)
    results = iter(apply_all(sessions, patches, no_generate, from_cc, None, dry_run, fixes, named, keys) if runs else ())
    return Auto("apply", m, tuple(AutoTarget(Where.of(k.session), k.session.project.name, k.session.project.label, k.held,
                                             k.spare, (next(results),) if k.pairs else (), k.not_for) for k in keys))
