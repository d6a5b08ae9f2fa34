"""Find the compute-capability gates that treat ``cc`` unlike ``from_cc``.

Pure analysis over source bytes (``scan_source``) and a tree walk (``scan_tree``).
Nothing scanned is imported or run.  A cheap bytes regex picks the candidate files;
only those are parsed with LibCST, and line numbers (``PositionProvider``) are
computed only for files with findings.  Plain isinstance checks, not
``libcst.matchers`` (its import alone costs ~190 ms).

Kinds of finding:

``table``       a dict literal keyed by capability (ints 7..13 or "X.Y" strings with
                major 7..13; two keys or more, among them 9 or 10) that has the
                ``from_cc`` key and lacks the ``cc`` key;
``membership``  ``X in (9, 10)`` / ``not in`` with a tuple, list or set literal of
                capability values;
``equality``    ``X == 10`` / ``X != (10, 0)``;
``comparison``  ``X < 11``, ``(major, minor) >= (10, 0)``, ``9 <= major < 11``;

where X looks like a capability (its code matches ``CAPABILITY``, and not
``NOT_CAPABILITY``).  A gate is reported only when evaluating it with the capability
equal to ``from_cc`` and equal to ``cc`` gives different results.  Capability values
in a gate: ints 7..13 (a major), ints 70..139 (``major * 10 + minor``, as in
``get_device_sm() == 100``), 2-int tuples ``(10, 0)``, "X.Y" strings and X.Y floats.
"""

from __future__ import annotations

import operator
import os
import re
from pathlib import Path
from typing import Any, Callable, NamedTuple, Union

import libcst as cst

from patchkit.rewriter import one_line

CC = Union[int, str]

TABLE = "table"
MEMBERSHIP = "membership"
EQUALITY = "equality"
COMPARISON = "comparison"
KINDS = (TABLE, MEMBERSHIP, EQUALITY, COMPARISON)

SNIPPET_MAX = 160

# What the code of a gate's subject looks like: capability, major, sm_version, sm,
# cc, arch (as a word start: not "search").  Case-insensitive.
CAPABILITY = re.compile(r"capab|major|sm_?ver|(?<![a-z0-9])(?:sm|cc)(?![a-z0-9])|(?<![a-z0-9])arch", re.I)
# ... and what it does not: versions of other things (CUDA, torch, Python, packages),
# counts of SMs.
NOT_CAPABILITY = re.compile(r"count|num_?sm|n_?sms|(?<!sm_)(?<!sm)version|nvcc|driver|python", re.I)

# Cheap pre-filter on raw bytes.  A file is parsed when it may hold a table (a 9 or
# 10 key, int or "X.0") or a capability-ish word plus a capability literal next to
# a comparison operator (either side).
_WORD = re.compile(rb"capab|major|sm_?ver|(?<![a-z0-9])(?:sm|cc)(?![a-z0-9])|(?<![a-z0-9])arch", re.I)
_NUM = rb"(?:[7-9]|1[0-3]|[7-9][0-9]|1[0-3][0-9])\b"
_STR = rb"[\"'](?:[7-9]|1[0-3])\.[0-9]+[\"']"
_OP = rb"(?:==|!=|<|>|\bin\b)"
_GATE = re.compile(
    rb"(?:==|!=|<|>|\bin)[\s(\[{\\]*(?:" + _NUM + rb"|" + _STR + rb")"
    rb"|(?<![\w.])(?:" + _NUM + rb"|" + _STR + rb")(?:\s*,\s*[0-9]+\s*\))?\s*(?:==|!=|<|>)"
)
_KEY = re.compile(rb"(?:^|[{,])[ \t]*(?:9|10|[\"'](?:9|10)\.0[\"'])[ \t]*:", re.M)
del _OP


def candidate(source: bytes) -> bool:
    """Can ``source`` hold a finding at all?  (No false negatives for scan_source.)"""
    if _KEY.search(source):
        return True
    return _GATE.search(source) is not None and _WORD.search(source) is not None


class Finding(NamedTuple):
    path: str  # relative to the scanned root, "/"-separated
    line: int
    kind: str  # one of KINDS
    snippet: str  # the code on one line (comments dropped), shortened to SNIPPET_MAX
    values: tuple  # table: its keys; gates: the capability literals compared with
    name: str | None  # table: the assigned name ("Class.NAME"), else None; gates: the subject's code
    patchable: bool  # a table patchkit's rewriter patches (a registry name at module/class level)

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "snippet": self.snippet,
            "values": [list(v) if isinstance(v, tuple) else v for v in self.values],
            "name": self.name,
            "patchable": self.patchable,
        }


# --- capabilities -------------------------------------------------------------------


class Cap(NamedTuple):
    major: int
    minor: int
    dotted: bool  # given as "X.Y" (compare "X.Y" literals as (X, Y), not by major)


def cap(value: CC) -> Cap:
    """``12`` -> Cap(12, 0, False); ``"12.0"`` -> Cap(12, 0, True).  ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Cap(value, 0, False)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+)(?:\.([0-9]*))?\s*", value)
        if m:
            if m.group(2) is None:
                return Cap(int(m.group(1)), 0, False)
            return Cap(int(m.group(1)), int(m.group(2) or 0), True)
    raise ValueError(f"{value!r} is not a compute capability such as 12 or 12.0")


# A capability literal: (kind, comparable value, value as written)
#   "major" int 7..13, "sm" int 70..139, "tuple" (7..13, 0..9), "str" "X.Y", "float" X.Y
Literal = tuple


def _dotted(text: object) -> tuple[int, int] | None:
    if isinstance(text, str):
        m = re.fullmatch(r"([0-9]+)\.([0-9]+)", text)
        if m and 7 <= int(m.group(1)) <= 13:
            return int(m.group(1)), int(m.group(2))
    return None


def _literal(node: cst.BaseExpression) -> Literal | None:
    if isinstance(node, cst.Integer):
        v = node.evaluated_value
        if 7 <= v <= 13:
            return ("major", v, v)
        if 70 <= v <= 139:
            return ("sm", v, v)
        return None
    if isinstance(node, cst.Tuple):
        els = node.elements
        if (
            len(els) == 2
            and isinstance(els[0], cst.Element)
            and isinstance(els[1], cst.Element)
            and isinstance(els[0].value, cst.Integer)
            and isinstance(els[1].value, cst.Integer)
        ):
            v = (els[0].value.evaluated_value, els[1].value.evaluated_value)
            if 7 <= v[0] <= 13 and 0 <= v[1] <= 9:
                return ("tuple", v, v)
        return None
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        parsed = _dotted(text)
        return ("str", parsed, text) if parsed else None
    if isinstance(node, cst.Float):
        v = node.evaluated_value
        return ("float", v, v) if 7 <= v < 14 else None
    return None


def _container(node: cst.BaseExpression) -> list[Literal] | None:
    if not isinstance(node, (cst.Tuple, cst.List, cst.Set)) or not node.elements:
        return None
    out = []
    for e in node.elements:
        lit = _literal(e.value) if isinstance(e, cst.Element) else None
        if lit is None:
            return None
        out.append(lit)
    return out


def _sides(lit: Literal, c: Cap) -> tuple[Any, Any]:
    """(the capability's value, the literal's value), comparable with each other."""
    kind, v, _ = lit
    if kind == "major":
        return c.major, v
    if kind == "sm":
        return c.major * 10 + c.minor, v
    if kind == "tuple":
        return (c.major, c.minor), v
    if kind == "float":
        return float(f"{c.major}.{c.minor}"), v
    # "X.Y" string: by (major, minor) when the capability was given as "X.Y", else by major
    return ((c.major, c.minor), v) if c.dotted else (c.major, v[0])


_OPS: dict[type, Callable[[Any, Any], bool]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
}
_ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _table_keys(node: cst.Dict) -> list[Literal] | None:
    """The capability keys of a dict literal, or None when it is not a capability table."""
    els = node.elements
    if len(els) < 2:
        return None
    keys = []
    for e in els:
        if not isinstance(e, cst.DictElement):
            return None
        k = e.key
        if isinstance(k, cst.Integer):
            v = k.evaluated_value
            if not 7 <= v <= 13:
                return None
            keys.append(("major", v, v))
        elif isinstance(k, cst.SimpleString):
            parsed = _dotted(k.evaluated_value)
            if parsed is None:
                return None
            keys.append(("str", parsed, k.evaluated_value))
        else:
            return None
    if not any(v in (9, 10, (9, 0), (10, 0)) for _, v, _ in keys):
        return None
    return keys


def _has_key(keys: list[Literal], c: Cap) -> bool:
    for kind, v, _ in keys:
        if kind == "major" and v == c.major:
            return True
        if kind == "str" and (v == (c.major, c.minor) if c.dotted else v[0] == c.major):
            return True
    return False


# --- the visitor --------------------------------------------------------------------

_EMPTY = cst.Module(body=[])


class _Hit(NamedTuple):
    node: cst.CSTNode  # whose line is reported
    kind: str
    snippet: str
    values: tuple
    name: str | None
    patchable: bool


class _Gates(cst.CSTVisitor):
    def __init__(self, from_cap: Cap, to_cap: Cap, from_cc: CC, tables: frozenset[str]) -> None:
        super().__init__()
        self.caps = (from_cap, to_cap)
        self.from_cc = from_cc
        self.tables = tables
        self.stack: list[cst.BaseCompoundStatement] = []
        self.assigned: dict[int, tuple[cst.CSTNode, str, str | None]] = {}
        self.hits: list[_Hit] = []
        self._subjects: dict[int, bool] = {}

    # Compound statements enclosing the current node: a table is patchable only
    # directly in the module or in class bodies (where the rewriter looks).
    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseCompoundStatement):
            self.stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, cst.BaseCompoundStatement):
            self.stack.pop()
        super().on_leave(original_node)

    # -- tables
    def _note_assignment(self, statement: cst.CSTNode, targets: list[cst.BaseExpression], value) -> None:
        if not isinstance(value, cst.Dict):
            return
        for target in targets:
            if isinstance(target, cst.Name):
                classes: list[str] = []
                for s in self.stack:
                    if isinstance(s, cst.ClassDef):
                        classes.append(s.name.value)
                    elif isinstance(s, cst.FunctionDef):
                        classes = []
                qualified = ".".join([*classes, target.value])
                self.assigned[id(value)] = (statement, qualified, target.value)
                return
        for target in targets:
            if isinstance(target, (cst.Attribute, cst.Subscript)):
                self.assigned[id(value)] = (statement, one_line(target), None)
                return

    def visit_Assign(self, node: cst.Assign) -> None:
        self._note_assignment(node, [t.target for t in node.targets], node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._note_assignment(node, [node.target], node.value)

    def visit_Dict(self, node: cst.Dict) -> None:
        keys = _table_keys(node)
        if keys is None:
            return
        from_cap, to_cap = self.caps
        if not _has_key(keys, from_cap) or _has_key(keys, to_cap):
            return
        values = tuple(raw for _, _, raw in keys)
        where = self.assigned.get(id(node))
        if where is None:
            self.hits.append(_Hit(node, TABLE, _short(one_line(node)), values, None, False))
            return
        statement, qualified, bare = where
        patchable = (
            bare is not None
            and bare in self.tables
            and all(isinstance(s, cst.ClassDef) for s in self.stack)
            and self.from_cc in values
        )
        self.hits.append(_Hit(statement, TABLE, _short(one_line(statement)), values, qualified, patchable))

    # -- gates
    def _subject(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Tuple):
            ok = len(node.elements) == 2 and all(
                isinstance(e, cst.Element) and isinstance(e.value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call))
                for e in node.elements
            )
        else:
            ok = isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
        if not ok:
            return False
        code = _EMPTY.code_for_node(node)
        return CAPABILITY.search(code) is not None and NOT_CAPABILITY.search(code) is None

    def visit_Comparison(self, node: cst.Comparison) -> None:
        targets = node.comparisons
        operands = [node.left, *(t.comparator for t in targets)]
        # Cheap exit first: some operand must be a capability literal or container.
        lits: list[Any] = []
        any_literal = False
        for i, operand in enumerate(operands):
            op = targets[i - 1].operator if i else None
            if isinstance(op, (cst.In, cst.NotIn)):
                lit = _container(operand)
            else:
                lit = _literal(operand)
            lits.append(lit)
            any_literal = any_literal or lit is not None
        if not any_literal:
            return
        subjects = [lit is None and self._subject(operand) for lit, operand in zip(lits, operands)]
        if not any(subjects):
            return
        kinds = set()
        values: list[Any] = []
        results = []
        for c in self.caps:
            result = True
            for i, t in enumerate(targets):
                left, right = lits[i], lits[i + 1]
                op = t.operator
                if isinstance(op, (cst.In, cst.NotIn)):
                    if not subjects[i] or right is None:
                        return
                    found = any(a == b for a, b in (_sides(lit, c) for lit in right))
                    outcome = found != isinstance(op, cst.NotIn)
                    kinds.add(MEMBERSHIP)
                    pair = right
                else:
                    fn = _OPS.get(type(op))
                    if fn is None:  # is / is not
                        return
                    if subjects[i] and right is not None:
                        lit, subject_node = right, operands[i]
                    elif subjects[i + 1] and left is not None:
                        lit, subject_node = left, operands[i + 1]
                    else:
                        return
                    if isinstance(subject_node, cst.Tuple) and lit[0] != "tuple":
                        return
                    capv, litv = _sides(lit, c)
                    outcome = fn(capv, litv) if subjects[i] else fn(litv, capv)
                    kinds.add(COMPARISON if isinstance(op, _ORDERING) else EQUALITY)
                    pair = [lit]
                if c is self.caps[0]:
                    values.extend(raw for _, _, raw in pair)
                result = result and outcome
            results.append(result)
        if results[0] == results[1]:
            return
        kind = MEMBERSHIP if MEMBERSHIP in kinds else COMPARISON if COMPARISON in kinds else EQUALITY
        subject = next(o for o, s in zip(operands, subjects) if s)
        self.hits.append(
            _Hit(node, kind, _short(one_line(node)), tuple(values), one_line(subject), False)
        )


def _short(text: str) -> str:
    return text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 3] + "..."


# --- entry points -------------------------------------------------------------------


def _analyse(module: cst.Module, path: str, from_cc: CC, cc: CC, tables) -> list[Finding]:
    from_cap, to_cap = cap(from_cc), cap(cc)
    if from_cap == to_cap:
        return []
    visitor = _Gates(from_cap, to_cap, from_cc, frozenset(tables))
    module.visit(visitor)
    if not visitor.hits:
        return []
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    found = [
        Finding(path, positions[h.node].start.line, h.kind, h.snippet, h.values, h.name, h.patchable)
        for h in visitor.hits
    ]
    found.sort(key=lambda f: f.line)
    return found


def scan_source(source: bytes, path: str, from_cc: CC, cc: CC, tables: tuple[str, ...] = ()) -> list[Finding]:
    """The findings in one file's source.  Pure.

    Raises ValueError for a capability that is neither an int nor "X.Y", and LibCST's
    errors (``ParserSyntaxError``, decoding errors) for source it cannot parse.
    """
    cap(from_cc), cap(cc)
    if not candidate(source):
        return []
    return _analyse(cst.parse_module(source), path, from_cc, cc, tables)


SKIP_DIRS = frozenset({"__pycache__", "node_modules", ".git"})


def python_files(root: Path) -> list[tuple[str, str]]:
    """(absolute path, path relative to root with "/") of every *.py file under root.

    Skips hidden folders, ``__pycache__``, ``node_modules``, and symlinks (folders
    and files: no duplicates, nothing outside the tree).
    """
    out = []
    root_s = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d))
        )
        rel_dir = os.path.relpath(dirpath, root_s)
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            full = os.path.join(dirpath, f)
            if os.path.islink(full):
                continue
            rel = f if rel_dir == "." else f"{rel_dir}/{f}".replace(os.sep, "/")
            out.append((full, rel))
    return out


def _scan_file(full: str, rel: str, from_cc: CC, cc: CC, tables) -> tuple[list[Finding], bool, str | None]:
    """(findings, parsed?, why it was skipped)."""
    try:
        with open(full, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return [], False, f"cannot read: {exc.strerror or exc}"
    if not candidate(data):
        return [], False, None
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        return [], False, f"cannot parse: line {exc.raw_line}: {exc.message}"
    except Exception as exc:  # decoding errors, recursion limits: skip the file, never crash
        return [], False, f"cannot parse: {type(exc).__name__}: {exc}"
    try:
        return _analyse(module, rel, from_cc, cc, tables), True, None
    except RecursionError:
        return [], True, "too deeply nested to analyse"


def _scan_chunk(args) -> list[tuple[list[Finding], bool, str | None]]:
    files, from_cc, cc, tables = args
    return [_scan_file(full, rel, from_cc, cc, tables) for full, rel in files]


def scan_tree(
    root: Path,
    from_cc: CC,
    cc: CC,
    tables: tuple[str, ...] = (),
    skipped: list[tuple[str, str]] | None = None,
    jobs: int | None = None,
) -> tuple[list[Finding], int, int]:
    """(findings sorted by path and line, .py files seen, files parsed).

    Files that cannot be read or parsed are skipped; when ``skipped`` is a list,
    (relative path, reason) pairs are appended to it.  ``jobs``: worker processes
    (default: up to 2, and 1 for small trees).
    """
    cap(from_cc), cap(cc)
    files = python_files(Path(root))
    tables = tuple(tables)
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1) if len(files) >= 400 else 1
    if jobs > 1:
        results = _parallel(files, from_cc, cc, tables, jobs)
    else:
        results = _scan_chunk((files, from_cc, cc, tables))
    findings: list[Finding] = []
    parsed = 0
    for (full, rel), (found, ok, why) in zip(files, results):
        findings += found
        parsed += ok
        if why is not None and skipped is not None:
            skipped.append((rel, why))
    findings.sort(key=lambda f: (f.path, f.line))
    return findings, len(files), parsed


def _parallel(files, from_cc, cc, tables, jobs):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform
        return _scan_chunk((files, from_cc, cc, tables))
    # Interleaved chunks: big files cluster in some folders.
    chunks = [files[i::jobs * 4] for i in range(jobs * 4)]
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        parts = list(pool.map(_scan_chunk, [(c, from_cc, cc, tables) for c in chunks]))
    by_file: dict[str, Any] = {}
    for chunk, part in zip(chunks, parts):
        for (full, _), result in zip(chunk, part):
            by_file[full] = result
    return [by_file[full] for full, _ in files]
