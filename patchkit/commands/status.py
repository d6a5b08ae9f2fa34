"""``patchkit status``: version, what is applied, each file, bytecode, pending work."""

from __future__ import annotations

from pathlib import Path

from patchkit import bytecode
from patchkit.report import Report
from patchkit.session import Session
from patchkit.digest import sha256


def status(path: Path, patches: Path | None = None, project: str | None = None) -> Report:
    s = Session.open(path, project=project)
    report = Report()
    report.add(f"target:   {s.target.root} ({s.target.kind}; state in {s.store.root})")
    report.add(f"version:  {s.version or 'unknown'} ({s.how})")
    applied = s.applied()
    manifest = _manifest(s, patches)
    if applied:
        report.add(f"applied:  {applied.source}, key {applied.to_cc!r} copied from {applied.from_cc!r} (patchkit {applied.patchkit})")
    else:
        report.add("applied:  nothing recorded by patchkit")
    if manifest:
        report.add(f"shipped:  patches/{s.version}/{manifest['patch']}")
    else:
        report.add(f"shipped:  no patch for version {s.version or 'unknown'}; apply generates one from the checkout")
    recorded = {f.path: f for f in applied.files} if applied else {}
    known = {f["path"]: f for f in manifest["files"]} if manifest else {}
    files = []
    for rel, data in s.current(tuple(recorded)).items():
        if rel not in recorded and rel not in known and not any(n.encode() in data for n in s.project.tables):
            continue
        digest = sha256(data)
        if rel in recorded:
            state = "patched" if digest == recorded[rel].post_sha256 else "modified since apply"
        elif rel in known:
            state = {known[rel]["pre_sha256"]: "original release file", known[rel]["post_sha256"]: "patched (no patchkit record)"}.get(digest, "differs from the release (local edits?)")
        else:
            state = "not recorded"
        pycs = bytecode.check(s.target.path(rel), data)
        stale = sum(p.status == "stale" for p in pycs)
        files.append({"path": rel, "state": state, "bytecode": len(pycs), "stale_bytecode": stale})
        report.add(f"  {s.target.local(rel)}: {state}; {len(pycs)} cached bytecode file{'s' if len(pycs) != 1 else ''}" + (f", {stale} stale" if stale else ""))
    pending = s.store.journal()
    report.add(f"pending:  {'an interrupted ' + pending.get('op', 'transaction') + ' (the next apply or revert finishes it)' if pending else 'none'}")
    report.data = {
        "command": "status",
        "path": str(s.target.root),
        "kind": s.target.kind,
        "state_dir": str(s.store.root),
        "version": s.version,
        "version_from": s.how,
        "applied": applied.to_json() if applied else None,
        "shipped_patch": manifest["patch"] if manifest else None,
        "files": files,
        "pending": pending,
    }
    return report


def _manifest(s: Session, patches: Path | None) -> dict | None:
    shipped = s.shipped(patches)
    return shipped.manifest if shipped else None
