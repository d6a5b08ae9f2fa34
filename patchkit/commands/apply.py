"""``patchkit apply``: patch a checkout, all or nothing, idempotent, bytecode-aware."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from patchkit.targets import bytecode
from patchkit.patch.write import hunks, split_lines
from patchkit.plan import APPLY, Plan, plan_apply
from patchkit.fixes.registry import default_fixes, fixes_for, no_rule, rules_for
from patchkit.types import ALREADY_APPLIED, NOTHING_TO_PATCH
from patchkit.targets.processes import restart_lines
from patchkit.report import Report, found_line, plan_fields
from patchkit.text import plural
from patchkit.targets.locate import INSTALLED
from patchkit.targets.session import Session
from patchkit.types import Applied
from patchkit.targets.transaction import commit, exclusive
from patchkit.errors import PatchkitError, Refused


class Look(NamedTuple):
    """What apply found, before writing anything."""

    plan: Plan
    old: tuple[Applied, str] | None  # a state of another release, and why
    stale: list[Path]  # stale bytecode of the target files that the plan does not write

    def writes(self) -> bool:
        """Whether apply must take the lock: to write, or to set a state aside."""
        return self.old is not None or self.plan.action == APPLY or bool(self.stale)


def apply(
    path: Path,
    patches: Path | None = None,
    no_generate: bool = False,
    from_cc=None,
    to_cc=None,
    dry_run: bool = False,
    version: str | None = None,
    project: str | None = None,
    fixes: tuple[str, ...] | None = None,
    install=None,
) -> Report:
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
    had = {t.get("fix") for f in applied.files for t in f.tables if isinstance(t, dict)}
    kept = tuple(n for n in FIXES if n in had and n not in fixes)
    return tuple(n for n in FIXES if n in fixes or n in kept), kept


def _apply(s: Session, patches, no_generate, from_cc, to_cc, dry_run: bool, fixes, first: Look | None = None,
           kept: tuple[str, ...] = (), named=None) -> Report:
    """apply on the session ``s``; ``first``: a look taken without the lock already (apply_all's);
    ``kept``: the fixes of ``fixes`` that are there because an earlier apply applied them."""
    report = Report()
    report.add(s.describe())
    if kept:
        report.add(f"note: keeps {', '.join(kept)}, applied before (`patchkit revert` takes the fixes away)")
    pending = s.store.journal() is not None
    # Without the lock, look first: a target with nothing to do is never written, so a
    # read-only one answers too.  A killed run's leftovers need the lock (recovery) first.
    look = None
    if dry_run or s.store.tidy(s.applied()):
        look = first or _kept_look(s, patches, no_generate, from_cc, to_cc, fixes, kept, named)
    dropped: list[Path] = []
    if look is not None and (dry_run or not look.writes()):
        if pending:
            report.add("an interrupted transaction is pending; a real run finishes it first")
        if look.old:
            report.add(f"{look.old[1]}: {'a real run sets' if dry_run else 'apply sets'} the old state aside")
    else:
        with exclusive(s.target, s.store, s.version) as notes:
            report.lines += notes
            look = _kept_look(s, patches, no_generate, from_cc, to_cc, fixes, kept, named)
            if look.old:
                report.add(s.set_aside(*look.old))
            plan = look.plan
            if plan.action == APPLY:
                dropped = commit(s.target, s.store, plan.changes, plan.applied, "apply", s.version)
            dropped += bytecode.unlink(look.stale)
    plan = look.plan
    for note in plan.notes:
        report.add(f"note: {note}")
    if plan.action != APPLY:
        report.add(f"{plan.action}" + (f" ({plan.source})" if plan.source else "") + ": nothing written")
        if look.stale:
            verb = "would drop" if dry_run else "dropped"
            report.add(f"{verb} {plural(len(dropped if not dry_run else look.stale), 'stale bytecode file')}")
    else:
        verb = "would patch" if dry_run else "patched"
        report.add(f"{'would apply' if dry_run else 'applied'} {plan.source}")
        for change in plan.changes:
            report.add(f"  {verb} {s.target.local(change.path)} ({lines_changed(change.before, change.after)})")
        report.lines += [f"  {found_line(t)}" for t in plan.tables]
        report.lines += _effect_lines(s, [t.fix for t in plan.tables if t.patched])
        if dry_run:
            for change in plan.changes:
                rel = s.target.local(change.path)
                report.add(f"--- a/{rel}\n+++ b/{rel}\n" + hunks(change.before, change.after).decode("utf-8", "replace").rstrip("\n"))
        else:
            report.add(f"dropped {plural(len(dropped), 'cached bytecode file')}")
    jit_lines, jit_dropped = ([], []) if plan.action not in (APPLY, ALREADY_APPLIED) else \
        s.drop_jit_builds(_written(plan), "before the patch", dry_run)
    report.lines += jit_lines
    restart = [] if dry_run or plan.action not in (APPLY, ALREADY_APPLIED) else s.old_processes(_written(plan))
    report.lines += restart_lines(restart)
    report.data = s.data(
        "apply",
        fixes=list(fixes),
        **plan_fields(plan, dry_run, look.old[1] if look.old else None),
        files=[s.target.local(c.path) for c in plan.changes],
        tables=[t._replace(path=s.target.local(t.path)).to_json() if t.path else t.to_json() for t in plan.tables],
        bytecode_dropped=[str(p) for p in dropped],
        jit_builds_dropped=jit_dropped,
        restart=[p._asdict() for p in restart],
    )
    return report


def lines_changed(before: bytes, after: bytes) -> str:
    """How many lines the diff adds and removes: "+6 lines", "-2 lines", "+1 -1 lines"."""
    added = removed = 0
    for line in split_lines(hunks(before, after)):
        if line.startswith(b"+"):
            added += 1
        elif line.startswith(b"-"):
            removed += 1
    if added and removed:
        return f"+{added} -{removed} lines"
    return f"-{plural(removed, 'line')}" if removed else f"+{plural(added, 'line')}"


def _effect_lines(s: Session, fixes: list) -> list[str]:
    """What each fix patched here prevents on this release, and what it needs of the machine."""
    from patchkit.fixes.effects import read_effects

    effects = read_effects()
    lines = []
    for name in dict.fromkeys(f for f in fixes if f in effects):
        effect = effects[name]
        prevents = "; ".join(f"\"{f.says}\"" for f in effect.failing(s.project.name, s.version) if f.outcome != "off")
        needs = "; ".join(f"it takes effect with {n.says}, else {n.otherwise}: {n.then}" for n in effect.needs)
        what = f"prevents {prevents} on {s.project.label} {s.version}" if prevents else effect.changes
        lines.append(f"effect: {name} {what}" + (f"; {needs}" if needs else "") + " (`patchkit doctor` says what this machine has)")
    return lines


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


def apply_all(found, patches, no_generate, from_cc, to_cc, dry_run, version, fixes, to_ccs=None, fixes_at=None,
              named=None) -> Report:
    """``apply`` on each (path, project, install) of ``found``: every project's plan is made (and
    any refusal raised) before the first one is written.  ``to_ccs``: str(path) -> the cc to
    add there (``--to-cc auto``), instead of ``to_cc``; ``fixes_at``: (str(path), project) ->
    the fixes there (``--to-cc auto`` leaves out those not needed here), instead of ``fixes``;
    ``named``: the fixes asked for by name (None: every one; ``--all-fixes`` names none, and a
    fix that cannot be applied whole on a release is then left out there and said)."""
    from patchkit.report import combine

    fixes = default_fixes() if fixes is None else fixes
    sessions = [Session.open(path, version, name, install) for path, name, install in found]
    pairs = [s.project.cc_pair(from_cc, to_cc if to_ccs is None else to_ccs.get(str(path), to_cc))
             for s, (path, _, _) in zip(sessions, found)]
    each = [with_applied(s, (fixes_at or {}).get((str(path), s.project.name), fixes)) for s, (path, _, _) in zip(sessions, found)]
    looks = [_kept_look(s, patches, no_generate, *pair, f, kept, named) if len(found) > 1 else None
             for s, pair, (f, kept) in zip(sessions, pairs, each)]
    return combine("apply", [_apply(s, patches, no_generate, *pair, dry_run, f, look, kept, named)
                             for s, pair, (f, kept), look in zip(sessions, pairs, each, looks)])
