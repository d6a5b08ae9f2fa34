"""``patchkit upstream``: a branch with one commit per fix, ``git am``-ready mboxes and PR.md.

The commits are built from HEAD with plumbing (a private index, ``commit-tree``,
``update-ref``): the user's branch, HEAD, index and work tree stay as they were.
"""

from __future__ import annotations

import os
from datetime import date
from functools import partial
from pathlib import Path

from patchkit.patch import message
from patchkit.targets.atomic import remove_temps, write_atomic
from patchkit.errors import BadInput
from patchkit.patch.write import patch_filename
from patchkit.plan import APPLY, plan_apply
from patchkit.fixes.registry import FIXES, default_fixes, fixes_for, no_rule, rules_for
from patchkit.report import Report
from patchkit.text import plural
from patchkit.targets.session import Session
from patchkit.git.objects import GitSource
from patchkit.targets.transaction import Lock
from patchkit.errors import Refused


def default_branch(to_cc, fixes=("torch-symm-mem",)) -> str:
    return f"patchkit/sm{str(to_cc).replace('.', '')}0-{'-'.join(fixes)}"


def _steps(s: Session, git: GitSource, head: str, fixes, patches, from_cc, to_cc) -> tuple[list, list]:
    """(fix, plan) of each fix that changes HEAD, each on top of the ones before it; and
    (fix, what its plan said) of each fix that changes nothing."""
    files = {f.path: git.read(f.blob) for f in git.files(head, s.project.files)}
    steps, notes = [], []
    for fix in fixes_for(s.project.name, fixes):
        shipped = s.shipped(patches, from_cc, to_cc, (fix,))
        plan = plan_apply(files, None, {}, shipped, rules=rules_for(s.project.name, (fix,), from_cc, to_cc), from_cc=from_cc,
                          to_cc=to_cc, version=s.version, read=partial(git.read_path, head), root=s.project.source_root)
        if plan.action != APPLY:
            notes.append((fix, plan.action))
            continue
        steps.append((fix, plan))
        files = {**files, **{c.path: c.after for c in plan.changes}}
    return steps, notes


def _context(s: Session, fix: str, plan, head: str, name: str, from_cc, to_cc) -> dict:
    """What the templates see of one fix's commit."""
    patched = {t.path for t in plan.tables if t.patched}
    return message.context(
        project=s.project.name,
        version=s.version,
        tag=None,
        commit=head,
        from_cc=from_cc,
        to_cc=to_cc,
        files=[{"path": p, "tables": [t for t in plan.tables if t.path == p and t.patched]} for p in sorted(patched)],
        already_upstream=[t for t in plan.tables if not t.patched],
        last_update=date.today().isoformat(),
        branch=name,
        **message.fix_fields(FIXES[fix], rules_for(s.project.name, (fix,)), s.project.name, s.version),
    )


def upstream(
    path: Path,
    branch: str | None = None,
    out: Path = Path("upstream"),
    from_cc=None,
    to_cc=None,
    dry_run: bool = False,
    templates: Path | None = None,
    patches: Path | None = None,
    fixes: tuple[str, ...] | None = None,
) -> Report:
    """One commit per fix (default: the fixes on by default) that changes HEAD, on a new branch."""
    s = Session.open(path)
    from_cc, to_cc = s.project.cc_pair(from_cc, to_cc)
    if s.target.kind != "git checkout":
        raise BadInput(str(path), "not a git checkout: upstream needs git history to branch from")
    git = GitSource(s.target.root)
    head = git.head()
    fixes = default_fixes() if fixes is None else fixes
    steps, skipped = _steps(s, git, head, fixes, patches, from_cc, to_cc)
    if not steps:
        why = ("; ".join(f"{fix}: {action}" for fix, action in skipped) if len(skipped) > 1
               else skipped[0][1] if skipped else no_rule(s.project.label, s.project.name, fixes))
        raise Refused(str(s.target.root), f"nothing to change at HEAD ({head[:12]}): {why}")
    name = git.free_branch(branch or default_branch(to_cc, [fix for fix, _ in steps]))
    contexts = [_context(s, fix, plan, head, name, from_cc, to_cc) for fix, plan in steps]
    texts = [message.commit_message(ctx, templates) for ctx in contexts]
    pr_context = dict(contexts[0], commits=[dict(ctx, subject=message.subject(t)) for ctx, t in zip(contexts, texts)])
    body = message.pr_body(pr_context, templates)
    report = Report()
    report.add(f"{s.describe()}; HEAD {head[:12]}")
    report.lines += [f"note: {fix}: {action}, no commit" for fix, action in skipped]
    files = sorted({c.path for _, plan in steps for c in plan.changes})
    report.data = {"command": "upstream", "path": str(s.target.root), "head": head, "branch": name, "dry_run": dry_run,
                   "fixes": [fix for fix, _ in steps], "message": "\n".join(texts), "pr": body, "files": files}
    if dry_run:
        report.add(f"would create branch {name} with {plural(len(steps), 'commit')}:" if len(steps) > 1
                   else f"would create branch {name} with one commit:")
        for text in texts:
            report.lines += ["", text]
        report.lines += ["--- PR.md ---", body]
        return report

    author = git.identity()
    commits, parent = [], head
    with Lock(s.store, s.target) as lock:
        if lock.waited():
            report.add(lock.waited())
        s.store.clean_leftovers()  # scratch folders of killed upstream runs (the lock is ours)
        scratch = s.store.root / f"upstream-{os.getpid()}"
        for (_, plan), text in zip(steps, texts):
            parent = git.commit(parent, {c.path: c.after for c in plan.changes}, text, scratch)
            commits.append(parent)
        name = git.create_branch(name, parent)  # the next free name if another run took this one
    out.mkdir(parents=True, exist_ok=True)
    mboxes = []
    for number, (commit, text) in enumerate(zip(commits, texts), 1):
        mboxes.append(out / patch_filename(message.subject(text), number))
        remove_temps(mboxes[-1])  # what a killed upstream left of its own writes
        write_atomic(mboxes[-1], git.format_patch(commit), mode=0o644)
    if name != pr_context["branch"]:
        body = message.pr_body(dict(pr_context, branch=name), templates)
    remove_temps(out / "PR.md")
    write_atomic(out / "PR.md", body.encode(), mode=0o644)
    for (_, plan), commit, text in zip(steps, commits, texts):
        report.add(f"created branch {name} at {commit[:12]}: {message.subject(text)}" if len(steps) == 1
                   else f"committed {commit[:12]} on branch {name}: {message.subject(text)}")
        report.add(f"  author {author[0]} <{author[1]}>; {plural(len(plan.changes), 'file')} changed ({plan.source})")
    report.add(f"wrote {', '.join(map(str, mboxes))} (git am) and {out / 'PR.md'}")
    report.add(f"next: git push <your fork> {name}, then open a pull request with {out / 'PR.md'}")
    report.data.update({"commit": commits[-1], "commits": commits, "mbox": str(mboxes[0]), "mboxes": list(map(str, mboxes)),
                        "pr_path": str(out / "PR.md")})
    return report
