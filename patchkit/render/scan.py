"""What ``patchkit scan`` says (``commands.scan.TreeScan``, ``CompareScan``): the gates by class,
then by file (each a ``report.Place`` under ``report.Heading`` lines), or markdown tables;
the summary and the files skipped; and the --json document, the same whatever the text."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.commands.scan import CompareScan
from patchkit.render.lines import Heading, Place, render
from patchkit.scan.classify import CLASSES, UNAWARE
from patchkit.scan.finding import KINDS
from patchkit.text import plural

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    from typing_extensions import Unpack

    from patchkit.commands.scan import TreeScan
    from patchkit.scan.compare import ReleaseFindings
    from patchkit.scan.finding import Finding

    Row = tuple[Finding, str, str | None]  # a gate shown: its class, the fix that covers it (or None)
    Grouped = tuple[Finding, str, str | None, Unpack[tuple[object, ...]]]  # a row, and what the caller's ``tag`` reads
    _Rows = TypeVar("_Rows", bound=Grouped)


def to_text(r: TreeScan | CompareScan, terminal: bool) -> list[str]:
    """Grouped on a terminal; piped, each gate one ``path:line: class: kind: code`` line."""
    return render(_compare_text(r) if isinstance(r, CompareScan) else _tree_text(r), terminal)


def _tree_text(r: TreeScan) -> list[str]:
    shown = [f for f, _, _ in r.rows]
    files = len({f.path for f in shown})
    per_class = Counter(r.classes)
    if r.unaware_only:
        hidden = len(r.findings) - len(shown)
        summary = (
            f"{plural(len(shown), 'unaware capability gate')} in {plural(files, 'file')}"
            f" ({hidden} aware or covered not shown); scanned {r.seen} files, parsed {r.parsed}"
        )
    else:
        counts = ", ".join(f"{per_class.get(c, 0)} {c}" for c in CLASSES)
        summary = (
            f"{plural(len(r.findings), 'capability gate')} in {plural(files, 'file')}"
            f" ({counts}; {sum(f.patchable for f in shown)} patchable by patchkit); scanned {r.seen} files, parsed {r.parsed}"
        )
    if r.markdown:
        lines = _markdown(r.rows, r.path, r.cc, r.from_cc) + ["", summary]
    else:
        lines = grouped(r.rows, where=lambda f: str(r.path / f.path)) + [summary]
    return lines + [f"skipped {rel}: {why}" for rel, why in r.skipped]


def to_json(r: TreeScan | CompareScan) -> dict[str, object]:
    if isinstance(r, CompareScan):
        return _compare_json(r)
    shown = [f for f, _, _ in r.rows]
    per_class = Counter(r.classes)
    by_kind = Counter(f.kind for f in shown)
    return {
        "command": "scan",
        "path": str(r.path),
        "from_cc": r.from_cc,
        "cc": r.cc,
        "unaware_only": r.unaware_only,
        "files_seen": r.seen,
        "files_parsed": r.parsed,
        "files_with_findings": len({f.path for f in shown}),
        "counts": {kind: by_kind.get(kind, 0) for kind in KINDS},
        "classes": {c: per_class.get(c, 0) for c in CLASSES},
        "patchable": sum(f.patchable for f in shown),
        "findings": [finding_json(f, cls, fix) for f, cls, fix in r.rows],
        "skipped": [{"path": rel, "reason": why} for rel, why in r.skipped],
    }


def finding_json(f: Finding, cls: str, fix: str | None) -> dict[str, object]:
    return dict(f._asdict(), values=[list(v) if isinstance(v, tuple) else v for v in f.values], covered_by=fix, **{"class": cls})


def label(f: Finding, fix: str | None) -> str:
    return f" [covered by {fix}]" if fix else " [patchable by patchkit]" if f.patchable else ""


def grouped(rows: Sequence[_Rows], line: Callable[[Finding], str] = lambda f: str(f.line),
            tag: Callable[[_Rows], str] = lambda row: "", where: Callable[[Finding], str] = lambda f: f.path,
            at: Callable[[Finding], int] = lambda f: f.line, indent: str = "", prefix: str = "") -> list[str]:
    """``rows`` of (finding, class, fix, ...) by class, then by file (``Heading`` lines), each gate a
    ``Place`` (piped: ``where(f):at(f): [prefix]class: kind: code``):

        unaware: 2 gates in 1 file
          pkg/a.py
            3: equality: major == 10
    """
    out: list[str] = []
    for cls in CLASSES:
        mine = [r for r in rows if r[1] == cls]
        if not mine:
            continue
        paths = list(dict.fromkeys(r[0].path for r in mine))
        out.append(Heading(f"{indent}{cls}: {plural(len(mine), 'gate')} in {plural(len(paths), 'file')}"))
        for p in paths:
            out.append(Heading(f"{indent}  {p}"))
            for r in mine:
                f = r[0]
                if f.path == p:
                    text = f"{f.kind}: {f.snippet}{label(f, r[2])}{tag(r)}"
                    out.append(Place(f"{indent}    {line(f)}: {text}", where(f), at(f), f"{prefix}{cls}: {text}"))
    return out


def cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def table(rows: Sequence[Row], classes: bool = False) -> list[str]:
    """A markdown table of (finding, class, fix) rows; ``classes``: with a class column."""
    head = "| file | line | kind | code | values | patchable |" + (" class |" if classes else "")
    lines = [head, "| --- | ---: | --- | --- | --- | --- |" + (" --- |" if classes else "")]
    for f, cls, fix in rows:
        values = ", ".join(repr(v) for v in f.values)
        patch = f"covered by {fix}" if fix else "yes" if f.patchable else ""
        row = f"| {cell(f.path)} | {f.line} | {f.kind} | `{cell(f.snippet)}` | {cell(values)} | {patch} |"
        lines.append(row + (f" {cls} |" if classes else ""))
    return lines


def _markdown(rows: Sequence[Row], path: Path, cc: object, from_cc: object) -> list[str]:
    lines = [f"Capability gates in `{cell(str(path))}` that treat {cc!r} unlike {from_cc!r}:"]
    for cls in CLASSES:
        mine = [r for r in rows if r[1] == cls]
        if mine:
            files = len({r[0].path for r in mine})
            lines += ["", f"### {cls}: {plural(len(mine), 'gate')} in {plural(files, 'file')}", ""]
            lines += table(mine)
    return lines


# --- two releases ------------------------------------------------------------------------


def _compare_text(r: CompareScan) -> list[str]:
    before, after, ch = r.before, r.after, r.change

    def counts(rel: ReleaseFindings) -> str:
        per = Counter(rel.classes)
        return f"{plural(len(rel.findings), 'gate')} ({', '.join(f'{per.get(c, 0)} {c}' for c in CLASSES)})"

    moves = Counter((ca, cb) for _, _, ca, cb in ch.changed)
    became = "".join(f", {n} became {cb} (were {ca})" for (ca, cb), n in sorted(moves.items()))
    summary = (
        f"{before.tag} -> {after.tag}: {len(ch.appeared)} appeared"
        f" ({sum(c == UNAWARE for _, c in ch.appeared)} unaware), {len(ch.disappeared)} disappeared{became},"
        f" {ch.unchanged} unchanged; {before.tag}: {counts(before)}; {after.tag}: {counts(after)}"
    )
    lines: list[str] = []
    sections = [(f"appeared in {after.tag}", r.appeared), (f"disappeared after {before.tag}", r.disappeared)]
    if r.markdown:
        lines.append(f"Capability gates that treat {r.cc!r} unlike {r.from_cc!r}, {before.tag} -> {after.tag}:")
        for title, rows in sections:
            if rows:
                lines += ["", f"### {title}: {plural(len(rows), 'gate')}", ""] + table(rows, classes=True)
        for cb in CLASSES:
            mine = [row for row in r.changed if row[1] == cb]
            if mine:
                lines += ["", f"### became {cb}: {plural(len(mine), 'gate')}", ""]
                lines += table([(b, f"{ca} -> {cb}", fix) for b, _, fix, _, ca, _ in mine], classes=True)
        lines.append("")
    else:
        for (title, rows), (word, rel) in zip(sections, (("appeared", after), ("disappeared", before)), strict=True):
            if rows:
                lines.append(Heading(f"{title}: {plural(len(rows), 'gate')}"))
                lines += grouped(rows, where=partial(_at, rel.tag), indent="  ", prefix=f"{word}: ")
        for cb in CLASSES:
            mine = [row for row in r.changed if row[1] == cb]
            if mine:
                paths = len({row[0].path for row in mine})
                lines.append(Heading(f"became {cb}: {plural(len(mine), 'gate')} in {plural(paths, 'file')}"))
                was = {id(b): a for b, _, _, a, _, _ in mine}
                lines += grouped(
                    [(b, cb, fix, a, ca) for b, _, fix, a, ca, _ in mine],
                    line=partial(_moved, was),
                    tag=lambda row: f" (was {row[4]})",
                    where=lambda f: f"{after.tag}:{f.path}",
                    prefix="became ",
                )[1:]
    lines.append(summary)
    return lines + [f"skipped {tag}:{rel}: {why}" for tag, rel, why in r.skipped]


def _at(tag: str, f: Finding) -> str:
    return f"{tag}:{f.path}"


def _moved(was: dict[int, Finding], f: Finding) -> str:
    """The lines of a gate that became another class: before (``was``: by the id of its finding after), after."""
    return f"{was[id(f)].line} -> {f.line}"


def _compare_json(r: CompareScan) -> dict[str, object]:
    ch = r.change

    def release(rel: ReleaseFindings) -> dict[str, object]:
        per = Counter(rel.classes)
        return {
            "tag": rel.tag,
            "gates": len(rel.findings),
            "classes": {c: per.get(c, 0) for c in CLASSES},
            "files_seen": rel.seen,
            "files_parsed": rel.parsed,
        }

    return {
        "command": "scan",
        "repo": str(r.repo),
        "from_cc": r.from_cc,
        "cc": r.cc,
        "unaware_only": r.unaware_only,
        "before": release(r.before),
        "after": release(r.after),
        "counts": {
            "appeared": len(ch.appeared),
            "appeared_unaware": sum(c == UNAWARE for _, c in ch.appeared),
            "disappeared": len(ch.disappeared),
            "changed": len(ch.changed),
            "unchanged": ch.unchanged,
        },
        "appeared": [finding_json(f, c, fix) for f, c, fix in r.appeared],
        "disappeared": [finding_json(f, c, fix) for f, c, fix in r.disappeared],
        "changed": [
            {"before": finding_json(a, ca, fix_a), "after": finding_json(b, cb, fix)}
            for b, cb, fix, a, ca, fix_a in r.changed
        ],
        "skipped": [{"tag": tag, "path": rel, "reason": why} for tag, rel, why in r.skipped],
    }
