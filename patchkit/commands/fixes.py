"""``patchkit fixes``: every fix, its rules, and the releases its shipped patches cover.

Read only: the fixes come from their data files (``patchkit.fixes``), the releases from
the manifests of the shipped series (``patches/<version>/manifest.json`` for SGLang,
``patches/<project>/<version>/manifest.json`` for the others).  A manifest that cannot
be read is a BadInput, as everywhere else.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.data import shipped
from patchkit.fixes.load import Fix
from patchkit.fixes.registry import FIXES, PROJECTS, Project
from patchkit.patch.manifest import Manifest, read_manifest
from patchkit.report import Report
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from patchkit.versions import is_version, version_key


def manifests(root: Path, project: Project) -> dict[str, Manifest]:
    """version -> manifest of each shipped release of ``project``, in version order."""
    folder = root / project.patches if project.patches else root
    if not folder.is_dir():
        return {}
    versions = sorted(
        (p.name for p in folder.iterdir() if is_version(p.name) and (p / "manifest.json").is_file()), key=version_key
    )
    return {v: read_manifest(folder / v / "manifest.json") for v in versions}


def ranges(chosen: list[str], shipped_versions: list[str]) -> list[str]:
    """``chosen`` as runs of consecutive shipped releases: "0.5.4 - 0.5.23 (37 releases)", "0.5.9"."""
    chosen_set = set(chosen)
    runs: list[list[str]] = []
    previous = None
    for i, version in enumerate(shipped_versions):
        if version not in chosen_set:
            continue
        if runs and previous == i - 1:
            runs[-1].append(version)
        else:
            runs.append([version])
        previous = i
    return [run[0] if len(run) == 1 else f"{run[0]} - {run[-1]} ({plural(len(run), 'release')})" for run in runs]


def releases(fix: Fix, project: Project, series: dict[str, Manifest]) -> dict:
    """What the shipped series of ``project`` say of ``fix``, release by release."""
    if not series:
        return {"project": project.name, "label": project.label, "shipped": False}
    by_status: dict[str, list[str]] = {}
    unlisted = []
    for version, manifest in series.items():
        status = next((f.status for f in manifest.fixes if f.fix == fix.name), None)
        if status is None:
            unlisted.append(version)
        else:
            by_status.setdefault(status, []).append(version)
    versions = list(series)
    other = {s: v for s, v in by_status.items() if s not in (PATCHED, ALREADY_UPSTREAM)}
    return {
        "project": project.name,
        "label": project.label,
        "shipped": True,
        "releases": len(versions),
        "patched": by_status.get(PATCHED, []),
        "patched_ranges": ranges(by_status.get(PATCHED, []), versions),
        "already_upstream": by_status.get(ALREADY_UPSTREAM, []),
        "already_upstream_ranges": ranges(by_status.get(ALREADY_UPSTREAM, []), versions),
        "other": {s: {"versions": v, "ranges": ranges(v, versions)} for s, v in sorted(other.items())},
        "not_listed": unlisted,
        "not_listed_ranges": ranges(unlisted, versions),
    }


def _release_lines(r: dict) -> list[str]:
    if not r["shipped"]:
        return [f"    {r['label']}: no shipped series"]
    rows = [(PATCHED, r["patched_ranges"]), (ALREADY_UPSTREAM, r["already_upstream_ranges"])]
    rows += [(status, found["ranges"]) for status, found in r["other"].items()]
    if r["not_listed"]:
        rows.append(("not in the manifest", r["not_listed_ranges"]))
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"    {r['label']} ({plural(r['releases'], 'shipped release')}):"]
    lines += [f"      {name + ':':<{width}}{', '.join(runs) or 'none'}" for name, runs in rows]
    return lines


def _effect_lines(effect) -> list[str]:
    """What the fix does and under which conditions (its ``[effect]``)."""
    from patchkit.fixes.effects import failure_words, needs_words, on_by_itself_words

    lines = [f"  effect:   {effect.changes}", f"  upstream: {effect.upstream}", f"  without it (with {effect.asked_with}):"]
    lines += [f"    {failure_words(f, PROJECTS[f.project].label)}" for f in effect.fails]
    lines += [f"  needs:    {needs_words(n)}" for n in effect.needs]
    lines += [f"  on by itself: {on_by_itself_words(d, PROJECTS[d.project].label, PROJECTS[d.with_project].label)}"
              for d in effect.default_on]
    return lines


def fixes(patches: Path | None = None) -> Report:
    from patchkit.fixes.effects import read_effects

    root = patches or shipped("patches")
    effects = read_effects()
    report = Report()
    series = {name: manifests(root, project) for name, project in PROJECTS.items()}
    documents = []
    for n, fix in enumerate(FIXES.values()):
        if n:
            report.add("")
        report.add(f"{fix.name}: {fix.title}")
        report.add(f"  default: {'on by default' if fix.default else f'opt-in, with --fix {fix.name}'}")
        rules = []
        for i, rule in enumerate(fix.rules, 1):
            label = PROJECTS[rule.project].label
            report.add(f"  rule {i}: {label}, {rule.kind}")
            report.add(f"    files:    {', '.join(rule.files)}")
            report.add(f"    where:    {rule.where()}")
            report.add(f"    evidence: {rule.evidence}")
            if rule.needs:
                report.add(f"    needs:    {rule.needs}")
            rules.append({
                "project": rule.project, "label": label, "kind": rule.kind, "files": list(rule.files),
                "where": rule.where(), "evidence": rule.evidence, "needs": rule.needs,
            })
        effect = effects.get(fix.name)
        if effect is not None:
            report.lines += _effect_lines(effect)
        report.add("  releases:")
        found = []
        for name in dict.fromkeys(r.project for r in fix.rules):
            r = releases(fix, PROJECTS[name], series[name])
            report.lines += _release_lines(r)
            found.append(r)
        documents.append({
            "name": fix.name, "title": fix.title, "rationale": fix.rationale, "default": fix.default,
            "enable": None if fix.default else f"--fix {fix.name}", "rules": rules, "releases": found,
            "effect": effect.to_json() if effect is not None else None,
        })
    report.data = {"command": "fixes", "patches": str(root), "fixes": documents}
    return report
