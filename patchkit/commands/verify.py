"""``patchkit verify``: prove the patch is in effect; exit 1 with one line per problem.

Passes only when (a) every table has the new key, (b) equal to the key it copies
(evaluated from source, never imported), (c) no cached bytecode of a patched
module is stale, (d) no interrupted transaction is pending.
"""

from __future__ import annotations

from pathlib import Path

from patchkit import bytecode
from patchkit.errors import OK, PROBLEMS, RewriteError
from patchkit.report import Report
from patchkit.session import Session
from patchkit.digest import sha256


def verify(path: Path, from_cc=None, to_cc=None, project: str | None = None) -> Report:
    s = Session.open(path, project=project)
    report = Report()
    report.add(s.describe())
    problems: list[str] = []
    if s.store.journal() is not None:
        problems.append(
            f"{s.store.journal_file}: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        )
    applied = s.applied()
    if from_cc is None:
        from_cc, to_cc = (applied.from_cc, applied.to_cc) if applied else (s.project.from_cc, s.project.to_cc)
    recorded = {f.path: f.post_sha256 for f in applied.files} if applied and applied.from_cc == from_cc and applied.to_cc == to_cc else {}
    current = s.current(tuple(recorded))
    checked: list[dict] = []
    for rel, data in current.items():
        if rel in recorded and sha256(data) == recorded[rel]:
            checked.append({"path": rel, "how": "post-image hash recorded at apply", "tables": [t["name"] for t in _tables_of(applied, rel)]})
        elif any(name.encode() in data for name in s.project.tables):
            try:
                tables = _evaluate(data, rel, s.project.tables)
            except RewriteError as exc:
                problems.append(str(exc))
                continue
            if not tables:
                continue
            for name, table in tables.items():
                if not isinstance(table, dict):
                    problems.append(f"{rel}: {name} is not a dict")
                elif to_cc not in table:
                    problems.append(f"{rel}: {name} has no key {to_cc!r} (the patch is not applied)")
                elif from_cc in table and table[to_cc] != table[from_cc]:
                    problems.append(f"{rel}: {name}[{to_cc!r}] = {table[to_cc]!r} differs from {name}[{from_cc!r}] = {table[from_cc]!r}")
            checked.append({"path": rel, "how": "tables evaluated from source", "tables": sorted(tables)})
        else:
            continue
        for pyc in bytecode.check(s.target.path(rel), data):
            if pyc.status == "stale":
                problems.append(f"{pyc.path}: stale bytecode ({pyc.reason})")
    if not checked and not problems:
        report.add("no capability tables in this checkout: nothing to verify")
    for entry in checked:
        report.add(f"checked {s.target.local(entry['path'])}: {', '.join(entry['tables'])} ({entry['how']})")
    report.lines += problems
    report.exit_code = PROBLEMS if problems else OK
    report.add(f"verify: {len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else f"verify: ok (key {to_cc!r} = key {from_cc!r} in every table)")
    report.data = {
        "command": "verify",
        "path": str(s.target.root),
        "version": s.version,
        "version_from": s.how,
        "from_cc": from_cc,
        "to_cc": to_cc,
        "ok": not problems,
        "checked": checked,
        "problems": problems,
    }
    return report


def _tables_of(applied, rel: str) -> list[dict]:
    return next((f.tables for f in applied.files if f.path == rel), [])


def _evaluate(data: bytes, rel: str, names: tuple[str, ...]) -> dict:
    from patchkit.evaluate import tables  # LibCST: only when the bytes are not the recorded post-image

    return tables(data, names, rel)
