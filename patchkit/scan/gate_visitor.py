"""The LibCST gate visitor: the findings in a module, or in statements cut out of one.

``visit`` walks the statements (``patchkit.rewrite.scope.statements``, every block) and
visits each one's own code with ``_Gates``, which knows the statement's scope.  Plain
isinstance checks, not ``libcst.matchers`` (its import alone costs ~190 ms); positions
(``PositionProvider``) are resolved only for modules with findings.

Platform-flag gates (``patchkit.scan.flag_gates``) are looked for in every ``and``/``or``/
``not`` expression, and in a flag standing alone as a test (``if``, ``elif``, ``while``,
``assert``, a conditional expression's or a comprehension's ``if``), a ``return`` value, a
call's argument or an assigned value; not in the value assigned to a flag, which is its
definition (``_is_sm100_supported = _is_cuda and is_sm100_supported()``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

import libcst as cst

from patchkit.cc import CC, Key
from patchkit.rewrite.capability import Literal, LiteralForm, has_key, literal, sides, table_keys
from patchkit.rewrite.dict_key import key_value
from patchkit.rewrite.dict_key import one_line as _rewriter_one_line
from patchkit.rewrite.scope import MODULE, Scope, assignments, header, statements
from patchkit.scan import flag_gates
from patchkit.scan.classify import literal_names, words
from patchkit.scan.finding import (
    COMPARISON,
    EQUALITY,
    MEMBERSHIP,
    PLATFORM_FLAG,
    TABLE,
    Finding,
    FindingKind,
    Written,
    short,
)
from patchkit.scan.flags import flag
from patchkit.values import Record

# What the code of a gate's subject looks like: capability, major, sm_version, sm,
# cc, cap, arch (at a word start: not "search").  Case-insensitive.
CAPABILITY = re.compile(r"capab|major|(?<![a-z0-9])(?:sm_?ver|(?:sm|cc|cap)(?![a-z0-9])|arch)", re.I)
# ... and what it does not: versions of other things (CUDA, torch, Python,
# packages), numbers of SMs.
NOT_CAPABILITY = re.compile(
    r"count|num_?sms?\b|n_?sms\b|(?<!sm_)(?<!sm)version|nvcc|driver|python|(?<![a-z])dim|size|shape", re.I
)

_EMPTY = cst.Module(body=[])

_OPS: dict[type, Callable[[Any, Any], bool]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
}
_ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _literal_of(node: cst.BaseExpression) -> Literal | None:
    """The capability literal a node is: an int, a float, a string, or a 2-tuple of ints."""
    if isinstance(node, cst.Float):
        return literal(node.evaluated_value)
    if isinstance(node, cst.Tuple):
        els = node.elements
        ints = [e.value for e in els if isinstance(e, cst.Element) and isinstance(e.value, cst.Integer)]
        if len(els) == 2 and len(ints) == 2:
            return literal(tuple(i.evaluated_value for i in ints))
        return None
    return literal(key_value(node))


def _container(node: cst.BaseExpression) -> list[Literal] | None:
    if not isinstance(node, (cst.Tuple, cst.List, cst.Set)) or not node.elements:
        return None
    out = []
    for e in node.elements:
        lit = _literal_of(e.value) if isinstance(e, cst.Element) else None
        if lit is None:
            return None
        out.append(lit)
    return out


class _Hit(Record):
    node: cst.CSTNode  # whose line is reported
    kind: FindingKind
    snippet: str
    values: tuple[Written, ...]
    name: str | None
    patchable: bool
    statement: int  # the id of its statement (of the first ``if`` of an if/elif chain)


class _Gates(cst.CSTVisitor):
    """Collects hits in the statements shown to it, each in its ``scope``."""

    def __init__(self, caps: tuple[CC, CC], from_cc: Key, tables: frozenset[str]) -> None:
        super().__init__()
        self.caps = caps
        self.from_cc = from_cc
        self.tables = tables
        self.scope = MODULE
        self.assigned: dict[int, tuple[cst.CSTNode, str, str]] = {}
        self.hits: list[_Hit] = []
        # What names the cc (``patchkit.scan.classify``): the statements that do, by id.
        # 12.1 after 12.0: only what names 12.1 itself (``literal_names``).
        self.exact = caps[0].major == caps[1].major
        self.words = words(caps[1].major, caps[1].minor if self.exact else None)
        self.key = 0  # the statement being visited
        self.chains: dict[int, int] = {}  # an if/elif chain's clauses -> its first ``if``
        self.naming: set[int] = set()
        self.flag_seen: set[int] = set()  # the nodes of flag expressions already judged

    def statement(self, scope: Scope, statement: cst.CSTNode) -> None:
        """Visit a statement's own code (a compound statement's header) in ``scope``."""
        self.scope = scope
        self.key = self.chains.get(id(statement), id(statement))
        if isinstance(statement, cst.If) and self.key == id(statement):  # the first if of a chain
            clause = statement.orelse
            while isinstance(clause, cst.If):
                self.chains[id(clause)] = self.key
                clause = clause.orelse
        for assignment, targets, value in assignments(statement):
            if isinstance(value, cst.Dict):
                self._note_table(assignment, targets, value)
            if any(flag(flag_gates.atom_name(t) or "") for t in targets):  # a flag's definition
                self.flag_seen.update(id(n) for n in flag_gates.parts(value))
            else:
                self._flags(value)
        if isinstance(statement, (cst.If, cst.While)):
            self._flags(statement.test)
        for part in header(statement):
            part.visit(self)

    # -- tables
    def _note_table(self, assignment: cst.CSTNode, targets: list[cst.BaseExpression], value: cst.Dict) -> None:
        for target in targets:
            if isinstance(target, cst.Name):
                self.assigned[id(value)] = (assignment, self.scope.qualify(target.value), target.value)
                return
        for target in targets:
            if isinstance(target, (cst.Attribute, cst.Subscript)):
                self.assigned[id(value)] = (assignment, one_line(target), "")
                return

    def visit_Dict(self, node: cst.Dict) -> None:
        keys = table_keys([key_value(e.key) if isinstance(e, cst.DictElement) else None for e in node.elements])
        if keys is None:
            return
        from_cap, to_cap = self.caps
        if not has_key(keys, from_cap) or has_key(keys, to_cap):
            return
        values = tuple(lit.written for lit in keys)
        where = self.assigned.get(id(node))
        if where is None:
            self.hits.append(_Hit(node, TABLE, short(one_line(node)), values, None, False, self.key))
            return
        assignment, qualified, bare = where
        patchable = (
            bare in self.tables
            and self.scope.plain
            and self.from_cc in values  # the rewriter matches keys exactly
        )
        self.hits.append(_Hit(assignment, TABLE, short(one_line(assignment)), values, qualified, patchable, self.key))

    # -- what names the cc
    def _names(self, text: str) -> None:
        if self.key not in self.naming and self.words.search(text):
            self.naming.add(self.key)

    def visit_Name(self, node: cst.Name) -> None:
        self._names(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._names(node.value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self._names(node.value)

    # -- platform flags
    def _flags(self, node: cst.BaseExpression) -> None:
        """Judge the flag expression at ``node`` (once)."""
        if id(node) in self.flag_seen:
            return
        self.flag_seen.update(id(n) for n in flag_gates.parts(node))
        for gate in flag_gates.gates(node, self.caps):
            names = flag_gates.flag_names(gate)
            self.hits.append(_Hit(gate, PLATFORM_FLAG, short(one_line(gate)), names, None, False, self.key))

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        self._flags(node)

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not):
            self._flags(node)

    def visit_Assert(self, node: cst.Assert) -> None:
        self._flags(node.test)

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self._flags(node.value)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._flags(node.test)

    def visit_CompIf(self, node: cst.CompIf) -> None:
        self._flags(node.test)

    def visit_Arg(self, node: cst.Arg) -> None:
        self._flags(node.value)

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
        lits: list[Any] = [_literal_of(node.left)]
        for t in targets:
            if isinstance(t.operator, (cst.In, cst.NotIn)):
                lits.append(_container(t.comparator))
            else:
                lits.append(_literal_of(t.comparator))
        if all(lit is None for lit in lits):
            return
        subjects = [lit is None and self._subject(operand) for lit, operand in zip(lits, operands, strict=True)]
        if not any(subjects):
            return
        if self.key not in self.naming:  # a capability compared with the cc's major
            for lit in lits:
                if lit is not None and any(literal_names(x, self.caps[1], self.exact)
                                           for x in (lit if isinstance(lit, list) else [lit])):
                    self.naming.add(self.key)
                    break
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
                    found = any(a == b for a, b in (sides(lit, c) for lit in right))
                    outcome = found != isinstance(op, cst.NotIn)
                    kinds.add(MEMBERSHIP)
                    compared = right
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
                    capv, litv = sides(lit, c)
                    outcome = fn(capv, litv) if subjects[i] else fn(litv, capv)
                    kinds.add(COMPARISON if isinstance(op, _ORDERING) else EQUALITY)
                    compared = [lit]
                if n == 0:
                    values.extend(lit.written for lit in compared)
                result = result and outcome
            results.append(result)
        if results[0] == results[1]:
            return
        kind = MEMBERSHIP if MEMBERSHIP in kinds else COMPARISON if COMPARISON in kinds else EQUALITY
        subject = next(o for o, s in zip(operands, subjects, strict=True) if s)
        self.hits.append(_Hit(node, kind, short(one_line(node)), tuple(values), one_line(subject), False, self.key))


def one_line(node: cst.CSTNode) -> str:
    """``patchkit.rewrite.dict_key.one_line``, except that a 1-tuple keeps its comma: ``x in (10,)``."""
    text = _rewriter_one_line(node)
    if "(" not in text:
        return text
    code = re.sub(r"\s+", " ", re.sub(r"#[^\n]*", "", _EMPTY.code_for_node(node))).strip()
    # Find the 1-tuples in the code (a group with one comma, at its end) and put their
    # comma back in the same group of the rendering (the n-th "(" in both).
    singles: set[int] = set()
    stack: list[list[int]] = []  # [index among "(", commas at this level, comma last? (a bool)]
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
    out: list[str] = []
    opened: list[int] = []
    count = 0
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


def _is_major_of_sm(node: cst.BaseExpression) -> TypeGuard[cst.BinaryOperation]:
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
        return lit.kind == LiteralForm.TUPLE
    if _is_major_of_sm(subject):
        return lit.kind == LiteralForm.MAJOR
    return True


def visit(
    module: cst.Module, path: str, caps: tuple[CC, CC], from_cc: Key, tables: Iterable[str], line0: int = 0,
    scope: Scope = MODULE,
) -> list[Finding]:
    """The findings in ``module`` (its line 1 is line ``line0 + 1`` of ``path``), whose
    statements stand in ``scope``."""
    visitor = _Gates(caps, from_cc, frozenset(tables))
    for where, statement in statements(module, scope, everywhere=True):
        visitor.statement(where, statement)
    if not visitor.hits:
        return []
    from libcst.metadata import MetadataWrapper, PositionProvider

    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return [
        Finding(
            path, line0 + positions[h.node].start.line, h.kind, h.snippet, h.values, h.name, h.patchable,
            h.statement in visitor.naming,
        )
        for h in visitor.hits
    ]
