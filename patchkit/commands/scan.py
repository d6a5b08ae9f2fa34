"""``patchkit scan``: every capability gate in a source tree that does not know ``--cc``.

Walks PATH's *.py and C/C++/CUDA files and lists the dict tables, ``in``/``==``/``<``
gates on the compute capability, platform-flag tests (``get_platform().is_sm100``) and
``#if`` conditions on ``__CUDA_ARCH__`` that treat ``cc`` (e.g. 12, SM120) unlike
``from_cc`` (10, SM100); see ``patchkit.scan.finding``.  Each gate has a class (``patchkit.scan.classify``):
unaware, aware (it names ``cc`` itself) or covered (a fix's rule patches it); the output
is grouped by class, then by file.  ``unaware_only`` shows the unaware gates alone.
Nothing scanned is imported or run.

With ``repo`` and two ``tags`` it compares two releases read from git objects instead
(``patchkit.scan.compare``): the gates that appeared, disappeared or changed class.

Exit 1 when a gate is shown (compare: when a gate appeared, or became, unaware), 0 when
none, 2 for bad input.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from patchkit.errors import OK, PROBLEMS, BadInput
from patchkit.fixes.registry import SGLANG
from patchkit.report import Heading, Place, Report
from patchkit.rewrite.capability import pair, same
from patchkit.scan.classify import CLASSES, UNAWARE, classify
from patchkit.scan.finding import KINDS
from patchkit.scan.tree import scan_tree
from patchkit.text import plural

FORMATS = ("text", "markdown", "json")


def scan(
    path: Path | None,
    cc,
    from_cc=10,
    fmt: str = "text",
    tables: tuple[str, ...] | None = None,
    unaware_only: bool = False,
    repo: Path | None = None,
    tags: tuple[str, ...] = (),
) -> Report:
    """Scan the tree at ``path``, or compare the releases ``tags`` (two) of ``repo``.
    ``cc``/``from_cc``: int (12) or "X.Y" ("12.0").

    ``tables``: the table names patchkit's rules patch (default: SGLang's registry);
    a table finding is ``patchable`` when its assigned name is one of them.
    ``fmt``: the shape of ``report.lines``; ``report.data`` is the same in every format.
    """
    if fmt not in FORMATS:
        raise BadInput(None, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if repo is not None or tags:
        if path is not None:
            raise BadInput(None, "give PATH or --repo with two --tag, not both")
        if repo is None:
            raise BadInput(None, "--tag needs --repo")
        if len(tags) != 2:
            raise BadInput(None, f"--repo needs exactly two --tag (the releases to compare), not {len(tags)}")
    try:
        one_capability = same(cc, from_cc)
    except ValueError as exc:
        raise BadInput(None, str(exc)) from None
    if one_capability:
        raise BadInput(None, f"--cc {cc!r} and --from-cc {from_cc!r} are the same capability")
    tables = SGLANG.tables if tables is None else tuple(tables)
    if repo is not None:
        return _compare(Path(repo), tuple(tags), cc, from_cc, fmt, tables, unaware_only)
    path = Path("." if path is None else path)
    if not path.is_dir():
        raise BadInput(str(path), "no such directory")
    skipped: list[tuple[str, str]] = []
    findings, seen, parsed = scan_tree(path, from_cc, cc, tables, skipped=skipped)
    target = pair(from_cc, cc)[1]
    fixes = [covered_by(f) for f in findings]
    classes = [classify(f, target, fix) for f, fix in zip(findings, fixes)]
    per_class = Counter(classes)
    rows = [r for r in zip(findings, classes, fixes) if not unaware_only or r[1] == UNAWARE]
    shown = [f for f, _, _ in rows]

    files = len({f.path for f in shown})
    patchable = sum(f.patchable for f in shown)
    by_kind = Counter(f.kind for f in shown)
    counts = ", ".join(f"{per_class.get(c, 0)} {c}" for c in CLASSES)
    if unaware_only:
        hidden = len(findings) - len(shown)
        summary = (
            f"{plural(len(shown), 'unaware capability gate')} in {plural(files, 'file')}"
            f" ({hidden} aware or covered not shown); scanned {seen} files, parsed {parsed}"
        )
    else:
        summary = (
            f"{plural(len(findings), 'capability gate')} in {plural(files, 'file')}"
            f" ({counts}; {patchable} patchable by patchkit); scanned {seen} files, parsed {parsed}"
        )
    report = Report()
    if fmt == "markdown":
        report.lines += _markdown(rows, path, cc, from_cc)
        report.add("")
        report.add(summary)
    else:
        report.lines += grouped(rows, where=lambda f: str(path / f.path))
        report.add(summary)
    for rel, why in skipped:
        report.add(f"skipped {rel}: {why}")
    report.exit_code = PROBLEMS if shown else OK
    report.data = {
        "command": "scan",
        "path": str(path),
        "from_cc": from_cc,
        "cc": cc,
        "unaware_only": unaware_only,
        "files_seen": seen,
        "files_parsed": parsed,
        "files_with_findings": files,
        "counts": {kind: by_kind.get(kind, 0) for kind in KINDS},
        "classes": {c: per_class.get(c, 0) for c in CLASSES},
        "patchable": patchable,
        "findings": [finding_json(f, cls, fix) for f, cls, fix in rows],
        "skipped": [{"path": rel, "reason": why} for rel, why in skipped],
    }
    return report


def finding_json(f, cls: str, fix: str | None) -> dict:
    return dict(f.to_json(), covered_by=fix, **{"class": cls})


def label(f, fix: str | None) -> str:
    return f" [covered by {fix}]" if fix else " [patchable by patchkit]" if f.patchable else ""


def grouped(rows, line=lambda f: str(f.line), tag=lambda row: "", where=lambda f: f.path, at=lambda f: f.line,
            indent: str = "", prefix: str = "") -> list[str]:
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


def covered_by(f) -> str | None:
    """The fix whose rule patches this finding: a table of a dict-key rule, or a gate in a
    rule's file that names what the rule looks for (paths as the repository or the
    installed package has them)."""
    from patchkit.fixes.registry import FIXES, PROJECTS
    from patchkit.rewrite.rules import matches

    for fix in FIXES.values():
        for rule in fix.rules:
            if rule.kind == "dict-key":
                if f.patchable and f.name and f.name.rsplit(".", 1)[-1] in rule.tables:
                    return fix.name
                continue
            root = PROJECTS[rule.project].source_root
            globs = [g for pattern in rule.files for g in (pattern, pattern[len(root) + 1:] if root else pattern)]
            if any(matches(f.path, g) for g in globs) and any(n in f.snippet for n in rule.names()):
                return fix.name
    return None


def cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def table(rows, classes: bool = False) -> list[str]:
    """A markdown table of (finding, class, fix) rows; ``classes``: with a class column."""
    head = "| file | line | kind | code | values | patchable |" + (" class |" if classes else "")
    lines = [head, "| --- | ---: | --- | --- | --- | --- |" + (" --- |" if classes else "")]
    for f, cls, fix in rows:
        values = ", ".join(repr(v) for v in f.values)
        patch = f"covered by {fix}" if fix else "yes" if f.patchable else ""
        row = f"| {cell(f.path)} | {f.line} | {f.kind} | `{cell(f.snippet)}` | {cell(values)} | {patch} |"
        lines.append(row + (f" {cls} |" if classes else ""))
    return lines


def _markdown(rows, path: Path, cc, from_cc) -> list[str]:
    lines = [f"Capability gates in `{cell(str(path))}` that treat {cc!r} unlike {from_cc!r}:"]
    for cls in CLASSES:
        mine = [r for r in rows if r[1] == cls]
        if mine:
            files = len({r[0].path for r in mine})
            lines += ["", f"### {cls}: {plural(len(mine), 'gate')} in {plural(files, 'file')}", ""]
            lines += table(mine)
    return lines


# --- two releases ------------------------------------------------------------------------


def _compare(repo: Path, tags: tuple[str, str], cc, from_cc, fmt: str, tables, unaware_only: bool) -> Report:
    from patchkit.git.objects import GitSource
    from patchkit.scan.compare import compare, releases

    target = pair(from_cc, cc)[1]
    skipped: list[tuple[str, str, str]] = []
    before, after = releases(
        GitSource(repo), list(tags), from_cc, cc, tables, lambda f: classify(f, target, covered_by(f)), skipped
    )
    ch = compare(before, after)
    appeared = [(f, c, covered_by(f)) for f, c in ch.appeared if not unaware_only or c == UNAWARE]
    disappeared = [] if unaware_only else [(f, c, covered_by(f)) for f, c in ch.disappeared]
    changed = [(b, cb, covered_by(b), a, ca) for a, b, ca, cb in ch.changed if not unaware_only or cb == UNAWARE]
    new_unaware = sum(c == UNAWARE for _, c in ch.appeared) + sum(cb == UNAWARE for *_, cb in ch.changed)

    def counts(rel) -> str:
        per = Counter(rel.classes)
        return f"{plural(len(rel.findings), 'gate')} ({', '.join(f'{per.get(c, 0)} {c}' for c in CLASSES)})"

    moves = Counter((ca, cb) for _, _, ca, cb in ch.changed)
    became = "".join(f", {n} became {cb} (were {ca})" for (ca, cb), n in sorted(moves.items()))
    summary = (
        f"{before.tag} -> {after.tag}: {len(ch.appeared)} appeared"
        f" ({sum(c == UNAWARE for _, c in ch.appeared)} unaware), {len(ch.disappeared)} disappeared{became},"
        f" {ch.unchanged} unchanged; {before.tag}: {counts(before)}; {after.tag}: {counts(after)}"
    )
    report = Report()
    sections = [
        (f"appeared in {after.tag}", appeared, None),
        (f"disappeared after {before.tag}", disappeared, None),
    ]
    if fmt == "markdown":
        report.add(f"Capability gates that treat {cc!r} unlike {from_cc!r}, {before.tag} -> {after.tag}:")
        for title, rows, _ in sections:
            if rows:
                report.lines += ["", f"### {title}: {plural(len(rows), 'gate')}", ""] + table(rows, classes=True)
        for cb in CLASSES:
            mine = [r for r in changed if r[1] == cb]
            if mine:
                report.lines += ["", f"### became {cb}: {plural(len(mine), 'gate')}", ""]
                report.lines += table([(b, f"{ca} -> {cb}", fix) for b, _, fix, _, ca in mine], classes=True)
        report.add("")
    else:
        for (title, rows, _), (word, rel) in zip(sections, (("appeared", after), ("disappeared", before))):
            if rows:
                report.add(Heading(f"{title}: {plural(len(rows), 'gate')}"))
                report.lines += grouped(rows, where=lambda f, t=rel.tag: f"{t}:{f.path}", indent="  ", prefix=f"{word}: ")
        for cb in CLASSES:
            mine = [r for r in changed if r[1] == cb]
            if mine:
                paths = len({r[0].path for r in mine})
                report.add(Heading(f"became {cb}: {plural(len(mine), 'gate')} in {plural(paths, 'file')}"))
                report.lines += grouped(
                    [(b, cb, fix, a, ca) for b, _, fix, a, ca in mine],
                    line=lambda f, old={id(b): a for b, _, _, a, _ in mine}: f"{old[id(f)].line} -> {f.line}",
                    tag=lambda r: f" (was {r[4]})",
                    where=lambda f: f"{after.tag}:{f.path}",
                    prefix="became ",
                )[1:]
    report.add(summary)
    for tag, rel, why in skipped:
        report.add(f"skipped {tag}:{rel}: {why}")
    report.exit_code = PROBLEMS if new_unaware else OK

    def release(rel) -> dict:
        per = Counter(rel.classes)
        return {
            "tag": rel.tag,
            "gates": len(rel.findings),
            "classes": {c: per.get(c, 0) for c in CLASSES},
            "files_seen": rel.seen,
            "files_parsed": rel.parsed,
        }

    report.data = {
        "command": "scan",
        "repo": str(repo),
        "from_cc": from_cc,
        "cc": cc,
        "unaware_only": unaware_only,
        "before": release(before),
        "after": release(after),
        "counts": {
            "appeared": len(ch.appeared),
            "appeared_unaware": sum(c == UNAWARE for _, c in ch.appeared),
            "disappeared": len(ch.disappeared),
            "changed": len(ch.changed),
            "unchanged": ch.unchanged,
        },
        "appeared": [finding_json(f, c, fix) for f, c, fix in appeared],
        "disappeared": [finding_json(f, c, fix) for f, c, fix in disappeared],
        "changed": [
            {"before": finding_json(a, ca, covered_by(a)), "after": finding_json(b, cb, fix)}
            for b, cb, fix, a, ca in changed
        ],
        "skipped": [{"tag": tag, "path": rel, "reason": why} for tag, rel, why in skipped],
    }
    return report
