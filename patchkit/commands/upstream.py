"""``patchkit upstream``: a branch with one commit, a ``git am``-ready mbox and PR.md.

The commit is built from HEAD with plumbing (a private index, ``commit-tree``,
``update-ref``): the user's branch, HEAD, index and work tree stay as they were.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

from patchkit.patch import message
from patchkit.target.atomic import write_atomic
from patchkit.errors import BadInput
from patchkit.patch.write import patch_filename
from patchkit.plan import APPLY, plan_apply
from patchkit.fixes.registry import FIXES, default_fixes, rules_for
from patchkit.report import Report
from patchkit.types import PATCHED
from patchkit.target.session import Session
from patchkit.git.objects import GitSource
from patchkit.target.transaction import Lock
from patchkit.errors import Refused


def default_branch(to_cc) -> str:
    return f"patchkit/sm{str(to_cc).replace('.', '')}0-torch-symm-mem"


def upstream(
    path: Path,
    branch: str | None = None,
    out: Path = Path("upstream"),
    from_cc=None,
    to_cc=None,
    dry_run: bool = False,
    templates: Path | None = None,
    patches: Path | None = None,
) -> Report:
    s = Session.open(path)
    from_cc, to_cc = s.project.cc_pair(from_cc, to_cc)
    if s.target.kind != "git checkout":
        raise BadInput(str(path), "not a git checkout: upstream needs git history to branch from")
    git = GitSource(s.target.root)
    head = git.head()
    committed = {f.path: git.read(f.blob) for f in git.files(head, s.project.files)}
    fixes = default_fixes()
    shipped = s.shipped(patches, from_cc, to_cc, fixes)
    plan = plan_apply(committed, None, {}, shipped, rules=rules_for(s.project.name, fixes, from_cc, to_cc), from_cc=from_cc,
                      to_cc=to_cc, version=s.version, read=s.reader(), root=s.project.source_root)
    if plan.action != APPLY:
        raise Refused(str(s.target.root), f"nothing to change at HEAD ({head[:12]}): {plan.action}")
    name = git.free_branch(branch or default_branch(to_cc))
    patched = {t["path"] for t in plan.tables if t["status"] == PATCHED}
    ctx = message.context(
        project=s.project.name,
        version=s.version,
        tag=None,
        commit=head,
        from_cc=from_cc,
        to_cc=to_cc,
        files=[{"path": p, "tables": [t for t in plan.tables if t["path"] == p and t["status"] == PATCHED]} for p in sorted(patched)],
        already_upstream=[t for t in plan.tables if t["status"] != PATCHED],
        last_update=date.today().isoformat(),
        branch=name,
        fix=dict(FIXES[fixes[0]]._asdict(), name=fixes[0], rules=None),
        rules=[],
    )
    text = message.commit_message(ctx, templates)
    body = message.pr_body(ctx, templates)
    report = Report()
    report.add(f"{s.describe()}; HEAD {head[:12]}")
    report.data = {"command": "upstream", "path": str(s.target.root), "head": head, "branch": name, "dry_run": dry_run,
                   "message": text, "pr": body, "files": sorted(patched)}
    if dry_run:
        report.lines += [f"would create branch {name} with one commit:", "", text, "--- PR.md ---", body]
        return report

    author = git.identity()
    with Lock(s.store, s.target) as lock:
        if lock.waited():
            report.add(lock.waited())
        s.store.clean_leftovers()  # scratch folders of killed upstream runs (the lock is ours)
        scratch = s.store.root / f"upstream-{os.getpid()}"
        commit = git.commit(head, {c.path: c.after for c in plan.changes}, text, scratch)
        name = git.create_branch(name, commit)  # the next free name if another run took this one
    mbox = git.format_patch(commit)
    out.mkdir(parents=True, exist_ok=True)
    mbox_path = out / patch_filename(message.subject(text))
    write_atomic(mbox_path, mbox, mode=0o644)
    if name != ctx["branch"]:
        body = message.pr_body(dict(ctx, branch=name), templates)
    write_atomic(out / "PR.md", body.encode(), mode=0o644)
    report.add(f"created branch {name} at {commit[:12]}: {message.subject(text)}")
    report.add(f"  author {author[0]} <{author[1]}>; {len(plan.changes)} files changed ({plan.source})")
    report.add(f"wrote {mbox_path} (git am) and {out / 'PR.md'}")
    report.add(f"next: git push <your fork> {name}, then open a pull request with {out / 'PR.md'}")
    report.data.update({"commit": commit, "mbox": str(mbox_path), "pr_path": str(out / "PR.md")})
    return report
