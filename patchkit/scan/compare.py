"""``patchkit scan --repo R --tag A --tag B``: the gates of two releases, read from git
objects (never checked out, nothing run), and what changed between them.

A gate of A and a gate of B are the same gate when they have the same file path, kind
and code (a named table: the same name, whatever its values); line numbers do not
count.  Several same gates in one file are paired in line order.  Then each gate of B
either *appeared* (no partner in A), or kept its class, or changed it (``became
aware``: unaware in A, aware in B); each gate of A without a partner *disappeared*.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from patchkit.scan.finding import TABLE, Finding
from patchkit.scan.tree import in_scan, scan_sources
from patchkit.values import Record

if TYPE_CHECKING:
    from patchkit.cc import Key
    from patchkit.git.objects import GitSource

GLOBS = ("*", "**/*")  # every file, once; ``in_scan`` keeps the ones ``scan_tree`` scans


class ReleaseFindings(Record):
    tag: str
    findings: list[Finding]
    classes: list[str]  # the class of each finding
    seen: int  # source files (*.py, and C/C++/CUDA)
    parsed: int


class Changes(Record):
    appeared: list[tuple[Finding, str]]  # (gate of B, its class)
    disappeared: list[tuple[Finding, str]]  # (gate of A, its class in A)
    changed: list[tuple[Finding, Finding, str, str]]  # (in A, in B, class in A, class in B)
    unchanged: int


def releases(source: GitSource, tags: list[str], from_cc: Key, cc: Key, tables: tuple[str, ...],
             classify: Callable[[Finding], str], skipped: list[tuple[str, str, str]]) -> list[ReleaseFindings]:
    """Scan the source files of each tag's tree (the files ``scan_tree`` would scan in a
    checkout).  A file that is the same blob at the same path in both is scanned once.
    ``skipped``: gets (tag, path, reason) of each file that cannot be read or parsed."""
    source.releases(tags)  # BadInput for a tag the repository does not have
    files = {tag: [(f.path, f.blob) for f in source.files(tag, GLOBS) if in_scan(f.path)] for tag in tags}
    todo = list(dict.fromkeys(pb for tag in tags for pb in files[tag]))
    data = source.read_many(list(dict.fromkeys(blob for _, blob in todo)))
    results = dict(zip(todo, scan_sources([(path, data[blob]) for path, blob in todo], from_cc, cc, tables), strict=True))
    out = []
    for tag in tags:
        skipped += [(tag, pb[0], why) for pb in files[tag] if (why := results[pb][2]) is not None]
        findings = sorted((f for pb in files[tag] for f in results[pb][0]), key=lambda f: (f.path, f.line))
        parsed = sum(results[pb][1] for pb in files[tag])
        out.append(ReleaseFindings(tag, findings, [classify(f) for f in findings], len(files[tag]), parsed))
    return out


def key(f: Finding) -> tuple[str, ...]:
    """What makes two findings of two releases the same gate."""
    return (f.path, f.kind, f.name) if f.kind is TABLE and f.name else (f.path, f.kind, f.snippet)


def compare(before: ReleaseFindings, after: ReleaseFindings) -> Changes:
    """What changed from ``before`` to ``after``; each list in path and line order."""
    old: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, f in enumerate(before.findings):
        old[key(f)].append(i)
    taken: set[int] = set()
    appeared: list[tuple[Finding, str]] = []
    changed: list[tuple[Finding, Finding, str, str]] = []
    unchanged = 0
    for f, cls in zip(after.findings, after.classes, strict=True):
        partners = old.get(key(f))
        if not partners:
            appeared.append((f, cls))
            continue
        i = partners.pop(0)
        taken.add(i)
        if before.classes[i] == cls:
            unchanged += 1
        else:
            changed.append((before.findings[i], f, before.classes[i], cls))
    disappeared = [(f, c) for i, (f, c) in enumerate(zip(before.findings, before.classes, strict=True)) if i not in taken]
    return Changes(appeared, disappeared, changed, unchanged)
