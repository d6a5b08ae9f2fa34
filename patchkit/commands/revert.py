"""``patchkit revert``: put back the exact original bytes, and drop their bytecode."""

from __future__ import annotations

from pathlib import Path

from patchkit.plan import REVERT, plan_revert
from patchkit.targets.processes import restart_lines
from patchkit.report import Report
from patchkit.text import plural
from patchkit.targets.session import Session
from patchkit.targets.atomic import make_dir, write_atomic
from patchkit.digest import sha256
from patchkit.targets.transaction import commit, exclusive
from patchkit.errors import Refused


def revert(
    path: Path, force: bool = False, dry_run: bool = False, patches: Path | None = None, project: str | None = None, install=None
) -> Report:
    s = Session.open(path, project=project, install=install)
    report = Report()
    report.add(s.describe())
    pending = s.store.journal() is not None
    # As apply: look without the lock first, unless a killed run left something to finish.
    plan, old = _plan(s, force, patches) if dry_run or s.store.tidy(s.applied()) else (None, None)
    dropped: list[Path] = []
    kept: list[Path] = []
    if plan is not None and (dry_run or not (old or plan.action == REVERT)):
        if pending:
            report.add("an interrupted transaction is pending; a real run finishes it first")
        if old:
            report.add(f"{old[1]}: {'a real run sets' if dry_run else 'revert sets'} the old state aside")
    else:
        with exclusive(s.target, s.store, s.version) as notes:
            report.lines += notes
            plan, old = _plan(s, force, patches)
            if old:
                report.add(s.set_aside(*old))
            kept = _keep_edits(s, plan) if plan.action == REVERT else []
            had_state = s.applied() is not None
            dropped = commit(s.target, s.store, plan.changes, None, "revert", s.version) if plan.action == REVERT and (plan.changes or had_state) else []
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
            report.add(f"dropped {plural(len(dropped), 'cached bytecode file')}")
    jit_lines, jit_dropped = s.drop_jit_builds([c.path for c in plan.changes], "from the patched sources", dry_run) \
        if plan.action == REVERT else ([], [])
    report.lines += jit_lines
    restart = s.old_processes([c.path for c in plan.changes]) if plan.action == REVERT and not dry_run else []
    report.lines += restart_lines(restart)
    report.data = s.data(
        "revert",
        action=plan.action, dry_run=dry_run, source=plan.source, notes=list(plan.notes), set_aside=old[1] if old else None,
        files=[s.target.local(c.path) for c in plan.changes],
        kept_edits=[str(p) for p in kept],
        bytecode_dropped=[str(p) for p in dropped],
        jit_builds_dropped=jit_dropped,
        restart=[p._asdict() for p in restart],
    )
    return report


def _plan(s: Session, force: bool, patches: Path | None):
    """The plan, and the state of another release to set aside first (with why), if any."""
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
