"""Find the compute-capability gates that treat ``cc`` unlike ``from_cc``.

Pure analysis of source bytes (``scan_source``) and a tree walk (``scan_tree``).
Nothing scanned is imported or run.  Plain isinstance checks, not
``libcst.matchers`` (its import alone costs ~190 ms).

Kinds of finding:

``table``       a dict literal keyed by capability (ints 7..13, or "X.Y" strings with
                major 7..13; two keys or more, among them 9 or 10) that has the
                ``from_cc`` key and lacks the ``cc`` key;
``membership``  ``X in (9, 10)`` / ``not in`` with a tuple, list or set literal of
                capability values;
``equality``    ``X == 10``, ``X != (10, 0)``;
``comparison``  ``X < 11``, ``(major, minor) >= (10, 0)``, ``9 <= major < 11``;

where X looks like a capability: a name, attribute, call, subscript (or a 2-tuple of
those, or ``sm // 10``) whose code matches ``CAPABILITY`` and not ``NOT_CAPABILITY``.  A gate is
reported only when evaluating it with the capability equal to ``from_cc`` and equal
to ``cc`` gives different results.  Capability values in a gate: ints 7..13 (a
major), ints 70..139 (``major * 10 + minor``, as in ``get_device_sm() == 100``),
2-int tuples ``(10, 0)``, "X.Y" strings and X.Y floats.

How it stays fast (LibCST parses ~0.5 MB/s, so parsing every candidate file of an
SGLang checkout would take a minute):

1. a bytes pre-filter marks the offsets that may hold a finding: a ``from_cc`` dict
   key, or a capability literal next to a comparison operator within a few hundred
   bytes of a capability-ish word; plain-int gates are evaluated right there and
   marked only when they differ (``major >= 9`` is never marked);
2. only files with marks are parsed, by the stdlib ``ast`` (C, ~10x faster), and
   only to find the statement around each mark (for a compound statement, its
   header: ``if major == 10:``);
3. LibCST parses just those statements and does the analysis; positions
   (``PositionProvider``) are resolved only for statements with findings.

``whole_file=True`` (``scan_source``) skips 1 and 2 and analyses the whole module
with LibCST: the reference the fast path is tested against.
"""

from __future__ import annotations

import ast
import bisect
import io
import operator
import os
import re
import tokenize
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Union

import libcst as cst

from patchkit.rewrite.dict_key import one_line as _rewriter_one_line

CC = Union[int, str]

TABLE = "table"
MEMBERSHIP = "membership"
EQUALITY = "equality"
COMPARISON = "comparison"
KINDS = (TABLE, MEMBERSHIP, EQUALITY, COMPARISON)

SNIPPET_MAX = 160

# What the code of a gate's subject looks like: capability, major, sm_version, sm,
# cc, cap, arch (at a word start: not "search").  Case-insensitive.
CAPABILITY = re.compile(r"capab|major|(?<![a-z0-9])(?:sm_?ver|(?:sm|cc|cap)(?![a-z0-9])|arch)", re.I)
# ... and what it does not: versions of other things (CUDA, torch, Python,
# packages), numbers of SMs.
NOT_CAPABILITY = re.compile(
    r"count|num_?sms?\b|n_?sms\b|(?<!sm_)(?<!sm)version|nvcc|driver|python|(?<![a-z])dim|size|shape", re.I
)


class Finding(NamedTuple):
    path: str  # relative to the scanned root, "/"-separated
    line: int
    kind: str  # one of KINDS
    snippet: str  # the code on one line (comments dropped), cut at SNIPPET_MAX
    values: tuple  # table: its keys; gates: the capability literals compared with
    name: str | None  # table: the assigned name ("Class.NAME"), None inline; gates: the subject's code
    patchable: bool  # a table patchkit's rewriter patches: a registry name at module or class level

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
    dotted: bool  # given as "X.Y": "X.Y" literals compare as (X, Y), not by major


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


# A capability literal: (kind, comparable value, value as written), kind one of
# "major" (int 7..13), "sm" (int 70..139), "tuple" ((7..13, 0..9)), "str" ("X.Y",
# compared as (X, Y)), "float".
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
    # "X.Y": by (major, minor) when the capability was given as "X.Y", else by major
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


# --- the LibCST analysis ------------------------------------------------------------

_EMPTY = cst.Module(body=[])


class _Hit(NamedTuple):
    node: cst.CSTNode  # whose line is reported
    kind: str
    snippet: str
    values: tuple
    name: str | None
    patchable: bool


class _Gates(cst.CSTVisitor):
    """Collects hits in a module, or in one statement cut out of a module.

    ``classes``: the classes enclosing the statement (innermost last, reset by a
    function); ``plain``: every statement enclosing it is a class (the rewriter only
    looks at module level and in class bodies).
    """

    def __init__(self, caps: tuple[Cap, Cap], from_cc: CC, tables: frozenset[str], classes=(), plain=True) -> None:
        super().__init__()
        self.caps = caps
        self.from_cc = from_cc
        self.tables = tables
        self.outer_classes = tuple(classes)
        self.outer_plain = plain
        self.stack: list[cst.BaseCompoundStatement] = []
        self.assigned: dict[int, tuple[cst.CSTNode, str, str]] = {}
        self.hits: list[_Hit] = []

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
                classes = list(self.outer_classes)
                for s in self.stack:
                    if isinstance(s, cst.ClassDef):
                        classes.append(s.name.value)
                    elif isinstance(s, cst.FunctionDef):
                        classes = []
                self.assigned[id(value)] = (statement, ".".join([*classes, target.value]), target.value)
                return
        for target in targets:
            if isinstance(target, (cst.Attribute, cst.Subscript)):
                self.assigned[id(value)] = (statement, one_line(target), "")
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
            bare in self.tables
            and self.outer_plain
            and all(isinstance(s, cst.ClassDef) for s in self.stack)
            and self.from_cc in values  # the rewriter matches keys exactly
        )
        self.hits.append(_Hit(statement, TABLE, _short(one_line(statement)), values, qualified, patchable))

    # -- gates
    def _subject(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Tuple):
            ok = len(node.elements) == 2 and all(
                isinstance(e, cst.Element) and isinstance(e.value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call))
                for e in node.elements
            )
        elif _is_major_of_sm(node):  # sm // 10: the major of an SM number
            return self._subject(node.left)
        else:
            ok = isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
        if not ok:
            return False
        code = _EMPTY.code_for_node(node)
        return CAPABILITY.search(code) is not None and NOT_CAPABILITY.search(code) is None

    def visit_Comparison(self, node: cst.Comparison) -> None:
        targets = node.comparisons
        operands = [node.left, *(t.comparator for t in targets)]
        # Cheap exit first: some operand must be a capability literal (or container).
        lits: list[Any] = [_literal(node.left)]
        for t in targets:
            if isinstance(t.operator, (cst.In, cst.NotIn)):
                lits.append(_container(t.comparator))
            else:
                lits.append(_literal(t.comparator))
        if all(lit is None for lit in lits):
            return
        subjects = [lit is None and self._subject(operand) for lit, operand in zip(lits, operands)]
        if not any(subjects):
            return
        kinds = set()
        values: list[Any] = []
        results = []
        for n, c in enumerate(self.caps):
            result = True
            for i, t in enumerate(targets):
                left, right = lits[i], lits[i + 1]
                op = t.operator
                if isinstance(op, (cst.In, cst.NotIn)):
                    if not subjects[i] or right is None or not all(_fits(operands[i], lit) for lit in right):
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
                    if not _fits(subject_node, lit):
                        return
                    capv, litv = _sides(lit, c)
                    outcome = fn(capv, litv) if subjects[i] else fn(litv, capv)
                    kinds.add(COMPARISON if isinstance(op, _ORDERING) else EQUALITY)
                    pair = [lit]
                if n == 0:
                    values.extend(raw for _, _, raw in pair)
                result = result and outcome
            results.append(result)
        if results[0] == results[1]:
            return
        kind = MEMBERSHIP if MEMBERSHIP in kinds else COMPARISON if COMPARISON in kinds else EQUALITY
        subject = next(o for o, s in zip(operands, subjects) if s)
        self.hits.append(_Hit(node, kind, _short(one_line(node)), tuple(values), one_line(subject), False))


def one_line(node: cst.CSTNode) -> str:
    """``rewriter.one_line``, except that a 1-tuple keeps its comma: ``x in (10,)``."""
    text = _rewriter_one_line(node)
    if "(" not in text:
        return text
    code = re.sub(r"\s+", " ", re.sub(r"#[^\n]*", "", _EMPTY.code_for_node(node))).strip()
    # Find the 1-tuples in the code (a group with one comma, at its end) and put their
    # comma back in the same group of the rendering (the n-th "(" in both).
    singles = set()
    stack: list[list] = []  # [index among "(", commas at this level, comma last?]
    count = 0
    for ch in code:
        if ch in "([{":
            if stack:
                stack[-1][2] = False
            stack.append([count if ch == "(" else -1, 0, False])
            count += ch == "("
        elif ch in ")]}":
            if stack:
                n, commas, last = stack.pop()
                if n >= 0 and commas == 1 and last:
                    singles.add(n)
        elif stack:
            if ch == ",":
                stack[-1][1] += 1
                stack[-1][2] = True
            elif ch != " ":
                stack[-1][2] = False
    if not singles:
        return text
    out, count, opened = [], 0, []
    for ch in text:
        if ch == "(":
            opened.append(count)
            count += 1
        elif ch in "[{":
            opened.append(-1)
        elif ch in ")]}" and opened:
            if opened.pop() in singles and out and out[-1] != ",":
                out.append(",")
        out.append(ch)
    return "".join(out)


def _is_major_of_sm(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.FloorDivide)
        and isinstance(node.right, cst.Integer)
        and node.right.evaluated_value == 10
    )


def _fits(subject: cst.BaseExpression, lit: Literal) -> bool:
    """Can this subject be compared with this literal?  ``(major, minor)`` only with
    tuples, ``sm // 10`` only with majors; anything else with anything."""
    if isinstance(subject, cst.Tuple):
        return lit[0] == "tuple"
    if _is_major_of_sm(subject):
        return lit[0] == "major"
    return True


def _short(text: str) -> str:
    return text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 3] + "..."


def _visit(module: cst.Module, path: str, caps, from_cc, tables, line0=0, classes=(), plain=True) -> list[Finding]:
    visitor = _Gates(caps, from_cc, tables, classes, plain)
    module.visit(visitor)
    if not visitor.hits:
        return []
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return [
        Finding(path, line0 + positions[h.node].start.line, h.kind, h.snippet, h.values, h.name, h.patchable)
        for h in visitor.hits
    ]


# --- 1. the bytes pre-filter ----------------------------------------------------------

# A superset of where CAPABILITY matches: what follows a word is in the regex, what
# precedes it (no letter or digit before sm, cc, arch) is checked by hand.
_WORDS = [
    (False, re.compile(rb"capab")),
    (False, re.compile(rb"major")),
    (True, re.compile(rb"sm(?:_?ver|(?![a-z0-9]))")),
    (True, re.compile(rb"cc(?![a-z0-9])")),
    (True, re.compile(rb"cap(?![a-z0-9])")),
    (True, re.compile(rb"arch")),
]
_OPLIT = re.compile(rb"(==|!=|<=|>=|<|>)[\s\\(\[]*([\"']?)([0-9]+)(\.[0-9]+|[\s\\]*,[\s\\]*[0-9]+)?")
_REVLIT = re.compile(rb"([0-9]+)(\.[0-9]+[\"']?|[\s\\]*,[\s\\]*[0-9]+[\s\\]*\))?[\s\\)]*(==|!=|<=|>=|<|>)")
_CONTAINER = re.compile(rb"\bin[\s\\]*[(\[{]")
_DIGITS = re.compile(rb"[0-9]+")
_BYTE_OPS = {
    b"==": operator.eq,
    b"!=": operator.ne,
    b"<": operator.lt,
    b"<=": operator.le,
    b">": operator.gt,
    b">=": operator.ge,
}
_BEFORE = 150  # a gate's literal is looked for this far before a capability word
_AFTER = 250  # ... and this far after it


_ALNUM = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_IDENT = _ALNUM | frozenset(b"_.")


def _word_spans(low: bytes) -> list[tuple[int, int]]:
    """Where ``CAPABILITY`` can match in lower-cased source (a superset), sorted."""
    out = []
    for check_before, rx in _WORDS:
        for m in rx.finditer(low):
            s = m.start()
            if check_before and s and low[s - 1] in _ALNUM:
                continue
            out.append(m.span())
    out.sort()
    return out


@lru_cache(maxsize=16)
def _key_patterns(c: Cap) -> tuple[re.Pattern, ...]:
    # int keys (10:) and "X.Y" keys (the quote before "10.0" is checked by hand)
    return re.compile(rb"%d[ \t]*:" % c.major), re.compile(rb"%d\.[0-9]+[\"'][ \t]*:" % c.major)


def _marks(src: bytes, a: Cap, b: Cap) -> list[int]:
    """Offsets in ``src`` near which a finding may be (a superset), sorted."""
    out: set[int] = set()
    for quoted, rx in zip((False, True), _key_patterns(a)):
        for m in rx.finditer(src):
            i = m.start() - 1
            if quoted:
                if i < 0 or src[i] not in b"\"'":
                    continue
                i -= 1
            elif i >= 0 and src[i] in _IDENT:
                continue
            while i >= 0 and src[i] in b" \t":
                i -= 1
            if i < 0 or src[i] in b"{,\n\r":
                out.add(m.start())
    spans = _word_spans(src.lower())
    if not spans:
        return sorted(out)
    lo, hi = min(a.major, b.major), max(a.major, b.major)
    scaled = (a.major * 10 + a.minor, b.major * 10 + b.minor)

    def near(v: int) -> bool:  # could equal, or sit between, the two capabilities
        m = v if 7 <= v <= 13 else v // 10 if 70 <= v <= 139 else 0
        return lo <= m <= hi

    def differs(op: bytes, v: int, reverse: bool) -> bool:  # a plain int, evaluated
        if 7 <= v <= 13:
            x, y = a.major, b.major
        elif 70 <= v <= 139:
            x, y = scaled
        else:
            return False
        fn = _BYTE_OPS[op]
        return fn(v, x) != fn(v, y) if reverse else fn(x, v) != fn(y, v)

    windows: list[list[int]] = []
    for s, e in spans:
        s, e = max(0, s - _BEFORE), e + _AFTER
        if windows and s <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], e)
        else:
            windows.append([s, e])
    for s, e in windows:
        for m in _OPLIT.finditer(src, s, e):
            v = int(m.group(3))
            if near(v) if (m.group(2) or m.group(4)) else differs(m.group(1), v, False):
                out.add(m.start())
        for m in _REVLIT.finditer(src, s, e):
            v = int(m.group(1))
            if near(v) if m.group(2) else differs(m.group(3), v, True):
                out.add(m.start())
        for m in _CONTAINER.finditer(src, s, e):
            if any(near(int(d)) for d in _DIGITS.findall(src, m.end(), m.end() + 400)):
                out.add(m.start())
    return sorted(out)


# --- 2. the statements around the marks -------------------------------------------------

_TRY = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)


class _Piece(NamedTuple):
    text: bytes
    line0: int  # the piece's line 1 is line0 + 1 of the file
    classes: tuple[str, ...]
    plain: bool


def _first_line(s: ast.AST) -> int:
    return min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))])


def _containing(body: list, line: int) -> Iterator[ast.stmt]:
    """The statements of ``body`` spanning ``line`` (several when joined by ``;``)."""
    for s in body:
        if _first_line(s) > line:
            return
        if line <= s.end_lineno:
            yield s


def _pieces(src: bytes, tree: ast.Module, lines: list[int]) -> Iterator[tuple[tuple[int, int], _Piece]]:
    """(key, piece) for the statement, or compound-statement header, around each line.

    A header becomes a statement of its own by a ``pass`` body (``elif`` -> ``if``,
    ``except`` after a ``try: pass``).  The same piece can come more than once.
    """
    starts = [0] + [m.end() for m in re.finditer(rb"\r\n|\r|\n", src)]

    def off(line: int, col: int) -> int:
        return starts[line - 1] + col

    def header(s, classes, plain, prefix=b""):
        first = s.body[0]
        start, end = off(_first_line(s), s.col_offset), off(_first_line(first), first.col_offset)
        text = src[start:end]
        if text.startswith(b"elif"):
            text = text[2:]
        if s.col_offset:  # decorator and def lines all stand at the block's indentation
            text = re.sub(rb"(\r\n|\r|\n)[ \t]{0,%d}" % s.col_offset, rb"\1", text)
        line0 = _first_line(s) - 1 - prefix.count(b"\n")
        return (start, end), _Piece(prefix + text + b"pass\n", line0, classes, plain)

    def descend(body, line, classes, plain):
        for s in _containing(body, line):
            if isinstance(s, _TRY):
                inner = list(s.body)
                for h in s.handlers:
                    if h.lineno <= line <= _first_line(h.body[0]):
                        yield header(h, classes, False, b"try:\n    pass\n")
                    inner += h.body
                yield from descend(inner + s.orelse + s.finalbody, line, classes, False)
            elif isinstance(s, ast.Match):  # (patterns and guards are not looked at)
                yield from descend([x for c in s.cases for x in c.body], line, classes, False)
            elif isinstance(getattr(s, "body", None), list) and s.body:
                first = _first_line(s.body[0])
                if line <= first:  # the header (or a body on its line)
                    yield header(s, classes, plain)
                if line >= first:
                    if isinstance(s, ast.ClassDef):
                        inner_classes, inner_plain = (*classes, s.name), plain
                    elif isinstance(s, _DEF):
                        inner_classes, inner_plain = (), False
                    else:
                        inner_classes, inner_plain = classes, False
                    yield from descend(s.body + getattr(s, "orelse", []), line, inner_classes, inner_plain)
            else:
                start, end = off(s.lineno, s.col_offset), off(s.end_lineno, s.end_col_offset)
                yield (start, end), _Piece(src[start:end] + b"\n", s.lineno - 1, classes, plain)

    for line in lines:
        yield from descend(tree.body, line, (), True)


def _utf8(source: bytes) -> tuple[bytes, bool]:
    """(the source as UTF-8 without a BOM, what ast's offsets count in; re-encoded?)"""
    if source.startswith(b"\xef\xbb\xbf"):
        return source[3:], False
    try:
        source.decode("utf-8")
        return source, False
    except UnicodeDecodeError:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding).encode("utf-8"), True


# --- entry points -------------------------------------------------------------------


def _caps(from_cc: CC, cc: CC) -> tuple[Cap, Cap]:
    a, b = cap(from_cc), cap(cc)
    if a.dotted != b.dotted:  # 10 and "12.0": compare "X.Y" literals the same way for both
        a, b = a._replace(dotted=True), b._replace(dotted=True)
    return a, b


def _scan(source: bytes, path: str, from_cc: CC, cc: CC, tables) -> tuple[list[Finding], bool]:
    """(findings, parsed?).  Raises for source neither ast nor LibCST can parse."""
    caps = _caps(from_cc, cc)
    if caps[0] == caps[1]:
        return [], False
    tables = frozenset(tables)
    marks = _marks(source, *caps)
    if not marks:
        return [], False
    src, reencoded = _utf8(source)
    if src is not source:
        marks = _marks(src, *caps)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: invalid escape sequences
            # (re-encoded: parse the text, or ast would decode it by the old coding cookie)
            tree = ast.parse(src.decode("utf-8") if reencoded else src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None  # newer syntax than this Python's ast: LibCST may still parse it
    if tree is not None:
        starts = [0] + [m.end() for m in re.finditer(rb"\r\n|\r|\n", src)]
        lines = sorted({bisect.bisect_right(starts, m) for m in marks})
        found: list[Finding] = []
        seen = set()
        try:
            for key, piece in _pieces(src, tree, lines):
                if key in seen:
                    continue
                seen.add(key)
                module = cst.parse_module(piece.text)
                found += _visit(module, path, caps, from_cc, tables, piece.line0, piece.classes, piece.plain)
        except (cst.ParserSyntaxError, RecursionError):
            pass  # a statement LibCST reads differently: fall back to the whole file
        else:
            found.sort(key=lambda f: f.line)
            return found, True
    return _fallback(source, path, caps, from_cc, tables), True


def _whole_file(source: bytes, path: str, caps, from_cc: CC, tables) -> list[Finding]:
    found = _visit(cst.parse_module(source), path, caps, from_cc, frozenset(tables))
    found.sort(key=lambda f: f.line)
    return found


# The fast path's way out (source this Python's ast cannot read, a statement LibCST
# reads differently): the tests replace it to prove they never take it.
_fallback = _whole_file


def scan_source(
    source: bytes, path: str, from_cc: CC, cc: CC, tables: tuple[str, ...] = (), *, whole_file: bool = False
) -> list[Finding]:
    """The findings in one file's source.  Pure.

    ``whole_file``: parse and analyse the whole module with LibCST (slow; the
    reference for the fast path).  Raises ValueError for a capability that is neither
    an int nor "X.Y", and LibCST's ``ParserSyntaxError`` (or a decoding error) for
    source it cannot parse.
    """
    if whole_file:
        caps = _caps(from_cc, cc)
        return [] if caps[0] == caps[1] else _whole_file(source, path, caps, from_cc, tables)
    return _scan(source, path, from_cc, cc, tables)[0]


SKIP_DIRS = frozenset({"__pycache__", "node_modules", ".git"})


def python_files(root: Path) -> list[tuple[str, str]]:
    """(path, path relative to root with "/") of every *.py file under root, sorted.

    Skips hidden folders, ``__pycache__``, ``node_modules``, and symlinks (to
    folders and to files: no file twice, nothing outside the tree).
    """
    out = []
    root_s = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d))
        )
        rel_dir = os.path.relpath(dirpath, root_s).replace(os.sep, "/")
        for f in sorted(filenames):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                if not os.path.islink(full):
                    out.append((full, f if rel_dir == "." else f"{rel_dir}/{f}"))
    return out


def _scan_file(full: str, rel: str, from_cc: CC, cc: CC, tables) -> tuple[list[Finding], bool, str | None]:
    """(findings, parsed?, why it was skipped or None)."""
    try:
        with open(full, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return [], False, f"cannot read: {exc.strerror or exc}"
    try:
        found, parsed = _scan(data, rel, from_cc, cc, tables)
    except cst.ParserSyntaxError as exc:
        return [], False, f"cannot parse: line {exc.raw_line}: {exc.message}"
    except Exception as exc:  # decoding errors, recursion limits: skip the file, never crash
        return [], False, f"cannot parse: {type(exc).__name__}: {exc}"
    return found, parsed, None


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
    """(findings sorted by path and line, *.py files seen, files parsed).

    Files that cannot be read or parsed are skipped (not counted as parsed); when
    ``skipped`` is a list, (relative path, reason) pairs are appended to it.
    ``jobs``: worker processes (default: up to 2, and 1 for small trees).
    """
    _caps(from_cc, cc)
    files = python_files(Path(root))
    tables = tuple(tables)
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1) if len(files) >= 500 else 1
    if jobs > 1:
        results = _parallel(files, from_cc, cc, tables, jobs)
    else:
        results = _scan_chunk((files, from_cc, cc, tables))
    findings: list[Finding] = []
    parsed = 0
    for (_, rel), (found, ok, why) in zip(files, results):
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
    except ValueError:  # no fork here: one process
        return _scan_chunk((files, from_cc, cc, tables))
    # Interleaved chunks: big files cluster in some folders.
    n = jobs * 8
    chunks = [files[i::n] for i in range(n)]
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        parts = list(pool.map(_scan_chunk, [(c, from_cc, cc, tables) for c in chunks]))
    out: list[Any] = [None] * len(files)
    for i, part in enumerate(parts):
        out[i::n] = part
    return out
