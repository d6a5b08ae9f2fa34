"""Decide whether the patch is in effect: pure, bytes and records in, a ``VerifyPlan`` out.

The patch is in effect when (a) every table has the new key, (b) equal to the key it copies
(evaluated from source, never imported), (c) every list and gate of the fixes has what they
add and every upstream change they carry is there, (d) no cached bytecode of a checked file is
stale, (e) no FlashInfer JIT build older than the patched sources would be loaded, and (f) no
interrupted transaction is pending.  The command gathers the files, the records, the bytecode
and the JIT builds (``commands/verify.py``); each problem and note here is one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from patchkit.digest import sha256
from patchkit.errors import PatchkitError, RewriteError
from patchkit.types import Applied


class Checked(NamedTuple):
    """One file verify looked at, how, and the tables, lists or gates it found there."""

    path: str  # as the target names it
    how: str  # "post-image hash recorded at apply", "tables evaluated from source", "rules evaluated from source"
    tables: tuple[str, ...]

    def to_json(self) -> dict:
        return {"path": self.path, "how": self.how, "tables": list(self.tables)}


class VerifyPlan(NamedTuple):
    checked: tuple[Checked, ...]
    notes: tuple[str, ...]
    problems: tuple[str, ...]
    fixes: tuple[str, ...]  # the fixes proved: those asked for, less those the release cannot take whole
    names: tuple[str, ...]  # the dict-key tables checked
    rules: tuple  # the other rules of ``fixes`` (fixes.load.Rule): lists, gates, backports


def plan_verify(
    current: dict[str, bytes],
    ours: Applied | None,
    *,
    names: tuple[str, ...],
    fixes: tuple[str, ...],
    rules: tuple,
    blocked: tuple = (),
    named: tuple[str, ...] | None = None,
    from_cc,
    to_cc,
    version: str | None,
    label: str,
    journal: dict | None = None,
    journal_file: str = "",
    changed: str | None = None,
    stale: dict | None = None,
    jit_builds: tuple = (),
    jit_error: str | None = None,
    read=None,
    root: str = "",
    local: Callable[[str], str] = lambda path: path,
) -> VerifyPlan:
    """What verify finds at a target.

    ``current``: the candidate files as they are; ``ours``: what patchkit applied for this cc
    pair (None: nothing, or another pair); ``names``: the dict-key tables to check; ``rules``:
    the other rules of ``fixes`` for the project (dict-key ones are left out); ``blocked``: the
    fixes the release's manifest says cannot apply whole (``patch.manifest.FixStatus``), a
    problem when ``named`` names them (None: every fix is), else a note; ``journal``: the
    pending transaction's journal, if any (at ``journal_file``); ``changed``: why the recorded
    state belongs to another release; ``stale``: repository path -> its stale cached bytecode
    (``targets.bytecode.Pyc``) for the files holding a table name or recorded at apply;
    ``jit_builds``: FlashInfer's JIT builds older than the patched sources
    (``targets.jit_builds.Build``), or ``jit_error`` why they could not be checked; ``read``
    and ``root``: another file of the release (a predicate's helper); ``local``: how the target
    names a repository path.
    """
    stale = stale or {}
    problems: list[str] = []
    notes: list[str] = []
    if journal is not None:
        problems.append(f"{journal_file}: an interrupted transaction is pending; run `patchkit apply` or `patchkit revert` to finish it")
    if changed:
        notes.append(f"{changed}: that state no longer applies (the next apply or revert sets it aside)")
    recorded = {f.path: f for f in ours.files} if ours else {}
    checked: list[Checked] = []
    for rel, data in current.items():
        where = local(rel)
        if rel in recorded and sha256(data) == recorded[rel].post_sha256:
            checked.append(Checked(where, "post-image hash recorded at apply", tuple(t["name"] for t in recorded[rel].tables)))
        elif any(name.encode() in data for name in names):
            try:
                tables = _localized(lambda data=data, rel=rel: _evaluate(data, rel, names), local)
            except RewriteError as exc:
                problems.append(str(exc))
                continue
            if not tables:
                continue
            added = {_qualified(t) for t in _added_tables(ours, journal, rel)}
            for name, table in tables.items():
                line = _judge(where, name, table, from_cc, to_cc, name in added)
                if line:
                    (notes if line.startswith("note: ") else problems).append(line.removeprefix("note: "))
            checked.append(Checked(where, "tables evaluated from source", tuple(sorted(tables))))
        else:
            continue
        problems += [f"{pyc.path}: stale bytecode ({pyc.reason}); `patchkit apply` drops it" for pyc in stale.get(rel, ())]
    for b in blocked:  # the release's manifest: this fix cannot be applied whole here
        line = f"{b.fix} {b.status} on {label} {version}: {b.reason}"
        if named is None or b.fix in named:
            problems.append(line)
        else:
            notes.append(f"{b.fix} left out: {line}")
    fixes = tuple(f for f in fixes if f not in {b.fix for b in blocked})
    rules = tuple(r for r in rules if r.fix in fixes)
    done = {c.path for c in checked if c.how.startswith("post-image")}
    for rel, data in current.items() if rules else ():
        where = local(rel)
        carried = any(r.kind == "backport" and rel in r.files for r in rules)
        if where in done or not carried and not any(n.encode() in data for r in rules for n in r.names()):
            continue
        try:
            result = _localized(lambda data=data, rel=rel: _rewrite(data, rel, rules, read, root, version), local)
        except RewriteError as exc:
            problems.append(str(exc))
            continue
        if not result.found:
            continue
        for t in result.found:
            if t.patched and t.kind == "backport":
                problems.append(f"{where}: lacks {t.name} ({t.added_key}; the {t.fix} patch is not applied)")
            elif t.patched:
                problems.append(f"{where}: {t.name} lacks {t.added_key!r} (the {t.fix} patch is not applied)")
        checked.append(Checked(where, "rules evaluated from source", tuple(t.name for t in result.found)))
    for r in rules:
        if r.kind == "backport" and not r.landed(version):
            problems += [f"{local(f)}: missing ({r.origin.cite()} changes it)" for f in r.files if f not in current]
    if jit_error is not None:
        notes.append(f"FlashInfer's JIT builds not checked: {jit_error}")
    for b in jit_builds:
        if b.droppable:
            problems.append(f"{b.path}: stale FlashInfer JIT build (built before the patched sources); `patchkit apply` drops it")
        else:
            problems.append(f"{b.library}: {b.kind}, loaded instead of the patched sources; {b.advice}")
    return VerifyPlan(tuple(checked), tuple(notes), tuple(problems), fixes, names, rules)


def _localized(run, local):
    """``run()``; an error that names a repository path names it as the target does."""
    try:
        return run()
    except PatchkitError as exc:
        if exc.path and local(exc.path) != exc.path:
            raise type(exc)(local(exc.path), exc.reason) from None
        raise


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


def _rewrite(data: bytes, rel: str, rules: tuple, read, root: str, version: str | None):
    from patchkit.rewrite.rules import rewrite_file  # only for files without a recorded post-image

    return rewrite_file(data, rel, rules, read, root, version=version)
