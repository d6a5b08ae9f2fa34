"""What may still run a target's old code after its files were written: stale cached bytecode,
FlashInfer's JIT builds older than the files, processes that started before them
(docs/ARCHITECTURE.md, "targets")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import PatchkitError
from patchkit.match import mentions
from patchkit.targets.locate import INSTALLED, Target

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Iterable

    from patchkit.targets.jit_builds import Build, JitCheck
    from patchkit.targets.processes import Process


def stale_bytecode(target: Target, current: dict[str, bytes]) -> dict[str, tuple[Path, ...]]:
    """The stale cached bytecode of every target file that holds a table."""
    from patchkit.targets import bytecode

    stale = {rel: tuple(pyc.path for pyc in bytecode.check(target.path(rel), data) if pyc.status is bytecode.STALE)
             for rel, data in current.items() if mentions(data, target.project.names)}
    return {rel: paths for rel, paths in stale.items() if paths}


def jit_builds(target: Target, version: str | None, rels: Iterable[str]) -> list[Build]:
    """FlashInfer's JIT builds of the modules compiled from the files ``rels`` that are older
    than those files (``jit_builds.Build``): FlashInfer would load them instead of compiling
    what the files hold now.  [] for another project."""
    if not target.project.jit_builds or not version:
        return []
    from patchkit.targets import jit_builds as builds_of

    rels = list(rels)
    modules = builds_of.modules_for(target.local(r) for r in rels)
    if not modules:
        return []
    sites = [target.root] if target.kind is INSTALLED else []
    package = target.root / target.local(target.project.name)
    builds = builds_of.find(version, sites, os.environ, Path.home(), modules, package=package)
    newest = builds_of.newest_mtime(target.root / target.local(r) for r in rels)
    return builds_of.older_than(builds, newest) if newest is not None else []


def drop_jit_builds(target: Target, version: str | None, rels: Iterable[str], dry_run: bool = False) -> JitCheck | None:
    """The stale JIT builds of ``rels``, and what became of each: a build folder below
    FlashInfer's cache is removed (``jit_builds.drop``; with ``dry_run`` it would be), a
    prebuilt one is left alone (``Build.advice`` says what removes it).  None for a project
    that has no JIT builds (all but FlashInfer): nothing to look for, nothing imported."""
    if not target.project.jit_builds:
        return None
    from patchkit.targets import jit_builds as builds_of
    from patchkit.targets.jit_builds import Drop, JitCheck, JitDrop

    try:
        builds = jit_builds(target, version, rels)
    except PatchkitError as exc:
        return JitCheck(error=exc)
    drops = []
    for b in builds:
        if not b.droppable or dry_run:
            drops.append(JitDrop(b.module, b.path, Drop.WOULD_DROP if b.droppable else Drop.PREBUILT, b))
            continue
        try:
            gone = builds_of.drop(b)
        except PatchkitError as exc:
            drops.append(JitDrop(b.module, b.path, Drop.FAILED, b, exc))
            continue
        drops.append(JitDrop(b.module, b.path, Drop.GONE, b) if gone is None else JitDrop(b.module, gone, Drop.DROPPED, b))
    return JitCheck(tuple(drops))


def old_processes(target: Target, rels: Iterable[str]) -> list[Process]:
    """The running processes of the project that started before the files ``rels`` were
    last written: they may still run the old code (``processes.Process``)."""
    from patchkit.targets import processes

    times = []
    for rel in rels:
        try:
            times.append(os.stat(target.path(rel, must_exist=False)).st_mtime_ns)
        except OSError:
            continue
    if not times:
        return []
    project = target.project
    package = target.root / target.local(project.repo_path(project.name))
    return processes.stale_processes(project.name, max(times), processes.Package(package, environment(target)))


def environment(target: Target) -> Path | None:
    """For an installed package, the prefix of the environment it is installed in
    (``V`` for ``V/lib/python3.11/site-packages``) if that prefix has a Python; else None."""
    if target.kind is not INSTALLED:
        return None
    prefix = target.root.parent.parent.parent
    if target.root.parent.name.startswith("python") and any((prefix / "bin").glob("python*")):
        return prefix
    return None
