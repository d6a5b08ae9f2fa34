"""``patchkit scan``: every capability gate in a source tree that does not know ``--cc``.

Walks PATH's *.py files and lists the dict tables, ``in``/``==``/``<`` gates on the
compute capability that treat ``cc`` (e.g. 12, SM120) unlike ``from_cc`` (10,
SM100); see ``patchkit.scan.finding``.  Nothing scanned is imported or run.  Exit 1 when
there are findings, 0 when none, 2 for a PATH that is not a folder.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from patchkit.errors import OK, PROBLEMS, BadInput
from patchkit.fixes.registry import SGLANG
from patchkit.report import Report
from patchkit.rewrite.capability import same
from patchkit.scan.finding import KINDS
from patchkit.scan.tree import scan_tree
from patchkit.text import plural

FORMATS = ("text", "markdown", "json")


def scan(path: Path, cc, from_cc=10, fmt: str = "text", tables: tuple[str, ...] | None = None) -> Report:
    """Scan the tree at ``path``.  ``cc``/``from_cc``: int (12) or "X.Y" ("12.0").

    ``tables``: the table names patchkit's rules patch (default: SGLang's registry);
    a table finding is ``patchable`` when its assigned name is one of them.
    ``fmt``: the shape of ``report.lines``; ``report.data`` is the same in every format.
    """
    if fmt not in FORMATS:
        raise BadInput(None, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    try:
        one_capability = same(cc, from_cc)
    except ValueError as exc:
        raise BadInput(None, str(exc)) from None
    if one_capability:
        raise BadInput(None, f"--cc {cc!r} and --from-cc {from_cc!r} are the same capability")
    path = Path(path)
    if not path.is_dir():
        raise BadInput(str(path), "no such directory")
    tables = SGLANG.tables if tables is None else tuple(tables)
    skipped: list[tuple[str, str]] = []
    findings, seen, parsed = scan_tree(path, from_cc, cc, tables, skipped=skipped)

    files = len({f.path for f in findings})
    patchable = sum(f.patchable for f in findings)
    by_kind = Counter(f.kind for f in findings)
    summary = (
        f"{plural(len(findings), 'capability gate')} in {plural(files, 'file')}"
        f" ({patchable} patchable by patchkit); scanned {seen} files, parsed {parsed}"
    )
    report = Report()
    if fmt == "markdown":
        report.lines += _markdown(findings, path, cc, from_cc)
        report.add("")
        report.add(summary)
    else:
        for f in findings:
            fix = covered_by(f)
            label = f" [covered by {fix}]" if fix else " [patchable by patchkit]" if f.patchable else ""
            report.add(f"{f.path}:{f.line}: {f.kind}: {f.snippet}{label}")
        report.add(summary)
    for rel, why in skipped:
        report.add(f"skipped {rel}: {why}")
    report.exit_code = PROBLEMS if findings else OK
    report.data = {
        "command": "scan",
        "path": str(path),
        "from_cc": from_cc,
        "cc": cc,
        "files_seen": seen,
        "files_parsed": parsed,
        "files_with_findings": files,
        "counts": {kind: by_kind.get(kind, 0) for kind in KINDS},
        "patchable": patchable,
        "findings": [dict(f.to_json(), covered_by=covered_by(f)) for f in findings],
        "skipped": [{"path": rel, "reason": why} for rel, why in skipped],
    }
    return report


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


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def _markdown(findings, path: Path, cc, from_cc) -> list[str]:
    lines = [
        f"Capability gates in `{_cell(str(path))}` that treat {cc!r} unlike {from_cc!r}:",
        "",
        "| file | line | kind | code | values | patchable |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]
    for f in findings:
        values = ", ".join(repr(v) for v in f.values)
        lines.append(
            f"| {_cell(f.path)} | {f.line} | {f.kind} | `{_cell(f.snippet)}` | {_cell(values)} | {'yes' if f.patchable else ''} |"
        )
    return lines
