"""``patchkit verify``: prove the patch is in effect; exit 1 with one line per problem.

Passes only when (a) every table has the new key, (b) equal to the key it copies
(evaluated from source, never imported), (c) no cached bytecode of a patched
module is stale, (d) no interrupted transaction is pending.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.targets import bytecode
from patchkit.errors import OK, PROBLEMS, PatchkitError, RewriteError
from patchkit.report import Auto, AutoTarget, Report, Where
from patchkit.text import plural
from patchkit.targets.session import Session
from patchkit.fixes.registry import FIXES, default_fixes, rules_for
from patchkit.types import Applied
from patchkit.digest import sha256


def verify(
    path: Path, from_cc=None, to_cc=None, project: str | None = None, fixes: tuple[str, ...] | None = None, install=None,
    named: tuple[str, ...] | None = None,
) -> Report:
    """``fixes``: the fixes whose lists and gates must be in effect too (default: the
    fixes on by default and those recorded at apply).  ``named``: those asked for by name
    (None: all); one the release cannot take whole is a problem when named, else a note."""
    s = Session.open(path, project=project, install=install)
    return verify_session(s, from_cc, to_cc, fixes, named)


def verify_auto(found, fixes, named=()) -> Auto:
    """``verify --to-cc auto``: each key this machine's GPUs need at each target (``judge.auto``),
    proved as ``verify`` proves a key given; ``named``: the fixes --fix named."""
    from patchkit.gpus.smi import machine
    from patchkit.judge.auto import for_verify

    m = machine()
    sessions = [Session.open(path, project=name, install=install) for path, name, install in found]
    keys = for_verify(sessions, m, fixes, default_fixes(), named)
    return Auto("verify", m, tuple(
        AutoTarget(Where.of(k.session), k.session.project.name, k.session.project.label, k.held, k.spare,
                   tuple(verify_session(k.session, f, t, k.fixes) for f, t in k.pairs)) for k in keys))


def verify_session(s: Session, from_cc=None, to_cc=None, fixes: tuple[str, ...] | None = None,
                   named: tuple[str, ...] | None = None) -> Report:
    """``verify`` on the session ``s``."""
    report = Report()
    report.add(s.describe())
    problems: list[str] = []
    notes: list[str] = []
    journal = s.store.journal()
    if journal is not None:
        problems.append(
            f"{s.store.journal_file}: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it"
        )
    applied, changed = s.state()
    if changed:
        notes.append(f"{changed}: that state no longer applies (the next apply or revert sets it aside)")
        applied = None
    if from_cc is None:
        from_cc, to_cc = (applied.from_cc, applied.to_cc) if applied else (s.project.from_cc, s.project.to_cc)
    else:
        from_cc, to_cc = s.project.cc_pair(from_cc, to_cc)
    ours = applied if applied and applied.from_cc == from_cc and applied.to_cc == to_cc else None
    recorded = {f.path: f for f in ours.files} if ours else {}
    current = s.current(tuple(recorded))
    # The tables to check: every dict-key table of the project, or those of the fixes asked for.
    names = s.project.tables if fixes is None else tuple(
        dict.fromkeys(n for r in rules_for(s.project.name, fixes) if r.kind == "dict-key" for n in r.tables))
    checked: list[dict] = []
    for rel, data in current.items():
        local = s.target.local(rel)
        if rel in recorded and sha256(data) == recorded[rel].post_sha256:
            checked.append({"path": local, "how": "post-image hash recorded at apply", "tables": [t["name"] for t in recorded[rel].tables]})
        elif any(name.encode() in data for name in names):
            try:
                with s.local_errors():
                    tables = _evaluate(data, rel, names)
            except RewriteError as exc:
                problems.append(str(exc))
                continue
            if not tables:
                continue
            added = {_qualified(t) for t in _added_tables(ours, journal, rel)}
            for name, table in tables.items():
                line = _judge(local, name, table, from_cc, to_cc, name in added)
                if line:
                    (notes if line.startswith("note: ") else problems).append(line.removeprefix("note: "))
            checked.append({"path": local, "how": "tables evaluated from source", "tables": sorted(tables)})
        else:
            continue
        for pyc in bytecode.check(s.target.path(rel), data):
            if pyc.status == "stale":
                problems.append(f"{pyc.path}: stale bytecode ({pyc.reason}); `patchkit apply` drops it")
    if fixes is None:
        recorded_fixes = {t.get("fix") for f in (ours.files if ours else ()) for t in f.tables if isinstance(t, dict)}
        fixes = tuple(n for n in FIXES if FIXES[n].default or n in recorded_fixes)
    for b in s.blocked(None, fixes):  # the release's manifest: this fix cannot be applied whole here
        line = f"{b.fix} {b.status} on {s.project.label} {s.version}: {b.reason}"
        (problems if named is None or b.fix in named else notes).append(line if named is None or b.fix in named
                                                                         else f"{b.fix} left out: {line}")
        fixes = tuple(f for f in fixes if f != b.fix)
    done = {e["path"] for e in checked if e["how"].startswith("post-image")}
    rules = [r for r in rules_for(s.project.name, fixes) if r.kind != "dict-key"]
    for rel, data in current.items() if rules else ():
        local = s.target.local(rel)
        carried = any(r.kind == "backport" and rel in r.files for r in rules)
        if local in done or not carried and not any(n.encode() in data for r in rules for n in r.names()):
            continue
        try:
            with s.local_errors():
                from patchkit.rewrite.rules import rewrite_file  # only for files without a recorded post-image

                result = rewrite_file(data, rel, rules, s.reader(), s.project.source_root, version=s.version)
        except RewriteError as exc:
            problems.append(str(exc))
            continue
        if not result.found:
            continue
        for t in result.found:
            if t.patched and t.kind == "backport":
                problems.append(f"{local}: lacks {t.name} ({t.added_key}; the {t.fix} patch is not applied)")
            elif t.patched:
                problems.append(f"{local}: {t.name} lacks {t.added_key!r} (the {t.fix} patch is not applied)")
        checked.append({"path": local, "how": "rules evaluated from source", "tables": [t.name for t in result.found]})
    for r in rules:
        if r.kind == "backport" and not r.landed(s.version):
            problems += [f"{s.target.local(f)}: missing ({r.origin.cite()} changes it)" for f in r.files if f not in current]
    try:
        stale_builds = s.jit_builds(list(recorded)) if ours else []
    except PatchkitError as exc:
        stale_builds, _ = [], notes.append(f"FlashInfer's JIT builds not checked: {exc}")
    for b in stale_builds:
        if b.droppable:
            problems.append(f"{b.path}: stale FlashInfer JIT build (built before the patched sources); `patchkit apply` drops it")
        else:
            problems.append(f"{b.library}: {b.kind}, loaded instead of the patched sources; {b.advice}")
    for entry in checked:
        report.add(f"checked {entry['path']}: {', '.join(entry['tables'])} ({entry['how']})")
    report.lines += [f"note: {n}" for n in notes]
    report.lines += problems
    report.exit_code = PROBLEMS if problems else OK
    if problems:
        report.add(f"verify: {plural(len(problems), 'problem')}")
    elif not checked:
        report.add(f"verify: ok, nothing to patch (no capability tables in {s.project.label} {s.version or '(version unknown)'})")
    elif not names:
        carried = [r.origin.cite() for r in rules if r.kind == "backport"]
        what = f"{', '.join(carried)} in every file it changes" if carried and len(carried) == len(rules) else \
            f"{to_cc!r} in every list and gate of {', '.join(fixes)}"
        report.add(f"verify: ok ({what})")
    else:
        report.add(f"verify: ok (key {to_cc!r} = key {from_cc!r} in every table patchkit added)" if notes
                   else f"verify: ok (key {to_cc!r} = key {from_cc!r} in every table)")
    report.data = s.data(
        "verify",
        fixes=list(fixes),
        from_cc=from_cc,
        to_cc=to_cc,
        ok=not problems,
        checked=checked,
        notes=notes,
        problems=problems,
    )
    return report


def _judge(path: str, name: str, table, from_cc, to_cc, ours: bool) -> str | None:
    """A problem line, a "note: " line for a key patchkit did not add, or None when all is well."""
    if not isinstance(table, dict):
        return f"{path}: {name} is not a dict"
    if to_cc not in table:
        return f"{path}: {name} has no key {to_cc!r} (the patch is not applied)"
    if from_cc not in table or table[to_cc] == table[from_cc]:
        return None if ours else f"note: {path}: {name} already has key {to_cc!r}, not added by patchkit (equal to key {from_cc!r})"
    differs = f"{name}[{to_cc!r}] = {table[to_cc]!r} differs from {name}[{from_cc!r}] = {table[from_cc]!r}"
    if ours:
        return f"{path}: {differs}"
    return f"note: {path}: {name} has a key {to_cc!r} that patchkit did not add, left as it is: {differs}"


def _added_tables(ours: Applied | None, journal: dict | None, rel: str) -> list[dict]:
    """The tables patchkit added to ``rel``: recorded at apply, or by an apply still pending."""
    pending = journal.get("applied") if journal else None
    files = list(ours.files) if ours else []
    if isinstance(pending, dict):
        try:
            files += Applied.from_json(pending).files
        except (KeyError, TypeError):
            pass
    return [t for f in files if f.path == rel for t in f.tables if isinstance(t, dict)]


def _qualified(table: dict) -> str:
    """A recorded table's name as the evaluator spells it ("Class.NAME" in a class body)."""
    scope = table.get("scope", "module")
    return table["name"] if scope == "module" else f"{scope.removeprefix('class ')}.{table['name']}"


def _evaluate(data: bytes, rel: str, names: tuple[str, ...]) -> dict:
    from patchkit.rewrite.evaluate import tables  # LibCST: only when the bytes are not the recorded post-image

    return tables(data, names, rel)
