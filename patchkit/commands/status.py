"""``patchkit status``: version, what is applied, each file, bytecode, pending work."""

from __future__ import annotations

from pathlib import Path

from patchkit.errors import PatchkitError
from patchkit.targets import bytecode
from patchkit.targets.processes import restart_lines
from patchkit.report import Report
from patchkit.types import PATCHED
from patchkit.text import plural
from patchkit.targets.session import Session
from patchkit.digest import sha256


def status(path: Path, patches: Path | None = None, project: str | None = None, install=None) -> Report:
    s = Session.open(path, project=project, install=install)
    report = Report()
    editable = f", editable install of {s.target.install.package}" if s.target.install is not None else ""
    report.add(f"target:   {s.target.root} ({s.target.kind}{editable}; state in {s.store.root})")
    report.add(f"version:  {s.version or 'unknown'} ({s.how})")
    applied, changed = s.state()
    shipped = s.shipped(patches)

    if changed:
        report.add(f"applied:  nothing for this release; {changed}: that state no longer applies (the next apply or revert sets it aside)")
        applied = None
    elif applied:
        report.add(f"applied:  {applied.source}, key {applied.to_cc!r} copied from {applied.from_cc!r} (patchkit {applied.patchkit})")
    else:
        report.add("applied:  nothing recorded by patchkit")
    aside = s.store.set_aside_states()
    if aside:
        report.add(f"set aside: {plural(len(aside), 'state')} of earlier releases in {s.store.aside}")
    if shipped:
        report.add(f"shipped:  {shipped.name}")
    else:
        report.add(f"shipped:  {s.why_no_shipped(patches, s.project.from_cc, s.project.to_cc)}; apply generates the change from the files")
    recorded = {f.path: f for f in applied.files} if applied else {}
    known = {f.path: f for f in shipped.files} if shipped else {}
    files = []
    shown: list[str] = []
    for rel, data in s.current(tuple(recorded)).items():
        if rel not in recorded and rel not in known and not any(n.encode() in data for n in s.project.tables):
            continue
        digest = sha256(data)
        if rel in recorded:
            f = recorded[rel]
            state = {f.post_sha256: PATCHED, f.pre_sha256: "original again (restored outside patchkit)"}.get(digest, "modified since apply")
        elif rel in known:
            state = {known[rel].pre_sha256: "original release file", known[rel].post_sha256: "patched (no patchkit record)"}.get(digest, "differs from the release (local edits?)")
        else:
            state = "not recorded"
        pycs = bytecode.check(s.target.path(rel), data)
        stale = sum(p.status == "stale" for p in pycs)
        files.append({"path": s.target.local(rel), "state": state, "bytecode": len(pycs), "stale_bytecode": stale})
        report.add(f"  {s.target.local(rel)}: {state}; {plural(len(pycs), 'cached bytecode file')}" + (f", {stale} stale" if stale else ""))
        shown.append(rel)
    try:
        builds = s.jit_builds(list(recorded)) if recorded else []
    except PatchkitError as exc:
        builds, _ = [], report.add(f"note: FlashInfer's JIT builds not checked: {exc}")
    for b in builds:
        report.add(f"  {b.path}: stale FlashInfer JIT build ({b.kind}), older than the patched sources; "
                   + ("`patchkit apply` drops it" if b.droppable else b.advice))
    pending = s.store.journal()
    report.add(f"pending:  {'an interrupted ' + pending.get('op', 'transaction') + ' (the next apply or revert finishes it)' if pending else 'none'}")
    running = s.old_processes(shown)
    report.lines += restart_lines(running)
    report.data = s.data(
        "status",
        kind=s.target.kind,
        state_dir=str(s.store.root),
        applied=applied.to_json() if applied else None,
        shipped_patch=shipped.patch if shipped else None,
        files=files,
        pending=pending,
        set_aside_reason=changed,
        set_aside=[str(p.parent) for p in aside],
        restart=[p._asdict() for p in running],
        stale_jit_builds=[str(b.path) for b in builds],
    )
    return report
