"""``patchkit apply``: patch a checkout, all or nothing, idempotent, bytecode-aware."""

from __future__ import annotations

from pathlib import Path

from patchkit.patchfile import hunks, split_lines
from patchkit.plan import APPLY, plan_apply
from patchkit.report import Report
from patchkit.session import Session
from patchkit.transaction import commit, exclusive


def apply(
    path: Path,
    patches: Path | None = None,
    no_generate: bool = False,
    from_cc=None,
    to_cc=None,
    dry_run: bool = False,
    version: str | None = None,
    project: str | None = None,
) -> Report:
    s = Session.open(path, version, project)
    from_cc = s.project.from_cc if from_cc is None else from_cc
    to_cc = s.project.to_cc if to_cc is None else to_cc
    report = Report()
    report.add(s.describe())
    if dry_run:
        if s.store.journal() is not None:
            report.add("an interrupted transaction is pending; a real run finishes it first")
        plan = _plan(s, patches, no_generate, from_cc, to_cc)
        dropped = []
    else:
        with exclusive(s.target, s.store) as notes:
            report.lines += notes
            plan = _plan(s, patches, no_generate, from_cc, to_cc)
            dropped = commit(s.target, s.store, plan.changes, plan.applied, "apply") if plan.action == APPLY else []
    for note in plan.notes:
        report.add(f"note: {note}")
    if plan.action != APPLY:
        report.add(f"{plan.action}" + (f" ({plan.source})" if plan.source else "") + ": nothing written")
    else:
        verb = "would patch" if dry_run else "patched"
        report.add(f"{'would apply' if dry_run else 'applied'} {plan.source}")
        for change in plan.changes:
            added = len(split_lines(change.after)) - len(split_lines(change.before))
            report.add(f"  {verb} {s.target.local(change.path)} ({added:+d} line{'s' if abs(added) != 1 else ''})")
        for t in plan.tables:
            if t["status"] == "patched":
                report.add(f"  {t['name']} ({t['scope']}): key {t['added_key']!r} = key {t['copied_from']!r}")
            else:
                report.add(f"  {t['name']} ({t['scope']}): already has key {t['added_key']!r}, left alone")
        if dry_run:
            for change in plan.changes:
                report.add(f"--- a/{change.path}\n+++ b/{change.path}\n" + hunks(change.before, change.after).decode("utf-8", "replace").rstrip("\n"))
        else:
            report.add(f"dropped {len(dropped)} cached bytecode file{'s' if len(dropped) != 1 else ''}")
    report.data = {
        "command": "apply",
        "path": str(s.target.root),
        "version": s.version,
        "version_from": s.how,
        "action": plan.action,
        "dry_run": dry_run,
        "source": plan.source,
        "notes": plan.notes,
        "files": [c.path for c in plan.changes],
        "tables": plan.tables,
        "bytecode_dropped": [str(p) for p in dropped],
    }
    return report


def _plan(s: Session, patches, no_generate, from_cc, to_cc):
    applied = s.applied()
    extra = tuple(f.path for f in applied.files) if applied else ()
    originals = s.originals(applied)
    missing = [p for p, data in originals.items() if data is None]
    if missing:
        from patchkit.transaction import Refused

        raise Refused(missing[0], f"its original bytes are missing from {s.store.objects}; restore the file (e.g. `git checkout -- FILE`) and remove {s.store.state_file}")
    return plan_apply(
        s.current(extra),
        applied,
        originals,
        s.shipped(patches, from_cc, to_cc),
        s.project.tables,
        from_cc,
        to_cc,
        s.version,
        no_generate,
    )
