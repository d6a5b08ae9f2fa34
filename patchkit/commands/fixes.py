"""``patchkit fixes``: every fix, its rules, and the releases its shipped patches cover.

Read only: the fixes come from their data files (``patchkit.fixes``), the releases from
the manifests of the shipped series (``patches/<version>/manifest.json`` for SGLang,
``patches/<project>/<version>/manifest.json`` for the others).  A manifest that cannot
be read is a BadInput, as everywhere else.  Returns a ``FixesResult`` (``render/fixes.py``
says it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from patchkit.data import shipped
from patchkit.errors import OK
from patchkit.fixes.effects import Effect
from patchkit.fixes.load import Fix
from patchkit.fixes.registry import FIXES, PROJECTS, Project
from patchkit.patch.manifest import Manifest, read_manifest
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from patchkit.values import Value
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


class NotShipped(TypedDict):
    """``releases`` of a project with no shipped series."""

    project: str
    label: str
    shipped: Literal[False]


class Versions(TypedDict):
    versions: list[str]
    ranges: list[str]  # ``ranges`` of them


class ShippedReleases(TypedDict):
    """``releases`` of a project with shipped series: the versions of each status, and as ``ranges``."""

    project: str
    label: str
    shipped: Literal[True]
    releases: int
    patched: list[str]
    patched_ranges: list[str]
    already_upstream: list[str]
    already_upstream_ranges: list[str]
    other: dict[str, Versions]  # any other status
    not_listed: list[str]
    not_listed_ranges: list[str]


def releases(fix: Fix, project: Project, series: dict[str, Manifest]) -> NotShipped | ShippedReleases:
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


class FixShipped(Value):
    """One fix, what it does (its ``[effect]``) and the releases its shipped series cover."""

    fix: Fix
    effect: Effect | None
    releases: tuple[NotShipped | ShippedReleases, ...]  # ``releases`` of each project its rules patch


class FixesResult(Value):
    patches: Path  # the folder of series read
    fixes: tuple[FixShipped, ...]
    exit_code: int = OK


def fixes(patches: Path | None = None) -> FixesResult:
    from patchkit.fixes.effects import read_effects

    root = patches or shipped("patches")
    effects = read_effects()
    series = {name: manifests(root, project) for name, project in PROJECTS.items()}
    return FixesResult(root, tuple(
        FixShipped(fix, effects.get(fix.name),
                   tuple(releases(fix, PROJECTS[name], series[name]) for name in dict.fromkeys(r.project for r in fix.rules)))
        for fix in FIXES.values()))
