"""What ``patchkit fixes`` says (``commands.fixes.FixesResult``): each fix, on by default or
opt-in, its rules, what it does and under which conditions, and the releases its shipped
series cover, by project."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.fixes.effects import Outcome
from patchkit.fixes.registry import PROJECTS
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, PATCHED

if TYPE_CHECKING:
    from patchkit.commands.fixes import FixesResult, NotShipped, ShippedReleases
    from patchkit.fixes.effects import DefaultOn, Effect, Fails, Needs


def to_text(r: FixesResult, terminal: bool) -> list[str]:
    lines: list[str] = []
    for n, entry in enumerate(r.fixes):
        fix = entry.fix
        lines += [""] if n else []
        lines.append(f"{fix.name}: {fix.title}")
        lines.append(f"  default: {'on by default' if fix.default else f'opt-in, with --fix {fix.name}'}")
        for i, rule in enumerate(fix.rules, 1):
            lines.append(f"  rule {i}: {PROJECTS[rule.project].label}, {rule.kind}")
            lines.append(f"    files:    {', '.join(rule.files)}")
            lines.append(f"    where:    {rule.where()}")
            lines.append(f"    evidence: {rule.evidence}")
            if rule.needs:
                lines.append(f"    needs:    {rule.needs}")
        if entry.effect is not None:
            lines += effect_lines(entry.effect)
        lines.append("  releases:")
        for found in entry.releases:
            lines += release_lines(found)
    return lines


def to_json(r: FixesResult) -> dict[str, object]:
    documents: list[dict[str, object]] = []
    for entry in r.fixes:
        fix, effect = entry.fix, entry.effect
        rules = [{"project": rule.project, "label": PROJECTS[rule.project].label, "kind": rule.kind, "files": list(rule.files),
                  "where": rule.where(), "evidence": rule.evidence, "needs": rule.needs} for rule in fix.rules]
        documents.append({
            "name": fix.name, "title": fix.title, "rationale": fix.rationale, "default": fix.default,
            "enable": None if fix.default else f"--fix {fix.name}", "rules": rules, "releases": list(entry.releases),
            "effect": effect_json(effect) if effect is not None else None,
        })
    return {"command": "fixes", "patches": str(r.patches), "fixes": documents}


def release_lines(r: NotShipped | ShippedReleases) -> list[str]:
    """The releases of one project a fix's shipped series cover (``commands.fixes.releases``), by status."""
    if r["shipped"] is False:
        return [f"    {r['label']}: no shipped series"]
    rows: list[tuple[str, list[str]]] = [(PATCHED, r["patched_ranges"]), (ALREADY_UPSTREAM, r["already_upstream_ranges"])]
    rows += [(status, found["ranges"]) for status, found in r["other"].items()]
    if r["not_listed"]:
        rows.append(("not in the manifest", r["not_listed_ranges"]))
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"    {r['label']} ({plural(r['releases'], 'shipped release')}):"]
    lines += [f"      {name + ':':<{width}}{', '.join(runs) or 'none'}" for name, runs in rows]
    return lines


def effect_lines(effect: Effect) -> list[str]:
    """What the fix does and under which conditions (its ``[effect]``)."""
    lines = [f"  effect:   {effect.changes}", f"  upstream: {effect.upstream}", f"  without it (with {effect.asked_with}):"]
    lines += [f"    {failure_words(f, PROJECTS[f.project].label)}" for f in effect.fails]
    lines += [f"  needs:    {needs_words(n)}" for n in effect.needs]
    lines += [f"  on by itself: {on_by_itself_words(d, PROJECTS[d.project].label, PROJECTS[d.with_project].label)}"
              for d in effect.default_on]
    return lines


def needs_words(need: Needs) -> str:
    """What a fix needs of the machine and what happens without it, in one clause."""
    return f"{need.says}; without it {need.otherwise}: {need.then}"


def failure_words(f: Fails, label: str) -> str:
    """What goes wrong without the fix in a range of releases, in one clause."""
    what = {Outcome.CRASH: "crashes with ", Outcome.WARNING: "warns ", Outcome.OFF: ""}[f.outcome]
    return f"{label} {f.releases()} {what}{f.says} ({f.where})"


def on_by_itself_words(d: DefaultOn, label: str, other: str) -> str:
    """What turns the feature on by itself in a range of releases, in one clause."""
    kept = f"; {d.prevented_by} keeps it off" if d.prevented_by else ""
    return f"{label} {d.releases()} turns it on by itself on SM120 for {', '.join(d.models)}, with {other} below {d.fixed_in}{kept}"


def effect_json(effect: Effect) -> dict[str, object]:
    """A fix's effect (``fixes.effects.Effect``) in a --json document."""
    return {
        "changes": effect.changes, "upstream": effect.upstream, "asked_with": effect.asked_with,
        "fails": [f._asdict() for f in effect.fails], "needs": [needs_json(n) for n in effect.needs],
        "default_on": [dict(d._asdict(), models=list(d.models)) for d in effect.default_on],
    }


def needs_json(need: Needs) -> dict[str, object]:
    """A fix's need (``fixes.effects.Needs``) as --json says it: ``for_cc`` as the data writes it
    (each cc's tables, since/until in those of a range)."""
    return need._asdict() | {"for_cc": {cc: [anyone, *({"since": s, "until": u, **w} for s, u, w in ranges)]
                                        for cc, (anyone, *ranges) in need.for_cc.items()}}
