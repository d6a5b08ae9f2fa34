"""The words around a change: commit message and PR body, from jinja2 templates.

Shipped patches (generate) and upstream commits (upstream) render the same
commit-message template from the same context, so they read the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.errors import BadInput
from patchkit.fixes.kinds import BackportRule
from patchkit.patch.render import render
from patchkit.rewrite.found import Found, phrased

if TYPE_CHECKING:
    from patchkit.cc import Key
    from patchkit.fixes.kinds import Rule
    from patchkit.fixes.load import Fix

COMMIT_TEMPLATE = "commit-message.j2"
PR_TEMPLATE = "pr-body.md.j2"
SUBJECT_MAX = 72


def sm(cc: Key) -> str:
    """The architecture name of a compute capability: 12 -> "SM120", "12.0" -> "SM120"."""
    major, _, minor = str(cc).partition(".")
    return f"SM{major}{minor or 0}"


def context(
    *, project: str, version: str | None, tag: str | None, commit: str, from_cc: Key, to_cc: Key,
    files: list[dict[str, object]], already_upstream: Sequence[object], last_update: str, **extra: object,
) -> dict[str, object]:
    """``files``: ``[{"path": ..., "tables": [...]}]`` of the patched files; a table, there and in
    ``already_upstream``, is what a rule found (``rewrite.found.Found``): templates read its fields by name, a
    backport's values in their phrases (``rewrite.found.phrased``: "1 hunk", "at an offset of -7 lines")."""
    files = [dict(f, tables=_phrased(tables)) if isinstance(tables := f.get("tables"), list) else f for f in files]
    return {
        "project": project,
        "version": version,
        "tag": tag,
        "commit": commit,
        "from_cc": from_cc,
        "to_cc": to_cc,
        "from_sm": sm(from_cc),
        "to_sm": sm(to_cc),
        "files": files,
        "already_upstream": _phrased(already_upstream),
        "patchkit_version": __version__,
        "last_update": last_update,
        **extra,
    }


def _phrased(tables: Iterable[object]) -> list[object]:
    return [phrased(t) if isinstance(t, Found) else t for t in tables]


def fix_fields(fix: Fix, rules: Iterable[Rule], project: str | None = None, version: str | None = None) -> dict[str, object]:
    """A fix (``fixes.load.Fix``) and the rules of it at hand, as the templates see them;
    with ``project``, also its effect on that project's ``version`` (``effect_fields``)."""
    chosen = [r for r in rules if version is None or r.covers(version)]
    return {
        "fix": {"name": fix.name, "title": fix.title, "rationale": fix.rationale, "default": fix.default},
        # With a release, the rules for it alone (a backport refreshed per release range names its range).
        "rules": [{"kind": r.kind, "where": r.where(), "evidence": r.evidence, "needs": r.needs} for r in chosen],
        # Each backport's upstream change by the name its findings carry ("FlashInfer PR 3903"):
        # project, pr, commit (None: not known), title, landed_in.
        "origins": {r.origin.cite(): r.origin._asdict() for r in chosen if isinstance(r, BackportRule) and r.origin is not None},
        "effect": effect_fields(fix.name, project, version) if project else None,
    }


def effect_fields(fix: str, project: str, version: str | None) -> dict[str, object] | None:
    """What the fix does on ``project`` ``version`` (its ``[effect]``), as the templates see it:
    what fails there without it, what it needs of the machine, whether the release turns
    the feature on by itself."""
    from patchkit.fixes.effects import read_effects
    from patchkit.fixes.registry import PROJECTS

    effect = read_effects().get(fix)
    if effect is None:
        return None
    label = PROJECTS[project].label
    return {
        "changes": effect.changes, "upstream": effect.upstream, "asked_with": effect.asked_with, "label": label,
        "failing": [dict(f._asdict(), releases=f.releases()) for f in effect.failing(project, version)],
        "needs": [n.of_release(project, version)._asdict() for n in effect.needs],  # FlashInfer's: as its release builds
        "default_on": [dict(d._asdict(), releases=d.releases(), models=list(d.models), with_label=PROJECTS[d.with_project].label)
                       for d in effect.turned_on(project, version)],
    }


def commit_message(ctx: dict[str, object], templates: Path | None = None) -> str:
    """The rendered commit message; its subject is checked to be one line of at most 72 characters."""
    message = render(COMMIT_TEMPLATE, ctx, templates).strip("\n") + "\n"
    first = subject(message)
    if not first or len(first) > SUBJECT_MAX:
        where = f"{templates}/{COMMIT_TEMPLATE}" if templates and (templates / COMMIT_TEMPLATE).exists() else COMMIT_TEMPLATE
        raise BadInput(where, f"the subject must be 1 to {SUBJECT_MAX} characters, not {len(first)}: {first!r}")
    return message


def subject(message: str) -> str:
    return message.strip("\n").split("\n", 1)[0].strip()


def pr_body(ctx: dict[str, object], templates: Path | None = None) -> str:
    return render(PR_TEMPLATE, ctx, templates).strip("\n") + "\n"
