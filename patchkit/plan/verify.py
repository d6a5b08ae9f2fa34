"""Decide whether the patch is in effect: pure, bytes and records in, a ``VerifyPlan`` out.

The patch is in effect when (a) every table has the new key, (b) equal to the key it copies
(evaluated from source, never imported), (c) every list and gate of the fixes has what they
add and every upstream change they carry is there, (d) no cached bytecode of a checked file is
stale, (e) no FlashInfer JIT build older than the patched sources would be loaded, and (f) no
interrupted transaction is pending.  The command gathers the files, the records, the bytecode
and the JIT builds (``commands/verify.py``); each problem and note here is one reason
(``plan.reasons``), which ``render/verify.py`` says in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.digest import sha256
from patchkit.errors import RewriteError, localized
from patchkit.fixes.kinds import BackportRule
from patchkit.match import mentions
from patchkit.plan.reasons import (
    Blocked,
    FileMissing,
    JitNotChecked,
    KeyDiffers,
    KeyNotAdded,
    NoKey,
    NoLongerApplies,
    NotADict,
    NotApplied,
    PendingJournal,
    ReleaseChanged,
    RewriteFailed,
    StaleBytecode,
    StaleJitBuild,
)
from patchkit.types import Applied
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only
    from patchkit.cc import Key
    from patchkit.fixes.kinds import Rule
    from patchkit.patch.manifest import FixStatus
    from patchkit.plan.plans import Note
    from patchkit.plan.reasons import JitBuild
    from patchkit.rewrite.rules import FileRewrite, Read


if TYPE_CHECKING:  # a type for the annotations only (nothing is checked against it at run time)
    from typing import Protocol

    class StalePyc(Protocol):
        """A stale cached bytecode file as verify says it (``targets.bytecode.Pyc``)."""

        @property
        def path(self) -> Path: ...
        @property
        def reason(self) -> str: ...


class Checked(Value):
    """One file verify looked at, how, and the tables, lists or gates it found there."""

    path: str  # as the target names it
    how: str  # "post-image hash recorded at apply", "tables evaluated from source", "rules evaluated from source"
    tables: tuple[str, ...]


class VerifyPlan(Value):
    checked: tuple[Checked, ...]
    notes: tuple[Note, ...]  # plan.reasons: what does not fail verify
    problems: tuple[Note, ...]  # plan.reasons: what does
    fixes: tuple[str, ...]  # the fixes proved: those asked for, less those the release cannot take whole
    names: tuple[str, ...]  # the dict-key tables checked
    rules: tuple[Rule, ...]  # the other rules of ``fixes`` (fixes.load.Rule): lists, gates, backports


def plan_verify(
    current: dict[str, bytes],
    ours: Applied | None,
    *,
    names: tuple[str, ...],
    fixes: tuple[str, ...],
    rules: tuple[Rule, ...],
    blocked: tuple[FixStatus, ...] = (),
    named: tuple[str, ...] | None = None,
    from_cc: Key,
    to_cc: Key,
    version: str | None,
    label: str,
    journal: Mapping[str, object] | None = None,
    journal_file: str = "",
    changed: ReleaseChanged | None = None,
    stale: Mapping[str, Sequence[StalePyc]] | None = None,
    jit_builds: tuple[JitBuild, ...] = (),
    jit_error: str | None = None,
    read: Read | None = None,
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
    problems: list[Note] = []
    notes: list[Note] = []
    if journal is not None:
        problems.append(PendingJournal(journal_file))
    if changed:
        notes.append(NoLongerApplies(changed))
    recorded = {f.path: f for f in ours.files} if ours else {}
    checked: list[Checked] = []
    for rel, data in current.items():
        where = local(rel)
        if rel in recorded and sha256(data) == recorded[rel].post_sha256:
            names_there = tuple(n for t in recorded[rel].tables if isinstance(t, dict) for n in (t.get("name"),) if isinstance(n, str))
            checked.append(Checked(where, "post-image hash recorded at apply", names_there))
        elif mentions(data, names):
            try:
                with localized(local):
                    tables = _evaluate(data, rel, names)
            except RewriteError as exc:
                problems.append(RewriteFailed(str(exc)))
                continue
            if not tables:
                continue
            added = {n for t in _added_tables(ours, journal, rel) if (n := _qualified(t)) is not None}
            for name, table in tables.items():
                found = _judge(where, name, table, from_cc, to_cc, name in added)
                if found:
                    (notes if isinstance(found, KeyNotAdded) or isinstance(found, KeyDiffers) and not found.ours
                     else problems).append(found)
            checked.append(Checked(where, "tables evaluated from source", tuple(sorted(tables))))
        else:
            continue
        problems += [StaleBytecode(pyc.path, pyc.reason) for pyc in stale.get(rel, ())]
    for b in blocked:  # the release's manifest: this fix cannot be applied whole here
        asked = named is None or b.fix in named
        (problems if asked else notes).append(Blocked(b.fix, b.status, label, version, b.says(), not asked))
    fixes = tuple(f for f in fixes if f not in {b.fix for b in blocked})
    rules = tuple(r for r in rules if r.fix in fixes)
    done = {c.path for c in checked if c.how.startswith("post-image")}
    for rel, data in current.items() if rules else ():
        where = local(rel)
        if where in done or not any(r.wants(rel, data) for r in rules):
            continue
        try:
            with localized(local):
                result = _rewrite(data, rel, rules, read, root, version)
        except RewriteError as exc:
            problems.append(RewriteFailed(str(exc)))
            continue
        if not result.found:
            continue
        problems += [NotApplied(where, t) for t in result.found if t.patched]
        checked.append(Checked(where, "rules evaluated from source", tuple(t.name for t in result.found)))
    for r in rules:
        if isinstance(r, BackportRule) and r.covers(version) and not r.landed(version):
            cite = r.origin.cite() if r.origin is not None else "the upstream change"  # a rule made without its origin
            problems += [FileMissing(local(f), cite) for f in r.missing_from(current)]
    if jit_error is not None:
        notes.append(JitNotChecked(jit_error))
    problems += [StaleJitBuild(b) for b in jit_builds]
    return VerifyPlan(tuple(checked), tuple(notes), tuple(problems), fixes, names, rules)


def _judge(path: str, name: str, table: object, from_cc: Key, to_cc: Key,
           ours: bool) -> NotADict | NoKey | KeyNotAdded | KeyDiffers | None:
    """What is wrong with one table (a note for a key patchkit did not add), or None when all is well."""
    if not isinstance(table, dict):
        return NotADict(path, name)
    if to_cc not in table:
        return NoKey(path, name, to_cc)
    if from_cc not in table or table[to_cc] == table[from_cc]:
        return None if ours else KeyNotAdded(path, name, to_cc, from_cc)
    return KeyDiffers(path, name, to_cc, table[to_cc], from_cc, table[from_cc], ours)


def _added_tables(ours: Applied | None, journal: Mapping[str, object] | None, rel: str) -> list[dict[str, object]]:
    """The tables patchkit added to ``rel``: recorded at apply, or by an apply still pending."""
    pending = journal.get("applied") if journal else None
    files = list(ours.files) if ours else []
    if isinstance(pending, dict):
        try:
            files += Applied.from_json(pending).files
        except (KeyError, TypeError):
            pass
    return [t for f in files if f.path == rel for t in f.tables if isinstance(t, dict)]


def _qualified(table: dict[str, object]) -> str | None:
    """A recorded table's name as the evaluator spells it ("Class.NAME" in a class body); None for a
    record without a name or scope as text (a corrupt or edited state.json)."""
    name, scope = table.get("name"), table.get("scope", "module")
    if not isinstance(name, str) or not isinstance(scope, str):
        return None
    return name if scope == "module" else f"{scope.removeprefix('class ')}.{name}"


def _evaluate(data: bytes, rel: str, names: tuple[str, ...]) -> dict[str, object]:
    from patchkit.rewrite.evaluate import tables  # LibCST: only when the bytes are not the recorded post-image

    return tables(data, names, rel)


def _rewrite(data: bytes, rel: str, rules: tuple[Rule, ...], read: Read | None, root: str, version: str | None) -> FileRewrite:
    from patchkit.rewrite.rules import rewrite_file  # only for files without a recorded post-image

    return rewrite_file(data, rel, rules, read, root, version=version)
