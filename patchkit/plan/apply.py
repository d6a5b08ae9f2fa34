"""What ``apply`` writes at one target, decided from what was asked and what was read: pure.

``ApplyRequest`` is what the command line asked of the target (the fixes, the cc pair, the
flags); ``Snapshot`` is what was read of it, once (``targets.session.Session.snapshot``: the
files' bytes, the recorded state and originals, the shipped series' patch and verdicts, the
stale bytecode); ``look`` makes the ``Look`` from the two, and the transaction carries it out
(``targets.transaction``).  Nothing here reads or writes a file but through ``Snapshot.read``,
the target's files by repository path (a rule's helper, a fix's feature path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC, AutoCC, Key
from patchkit.errors import Refused, localized
from patchkit.fixes.registry import Project, fixes_for, rules_for
from patchkit.patch.manifest import FixStatus, Shipped
from patchkit.plan.plans import APPLY, Plan
from patchkit.plan.reasons import ForOtherGpus, LeftOut, NoRule, NoShippedPatch, ReleaseChanged
from patchkit.plan.write_apply import plan_apply
from patchkit.types import NOTHING_TO_PATCH, Applied
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only
    from patchkit.cc import Key
    from patchkit.plan.plans import Note


class ApplyRequest(Value, kw_only=True):
    """What the command line asked of one target."""

    fixes: tuple[str, ...] | None  # the fixes asked for (None: those on by default; the kept ones are the snapshot's)
    named: tuple[str, ...] | None  # those asked for by name (None: all of ``fixes``)
    # The cc pair as given (None: that side of the project's own pair; ``AUTO``: --to-cc auto), a CC
    # from the command line to the look, which writes each as the project keys it (``keys``).
    from_cc: CC | None
    to_cc: CC | AutoCC | None
    patches: Path | None  # the folder of shipped series (None: the ones installed with patchkit)
    no_generate: bool
    dry_run: bool
    left_out: tuple[str, ...] = ()  # the fixes a plain apply left out as not needed on the GPUs judged for

    def keys(self, project: Project) -> tuple[Key, Key]:
        """The pair as ``project`` keys it (``Project.key``), each side not given its own."""
        from_cc, to_cc = self.from_cc, self.to_cc
        return (project.from_cc if from_cc is None else project.key(from_cc),
                project.to_cc if not isinstance(to_cc, CC) else project.key(to_cc))


class Old(Value):
    """A recorded state of another release: never used, set aside by apply and revert."""

    applied: Applied
    reason: ReleaseChanged  # why (``plan.release_changed``)


class Snapshot(Value, kw_only=True):
    """What was read of one target, once, for one command (``Session.snapshot``)."""

    project: Project
    version: str | None
    installed: bool  # an installed package (else a checkout)
    local: Callable[[str], str]  # how the target names a repository path
    state_file: Path
    objects: Path
    pending: bool  # an interrupted transaction's journal is there
    tidy: bool  # nothing in the state dir needs the lock (``Store.tidy``)
    applied: Applied | None  # what patchkit applied to this release (None: nothing, or ``old``)
    old: Old | None
    fixes: tuple[str, ...]  # the fixes asked for and those kept (``with_applied``); () when none was asked
    kept: tuple[str, ...]
    originals: Mapping[str, bytes | None]  # the bytes ``applied`` replaced, by repository path
    current: Mapping[str, bytes]  # every candidate file (and each file of ``applied``) that exists
    shipped: Shipped | None  # the shipped patches for ``fixes`` but ``blocked`` and the cc pair, or None
    series_pair: tuple[Key, Key] | None  # without ``shipped``: the cc pair of the shipped patches of ``fixes`` (None: none)
    series: str | None  # the release whose series is this version's
    blocked: tuple[FixStatus, ...]  # those of ``fixes`` the series' manifest says cannot be applied whole
    stale: Mapping[str, tuple[Path, ...]]  # the stale bytecode of each file that holds a table
    read: Callable[[str], bytes | None]


class FixRefused(Refused):
    """A refusal on account of some fixes (``fixes``): one cannot be applied whole here."""

    def __init__(self, path: str | None, reason: str, fixes: tuple[str, ...]) -> None:
        super().__init__(path, reason)
        self.fixes = fixes


class Look(Value):
    """What apply found, before writing anything."""

    plan: Plan
    old: Old | None  # a state of another release, to set aside
    stale: tuple[Path, ...]  # stale bytecode of the target files that the plan does not write

    def writes(self) -> bool:
        """Whether apply must take the lock: to write, or to set a state aside."""
        return self.old is not None or self.plan.action == APPLY or bool(self.stale)


def with_applied(fixes: tuple[str, ...], applied: Applied | None, old: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``fixes`` and every fix already applied to this release of the target, the ones added):
    a fix once applied stays applied until ``patchkit revert``, whatever a later apply names.
    ``old``: the recorded state is another release's (set aside: a fresh start)."""
    from patchkit.fixes.registry import FIXES

    if applied is None or old:
        return fixes, ()
    had = set(applied.fixes())
    kept = tuple(n for n in FIXES if n in had and n not in fixes)
    return tuple(n for n in FIXES if n in fixes or n in kept), kept


def no_shipped(snap: Snapshot, from_cc: Key, to_cc: Key) -> NoShippedPatch:
    """Why no shipped patch fits: none for this version, or one for another cc pair (``series_pair``)."""
    return NoShippedPatch(snap.version, snap.project.label, snap.series, snap.series_pair, from_cc, to_cc)


def unchanged(first: Snapshot, again: Snapshot) -> bool:
    """Whether ``again`` (read under the lock) holds what ``first`` held, every field a look reads
    (``tidy`` is the lock's business: the lock's own file is there now) and each file that a look
    at ``first`` read through ``first.read`` (its ``seen``): ``look`` is pure, so the look at
    ``first`` is then the look at ``again``, and need not be made twice."""
    seen = getattr(first.read, "seen", None)
    if seen is None or first._replace(read=None, tidy=None) != again._replace(read=None, tidy=None):
        return False
    return all(again.read(rel) == data for rel, data in seen.items())


def look(request: ApplyRequest, snap: Snapshot) -> Look:
    """What apply writes at the target ``snap`` was read from; a refusal on account of a fix kept
    from an earlier apply says how to go without it."""
    try:
        return _look(request, snap)
    except FixRefused as exc:
        held = [f for f in snap.kept if f in exc.fixes]
        if not held:
            raise
        raise FixRefused(exc.path, f"{exc.reason} ({', '.join(held)}: applied before, it stays until `patchkit revert`; "
                                   "revert, then apply the fixes you want)", exc.fixes) from None


def _look(request: ApplyRequest, snap: Snapshot) -> Look:
    """A fix the release's manifest says cannot be applied whole is refused when named, else
    left out with a note."""
    fixes, left_out = _refuse_blocked(snap, request.named)
    found = _look_at(request, snap, fixes)
    if not left_out:
        return found
    plan = found.plan
    if plan.action == NOTHING_TO_PATCH and not rules_for(snap.project.name, fixes):
        plan = plan._replace(notes=())
    return found._replace(plan=plan._replace(notes=tuple(left_out) + tuple(plan.notes)))


def _look_at(request: ApplyRequest, snap: Snapshot, fixes: tuple[str, ...]) -> Look:
    originals = {p: data for p, data in snap.originals.items() if data is not None}
    missing = [p for p in snap.originals if p not in originals]
    if missing:
        restore = "reinstall the package" if snap.installed else "e.g. `git checkout -- FILE`"
        raise Refused(snap.local(missing[0]), f"its original bytes are missing from {snap.objects}; restore the file "
                                              f"({restore}) and remove {snap.state_file}")
    from_cc, to_cc = request.keys(snap.project)
    rules = rules_for(snap.project.name, fixes, from_cc, to_cc)
    # The fixes with rules for this project, none of them for GPUs of to_cc's major (--to-cc 9.0).
    other = tuple(f for f in fixes_for(snap.project.name, fixes) if not rules_for(snap.project.name, (f,), from_cc, to_cc))
    if not rules:
        if other:
            notes: tuple[Note, ...] = (ForOtherGpus(snap.project.label, to_cc, other, ()),)
        else:  # none left but those not needed here (said by the command): no rule to name
            notes = () if request.left_out else (NoRule(snap.project.label, snap.project.name, tuple(fixes)),)
        return Look(Plan(NOTHING_TO_PATCH, notes=notes), snap.old, ())
    shipped = snap.shipped
    with localized(snap.local):
        plan = plan_apply(
            dict(snap.current), snap.applied, originals, shipped, rules=rules, from_cc=from_cc, to_cc=to_cc,
            version=snap.version, no_generate=request.no_generate, no_shipped=None if shipped else no_shipped(snap, from_cc, to_cc),
            read=snap.read, root=snap.project.source_root, local=snap.local, installed=snap.installed,
        )
    if plan.action == APPLY and shipped is None:
        _refuse_gates_left(snap, plan, fixes, from_cc, to_cc)
    elif other and plan.action != APPLY:  # nothing of the others to write: one line says why
        held = tuple(dict.fromkeys(t.fix for t in plan.tables if t.fix and not t.patched))
        plan = Plan(plan.action, notes=(ForOtherGpus(snap.project.label, to_cc, other, held),))
    written = {c.path for c in plan.changes}
    stale = tuple(p for rel, paths in snap.stale.items() if rel not in written for p in paths)
    return Look(plan, snap.old, stale)


def _refuse_blocked(snap: Snapshot, named: tuple[str, ...] | None) -> tuple[tuple[str, ...], list[LeftOut]]:
    """(the fixes to apply, notes on those left out).  A fix the release's manifest says cannot
    apply here or is incomplete is applied whole or not at all: refused (exit 3, nothing
    written) when ``named`` (None: every fix of ``fixes`` is), else left out and said."""
    blocked, label = snap.blocked, f"{snap.project.label} {snap.version}"
    asked = [b for b in blocked if named is None or b.fix in named]
    if asked:
        b = asked[0]
        others = [f for f in fixes_for(snap.project.name, snap.fixes) if f not in {x.fix for x in blocked}]
        rest = f"; `--fix {' --fix '.join(others)}` applies the others" if others else ""
        raise FixRefused(None, f"{b.fix} {b.status} on {label}: {b.says()}; nothing written{rest}", (b.fix,))
    notes = [LeftOut(b.fix, b.status, snap.project.label, snap.version, b.says()) for b in blocked]
    return tuple(f for f in snap.fixes if f not in {b.fix for b in blocked}), notes


def _refuse_gates_left(snap: Snapshot, plan: Plan, fixes: tuple[str, ...], from_cc: Key, to_cc: Key) -> None:
    """A patch generated from the files (no manifest to tell): refuse it where a gate on a
    fix's feature path still refuses the GPU after the rules."""
    from patchkit.fixes.registry import FIXES
    from patchkit.scan.feature_path import gates_left

    after = {c.path: c.after for c in plan.changes}
    for name in fixes:
        path = FIXES[name].path(snap.project.name, snap.version)
        if path is None:
            continue
        files = {g: after[g] if g in after else snap.read(g) for g in path.globs() if "*" not in g}
        gates = gates_left({k: v for k, v in files.items() if v is not None}, path, from_cc, to_cc)
        if gates:
            raise FixRefused(None, f"{name} incomplete on {snap.project.label} {snap.version}: the feature's path still "
                                   f"refuses the GPU at {snap.local(gates[0].path)}:{gates[0].line}: {gates[0].snippet}; "
                                   "nothing written", (name,))
