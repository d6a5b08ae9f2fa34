"""``patchkit upstream``: a branch with one commit per fix, ``git am``-ready mboxes and PR.md.

The commits are built from HEAD with plumbing (a private index, ``commit-tree``,
``update-ref``): the user's branch, HEAD, index and work tree stay as they were.  Returns an
``UpstreamResult`` (``render/upstream.py`` says it).
"""

from __future__ import annotations

import os
from datetime import date
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC, Key
from patchkit.errors import OK, BadInput, Refused
from patchkit.fixes.registry import FIXES, default_fixes, fixes_for, no_rule, rules_for
from patchkit.git.objects import GitSource
from patchkit.patch import message
from patchkit.patch.write import patch_filename
from patchkit.plan.plans import APPLY
from patchkit.plan.write_apply import plan_apply
from patchkit.report import Where
from patchkit.targets.atomic import remove_temps, write_atomic
from patchkit.targets.locate import CHECKOUT
from patchkit.targets.session import Session
from patchkit.targets.transaction import Lock
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.plan.plans import Action, Plan
    from patchkit.targets.transaction import Waited
    from patchkit.types import Source, Status


def default_branch(to_cc: Key, fixes: Sequence[str] = ("torch-symm-mem",)) -> str:
    """``patchkit/sm120-torch-symm-mem``: the key's architecture (12 and "12.0" are sm120, "12.1" sm121)."""
    return f"patchkit/sm{CC.of(to_cc).sm()}-{'-'.join(fixes)}"


def _steps(s: Session, git: GitSource, head: str, fixes: tuple[str, ...], patches: Path | None, from_cc: Key,
           to_cc: Key) -> tuple[list[tuple[str, Plan]], list[tuple[str, Action | Status]]]:
    """(fix, plan) of each fix that changes HEAD, each on top of the ones before it; and
    (fix, what its plan said) of each fix that changes nothing."""
    files = {f.path: git.read(f.blob) for f in git.files(head, s.project.files)}
    steps: list[tuple[str, Plan]] = []
    notes: list[tuple[str, Action | Status]] = []
    for fix in fixes_for(s.project.name, fixes):
        shipped = s.shipped_series.shipped(patches, from_cc, to_cc, (fix,))
        plan = plan_apply(files, None, {}, shipped, rules=rules_for(s.project.name, (fix,), from_cc, to_cc), from_cc=from_cc,
                          to_cc=to_cc, version=s.version, read=partial(git.read_path, head), root=s.project.source_root)
        if plan.action != APPLY:
            notes.append((fix, plan.action))
            continue
        steps.append((fix, plan))
        files = {**files, **{c.path: c.after for c in plan.changes}}
    return steps, notes


def _context(s: Session, fix: str, plan: Plan, head: str, name: str, from_cc: Key, to_cc: Key) -> dict[str, object]:
    """What the templates see of one fix's commit."""
    patched = {t.path for t in plan.tables if t.patched and t.path is not None}  # a plan's tables are each at its path
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


class Made(Value):
    """What a real run made: the branch (the next free name if another run took the planned one),
    its commits, an mbox per commit and PR.md."""

    branch: str
    commits: tuple[str, ...]
    mboxes: tuple[Path, ...]
    pr: Path
    author: tuple[str, str]  # (name, email) of the commits
    waited: Waited | None  # how long taking the lock waited, and for which run; None: it did not


class UpstreamResult(Value):
    target: Where  # the checkout (``render/where.py`` says its first line)
    path: str
    head: str
    skipped: tuple[tuple[str, Action | Status], ...]  # (fix, what its plan said) of each fix that changes nothing at HEAD
    branch: str  # the branch planned
    dry_run: bool
    fixes: tuple[str, ...]  # one commit each
    messages: tuple[str, ...]  # each commit's message
    pr: str  # PR.md as planned
    files: tuple[str, ...]  # every file the commits change
    changes: tuple[tuple[int, Source | None], ...]  # (files changed, the plan's source) of each commit
    made: Made | None = None  # None with dry_run
    exit_code: int = OK


def upstream(
    path: Path,
    branch: str | None = None,
    out: Path = Path("upstream"),
    from_cc: CC | None = None,
    to_cc: CC | None = None,
    dry_run: bool = False,
    templates: Path | None = None,
    patches: Path | None = None,
    fixes: tuple[str, ...] | None = None,
) -> UpstreamResult:
    """One commit per fix (default: the fixes on by default) that changes HEAD, on a new branch."""
    s = Session.open(path)
    from_key, to_key = s.project.cc_pair(from_cc, to_cc)
    if s.target.kind is not CHECKOUT:
        raise BadInput(str(path), "not a git checkout: upstream needs git history to branch from")
    git = GitSource(s.target.root)
    head = git.head()
    fixes = default_fixes() if fixes is None else fixes
    steps, skipped = _steps(s, git, head, fixes, patches, from_key, to_key)
    if not steps:
        why = ("; ".join(f"{fix}: {action}" for fix, action in skipped) if len(skipped) > 1
               else skipped[0][1] if skipped else no_rule(s.project.label, s.project.name, fixes))
        raise Refused(str(s.target.root), f"nothing to change at HEAD ({head[:12]}): {why}")
    name = git.free_branch(branch or default_branch(to_key, [fix for fix, _ in steps]))
    contexts = [_context(s, fix, plan, head, name, from_key, to_key) for fix, plan in steps]
    texts = [message.commit_message(ctx, templates) for ctx in contexts]
    pr_context = dict(contexts[0], commits=[dict(ctx, subject=message.subject(t)) for ctx, t in zip(contexts, texts, strict=True)])
    body = message.pr_body(pr_context, templates)
    files = sorted({c.path for _, plan in steps for c in plan.changes})
    planned = UpstreamResult(Where.of(s), str(s.target.root), head, tuple(skipped), name, dry_run, tuple(fix for fix, _ in steps),
                             tuple(texts), body, tuple(files), tuple((len(plan.changes), plan.source) for _, plan in steps))
    if dry_run:
        return planned

    author = git.identity()
    commits: list[str] = []
    parent = head
    with Lock(s.store, s.target) as lock:
        waited = lock.waited()
        s.store.clean_leftovers()  # scratch folders of killed upstream runs (the lock is ours)
        scratch = s.store.root / f"upstream-{os.getpid()}"
        for (_, plan), text in zip(steps, texts, strict=True):
            parent = git.commit(parent, {c.path: c.after for c in plan.changes}, text, scratch)
            commits.append(parent)
        made = git.create_branch(name, parent)  # the next free name if another run took this one
    out.mkdir(parents=True, exist_ok=True)
    mboxes: list[Path] = []
    for number, (commit, text) in enumerate(zip(commits, texts, strict=True), 1):
        mboxes.append(out / patch_filename(message.subject(text), number))
        remove_temps(mboxes[-1])  # what a killed upstream left of its own writes
        write_atomic(mboxes[-1], git.format_patch(commit), mode=0o644)
    if made != pr_context["branch"]:
        body = message.pr_body(dict(pr_context, branch=made), templates)
    remove_temps(out / "PR.md")
    write_atomic(out / "PR.md", body.encode(), mode=0o644)
    return planned._replace(made=Made(made, tuple(commits), tuple(mboxes), out / "PR.md", author, waited))
