"""``patchkit revert``: put back the exact original bytes, and drop their bytecode."""

from __future__ import annotations

from pathlib import Path

from patchkit.plan import REVERT, plan_revert
from patchkit.report import Report
from patchkit.session import Session
from patchkit.atomic import write_atomic
from patchkit.digest import sha256
from patchkit.transaction import commit, exclusive


def revert(path: Path, force: bool = False, dry_run: bool = False, patches: Path | None = None, project: str | None = None) -> Report:
    s = Session.open(path, project=project)
    report = Report()
    report.add(s.describe())
    if dry_run:
        if s.store.journal() is not None:
            report.add("an interrupted transaction is pending; a real run finishes it first")
        plan, dropped, kept = _plan(s, force, patches), [], []
    else:
        with exclusive(s.target, s.store) as notes:
            report.lines += notes
            plan = _plan(s, force, patches)
            kept = _keep_edits(s, plan) if plan.action == REVERT else []
            had_state = s.applied() is not None
            dropped = commit(s.target, s.store, plan.changes, None, "revert") if plan.action == REVERT and (plan.changes or had_state) else []
    for note in plan.notes:
        report.add(f"note: {note}")
    for path in kept:
        report.add(f"kept your edited copy in {path}")
    if plan.action != REVERT:
        report.add(f"{plan.action}: nothing written")
    else:
        verb = "would restore" if dry_run else "restored"
        report.add(f"{'would revert' if dry_run else 'reverted'} {plan.source}")
        for change in plan.changes:
            report.add(f"  {verb} {s.target.local(change.path)} (sha256 {sha256(change.after)[:12]})")
        if not dry_run:
            report.add(f"dropped {len(dropped)} cached bytecode file{'s' if len(dropped) != 1 else ''}")
    report.data = {
        "command": "revert",
        "path": str(s.target.root),
        "version": s.version,
        "action": plan.action,
        "dry_run": dry_run,
        "source": plan.source,
        "notes": plan.notes,
        "files": [c.path for c in plan.changes],
        "kept_edits": [str(p) for p in kept],
        "bytecode_dropped": [str(p) for p in dropped],
    }
    return report


def _plan(s: Session, force: bool, patches: Path | None):
    applied = s.applied()
    extra = tuple(f.path for f in applied.files) if applied else ()
    shipped = None if applied else s.shipped(patches)
    return plan_revert(s.current(extra), applied, s.originals(applied), shipped, force)


def _keep_edits(s: Session, plan) -> list[Path]:
    """With --force, a file edited after apply is copied to the state dir before it is replaced."""
    applied = s.applied()
    posts = {f.path: f.post_sha256 for f in applied.files} if applied else {}
    kept = []
    for change in plan.changes:
        if change.path in posts and sha256(change.before) != posts[change.path]:
            folder = s.store.root / "edited"
            folder.mkdir(parents=True, exist_ok=True)
            copy = folder / f"{Path(change.path).name}.{sha256(change.before)[:12]}"
            write_atomic(copy, change.before)
            kept.append(copy)
    return kept
