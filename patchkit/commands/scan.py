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
none, 2 for bad input.  Returns a ``TreeScan`` or a ``CompareScan`` (``render/scan.py`` says
them: grouped text, markdown tables, or the --json document).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import OK, PROBLEMS, BadInput
from patchkit.fixes.registry import SGLANG
from patchkit.rewrite.capability import pair, same
from patchkit.scan.classify import UNAWARE, classify
from patchkit.scan.tree import scan_tree
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.cc import Key
    from patchkit.scan.compare import Changes, ReleaseFindings
    from patchkit.scan.finding import Finding

    Row = tuple[Finding, str, str | None]  # a finding, its class, the fix that covers it or None

FORMATS = ("text", "markdown", "json")


class TreeScan(Value):
    """The gates of one tree: every finding with its class, and the rows shown."""

    path: Path
    cc: Key
    from_cc: Key
    unaware_only: bool
    markdown: bool  # the text is markdown tables
    seen: int  # files looked at
    parsed: int  # files parsed
    findings: tuple[Finding, ...]  # every one
    classes: tuple[str, ...]  # the class of each of ``findings``
    rows: tuple[Row, ...]  # of those shown
    skipped: tuple[tuple[str, str], ...]  # (path, why) of each file that could not be scanned

    @property
    def exit_code(self) -> int:
        return PROBLEMS if self.rows else OK


class CompareScan(Value):
    """What changed between two releases: the gates that appeared, disappeared or changed class."""

    repo: Path
    cc: Key
    from_cc: Key
    unaware_only: bool
    markdown: bool
    before: ReleaseFindings  # tag, findings, classes, files seen and parsed
    after: ReleaseFindings
    change: Changes  # every gate
    appeared: tuple[Row, ...]  # shown
    disappeared: tuple[Row, ...]
    changed: tuple[tuple[Finding, str, str | None, Finding, str, str | None], ...]  # (after, class after, its fix, before, class before, its fix) shown
    skipped: tuple[tuple[str, str, str], ...]  # (tag, path, why)

    @property
    def new_unaware(self) -> int:
        """The gates that appeared unaware, or became unaware."""
        return sum(c == UNAWARE for _, c in self.change.appeared) + sum(cb == UNAWARE for *_, cb in self.change.changed)

    @property
    def exit_code(self) -> int:
        return PROBLEMS if self.new_unaware else OK


def scan(
    path: Path | None,
    cc: Key,
    from_cc: Key = 10,
    fmt: str = "text",
    tables: tuple[str, ...] | None = None,
    unaware_only: bool = False,
    repo: Path | None = None,
    tags: tuple[str, ...] = (),
) -> TreeScan | CompareScan:
    """Scan the tree at ``path``, or compare the releases ``tags`` (two) of ``repo``.
    ``cc``/``from_cc``: int (12) or "X.Y" ("12.0").

    ``tables``: the table names patchkit's rules patch (default: SGLang's registry);
    a table finding is ``patchable`` when its assigned name is one of them.
    ``fmt``: how the text reads (markdown tables, or grouped lines for text and json alike).
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
        raise BadInput(None, f"--to-cc {cc!r} and --from-cc {from_cc!r} are the same capability")
    tables = SGLANG.tables if tables is None else tuple(tables)
    if repo is not None:
        return _compare(Path(repo), tuple(tags), cc, from_cc, fmt == "markdown", tables, unaware_only)
    path = Path("." if path is None else path)
    if not path.is_dir():
        raise BadInput(str(path), "no such directory")
    skipped: list[tuple[str, str]] = []
    findings, seen, parsed = scan_tree(path, from_cc, cc, tables, skipped=skipped)
    source, target = pair(from_cc, cc)
    fixes = [covered_by(f) for f in findings]
    classes = [classify(f, target, fix, source.major == target.major) for f, fix in zip(findings, fixes, strict=True)]
    rows = [r for r in zip(findings, classes, fixes, strict=True) if not unaware_only or r[1] == UNAWARE]
    return TreeScan(path, cc, from_cc, unaware_only, fmt == "markdown", seen, parsed, tuple(findings), tuple(classes),
                    tuple(rows), tuple(skipped))


def covered_by(f: Finding) -> str | None:
    """The fix whose rule patches this finding: a table of a dict-key rule, or a gate in a
    rule's file that names what the rule looks for (paths as the repository or the
    installed package has them)."""
    from patchkit.fixes.kinds import DictKeyRule
    from patchkit.fixes.registry import FIXES, PROJECTS
    from patchkit.rewrite.rules import matches

    for fix in FIXES.values():
        for rule in fix.rules:
            if isinstance(rule, DictKeyRule):
                if f.patchable and f.name and f.name.rsplit(".", 1)[-1] in rule.tables:
                    return fix.name
                continue
            root = PROJECTS[rule.project].source_root
            globs = [g for pattern in rule.files for g in (pattern, pattern[len(root) + 1:] if root else pattern)]
            if any(matches(f.path, g) for g in globs) and any(n in f.snippet for n in rule.names()):
                return fix.name
    return None


def _compare(repo: Path, tags: tuple[str, ...], cc: Key, from_cc: Key, markdown: bool, tables: tuple[str, ...],
             unaware_only: bool) -> CompareScan:
    from patchkit.git.objects import GitSource
    from patchkit.scan.compare import compare, releases

    source, target = pair(from_cc, cc)
    skipped: list[tuple[str, str, str]] = []
    before, after = releases(
        GitSource(repo), list(tags), from_cc, cc, tables,
        lambda f: classify(f, target, covered_by(f), source.major == target.major), skipped
    )
    ch = compare(before, after)
    appeared = [(f, c, covered_by(f)) for f, c in ch.appeared if not unaware_only or c == UNAWARE]
    disappeared = [] if unaware_only else [(f, c, covered_by(f)) for f, c in ch.disappeared]
    changed = [(b, cb, covered_by(b), a, ca, covered_by(a)) for a, b, ca, cb in ch.changed if not unaware_only or cb == UNAWARE]
    return CompareScan(repo, cc, from_cc, unaware_only, markdown, before, after, ch, tuple(appeared), tuple(disappeared),
                       tuple(changed), tuple(skipped))
