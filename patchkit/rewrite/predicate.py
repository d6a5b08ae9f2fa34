"""Add a capability flag to or-expressions of flags: source bytes in, source bytes out.

Pure: no I/O.  The ``predicate`` rewrite, for a flag such as ``_is_sm100_supported`` and
a capability spelling such as ``sm100`` -> ``sm120``:

- every or-expression in a named function that holds the flag gains the new flag right
  after it: ``(_is_sm90_supported or _is_sm100_supported)`` -> ``(... or _is_sm120_supported)``;
- the new flag is defined the way the module defines the flag, on the next line:
  ``_is_sm120_supported = _is_cuda and is_sm120_supported()``;
- the new helper is imported next to the flag's helper: ``is_sm120_supported,`` after
  ``is_sm100_supported,`` in the same ``from ... import`` (nothing to import when the
  definition reaches its helper as an attribute: ``get_platform().is_sm120``).

New names are the old ones with the capability spelling replaced.  Whether the new helper
exists in the release (the module defines it, the object has the attribute) is the
caller's to find out: the result names the helper it imports or reaches (``helper``), and
``rules.py`` refuses the rewrite when the release does not define it.  Every other byte
stays as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

import libcst as cst
from libcst.helpers import ensure_type

from patchkit.match import mentions
from patchkit.rewrite.cut import rewrite_cut
from patchkit.rewrite.dict_key import one_line, parse
from patchkit.rewrite.insert import insert_after, multiline
from patchkit.rewrite.output import LINE_LENGTH, HitJson, render
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import ALREADY_UPSTREAM, PATCHED, Status
from patchkit.values import Record, Value

# What a walk outside the gate's defs never needs to enter.
_LEAVES = (cst.BaseSmallStatement, cst.BaseExpression, cst.Decorator, cst.Parameters)
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class PredicateResult(Value):
    """What happened to one or-expression."""

    function: str  # the def it is in
    flag: str  # _is_sm100_supported
    new_flag: str  # _is_sm120_supported
    status: Status  # PATCHED or ALREADY_UPSTREAM
    expression: str  # the or-expression as it reads now, on one line, comments dropped

    def to_json(self) -> HitJson:
        """The shape every rewrite's findings share (``output.Hit.to_json``)."""
        return {"name": f"{self.flag} in {self.function}()", "scope": f"def {self.function}", "status": self.status,
                "added_key": self.new_flag, "copied_from": self.flag, "value": self.expression}


class PredicateRewrite(Value):
    """The rewritten source, what happened to each or-expression, and the module-level
    lines added for the new flag: its definition, its helper's import (each when missing)."""

    source: bytes
    predicates: tuple[PredicateResult, ...]
    added: tuple[str, ...] = ()  # "_is_sm120_supported = ...", "from sglang.srt.utils import is_sm120_supported"
    helper: Helper | None = None  # the helper the added lines call, which the module does not define

    @property
    def changed(self) -> bool:
        return any(p.status == PATCHED for p in self.predicates)


def _is_or(node: cst.CSTNode) -> TypeGuard[cst.BooleanOperation]:
    return isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or)


def _chain(node: cst.BooleanOperation) -> tuple[list[cst.BaseExpression], list[cst.BaseBooleanOp]]:
    """(operands, operators) of ``a or b or c``: unparenthesized or-operands are flattened."""
    operands: list[cst.BaseExpression] = []
    ops: list[cst.BaseBooleanOp] = []
    for i, side in enumerate((node.left, node.right)):
        if i:
            ops.append(node.operator)
        if _is_or(side) and not side.lpar:
            more, more_ops = _chain(side)
            operands += more
            ops += more_ops
        else:
            operands.append(side)
    return operands, ops


def _insert_flag(root: cst.BooleanOperation, k: int, new_flag: str) -> cst.BooleanOperation:
    """``root`` with ``or <new_flag>`` right after its k-th operand, laid out like the chain:
    on a line of its own when each ``or`` starts a line (black's layout), in place otherwise."""
    operands, ops = _chain(root)
    template = ops[k - 1] if k else ops[k]
    rpar = list(root.rpar)
    gap = ops[k].whitespace_before if k < len(ops) else rpar[0].whitespace_before if rpar else None
    if multiline(gap) and multiline(template.whitespace_before):
        # The flag keeps its trailing comment; the new line starts clean.
        line = template.whitespace_before
        before = cst.ParenthesizedWhitespace(first_line=gap.first_line, indent=line.indent, last_line=line.last_line)
        new_op = template.with_changes(whitespace_before=before)
        gap = gap.with_changes(first_line=cst.TrailingWhitespace())
        if k < len(ops):
            ops[k] = ops[k].with_changes(whitespace_before=gap)
        else:
            rpar[0] = rpar[0].with_changes(whitespace_before=gap)
    else:
        clean = [
            ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[]) if multiline(ws) else ws
            for ws in (template.whitespace_before, template.whitespace_after)
        ]
        new_op = template.with_changes(whitespace_before=clean[0], whitespace_after=clean[1])
    operands.insert(k + 1, cst.Name(new_flag))
    ops.insert(k, new_op)
    node = cst.BooleanOperation(left=operands[0], operator=ops[0], right=operands[1])
    for op, operand in zip(ops[1:], operands[2:], strict=True):
        node = cst.BooleanOperation(left=node, operator=op, right=operand)
    return node.with_changes(lpar=root.lpar, rpar=rpar)


class Helper(Record):
    """The helper the new flag's definition calls, when the module does not have it yet."""

    name: str  # is_sm120_supported
    module: str | None  # imported from, as the file spells it (".utils"); None: reached as an attribute
    reached: str  # as the definition reaches it: "is_sm120_supported", "get_platform().is_sm120"


class _Rename(cst.CSTTransformer):
    """Replace ``old`` by ``new`` in every name; ``renamed`` maps each name changed to its new
    one, ``attributes`` a new name that is an attribute to the attribute's source."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new
        self.renamed: dict[str, str] = {}
        self.attributes: dict[str, str] = {}

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if self.old not in updated_node.value:
            return updated_node
        self.renamed[updated_node.value] = updated_node.value.replace(self.old, self.new)
        return updated_node.with_changes(value=self.renamed[updated_node.value])

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        if updated_node.attr.value != original_node.attr.value:
            self.attributes[updated_node.attr.value] = one_line(updated_node)
        return updated_node


class _Literals(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _LITERALS):
            self.found.append(one_line(node))
            return False
        return True


def _top_level(module: cst.Module) -> Iterator[tuple[int, cst.BaseSmallStatement]]:
    """(body index, small statement) of each module-level simple statement."""
    for i, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                yield i, small


def _assignment(small: cst.BaseSmallStatement) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) of an assignment to one name: ``X = v``, ``X: T = v``."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None and isinstance(small.target, cst.Name):
        return small.target.value, small.value
    return None


def _assigned_name(small: cst.BaseSmallStatement) -> str | None:
    assignment = _assignment(small)
    return None if assignment is None else assignment[0]


def _defines(module: cst.Module, name: str) -> bool:
    """Is ``name`` bound at module level: assigned, imported (not ``as`` another), a def or class?"""
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
            return True
    for _, small in _top_level(module):
        if _assigned_name(small) == name or _imported_at(small, name) is not None:
            return True
    return False


def _imported_at(small: cst.BaseSmallStatement, name: str) -> int | None:
    """The index of ``name`` among the names of a ``from ... import`` (None if it is not there)."""
    if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
        return None
    for j, alias in enumerate(small.names):
        if alias.asname is None and isinstance(alias.name, cst.Name) and alias.name.value == name:
            return j
    return None


def _import_module(small: cst.ImportFrom) -> str:
    dots = "." * len(small.relative)
    return dots + (cst.Module(body=[]).code_for_node(small.module) if small.module is not None else "")


class _Plan:
    """What the module needs for ``new_flag``: its definition (copied from ``flag``'s) and
    its helper (imported next to the flag's helper, or reached as an attribute the same
    way); None for each that the module already has."""

    def __init__(self, module: cst.Module, flag: str, new_flag: str, old: str, new: str, path: str) -> None:
        # (the flag's body index, the new flag's definition that goes after it)
        self.definition: tuple[int, cst.SimpleStatementLine] | None = None
        self.helper: Helper | None = None
        self.import_at: tuple[int, str] | None = None  # (body index, the flag's helper) of the import to join
        if _defines(module, new_flag):
            return
        found = [(i, s, a[1]) for i, s in _top_level(module) if (a := _assignment(s)) is not None and a[0] == flag]
        if not found:
            raise no_fit(path, Misfit.FLAG_NOT_AT_MODULE_LEVEL, flag=flag, new_flag=new_flag)
        flag_at, small, value = found[-1]
        literals = _Literals()
        value.visit(literals)
        if literals.found:
            raise no_fit(path, Misfit.DEFINITION_HOLDS_LITERALS, flag=flag, literals=list(literals.found))
        rename = _Rename(old, new)
        renamed = small.visit(rename)  # a node of small's own type: _Rename removes nothing
        definition = ensure_type(renamed, cst.BaseSmallStatement).with_changes(  # type: ignore[type-abstract]  # ensure_type is an isinstance check, which takes an abstract class (mypy issue 4717)
            semicolon=cst.MaybeSentinel.DEFAULT
        )
        helpers = sorted(n for n in rename.renamed if n != flag)
        if len(helpers) != 1:
            raise no_fit(path, Misfit.NOT_ONE_HELPER, flag=flag, spelling=old, names=helpers)
        self.definition = flag_at, cst.SimpleStatementLine(body=[definition])
        helper, new_helper = helpers[0], rename.renamed[helpers[0]]
        if new_helper in rename.attributes:
            self.helper = Helper(new_helper, None, rename.attributes[new_helper])
            return
        if _defines(module, new_helper):
            return
        for i, s in _top_level(module):
            if isinstance(s, cst.ImportFrom) and _imported_at(s, helper) is not None:
                self.import_at = i, helper
                self.helper = Helper(new_helper, _import_module(s), new_helper)
                return
        raise no_fit(path, Misfit.HELPER_NOT_IMPORTED, helper=helper, new_helper=new_helper)


def _add_import(statement: cst.SimpleStatementLine, old_helper: str, new_helper: str) -> cst.SimpleStatementLine:
    body = list(statement.body)
    for n, small in enumerate(body):
        j = _imported_at(small, old_helper)
        # (only a "from ... import" of names has an index: for the checker)
        if j is not None and isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            added = cst.ImportAlias(name=cst.Name(new_helper))
            open_ws = small.lpar.whitespace_after if small.lpar else None
            close_ws = small.rpar.whitespace_before if small.rpar else None
            names, close_ws = insert_after(small.names, j, added, open_ws, close_ws)
            rpar = small.rpar.with_changes(whitespace_before=close_ws) if small.rpar else small.rpar
            body[n] = small.with_changes(names=names, rpar=rpar)
            break
    return statement.with_changes(body=body)


class AddFlag(cst.CSTTransformer):
    """Add ``new_flag`` after ``flag`` in the or-expressions of every ``def function``, then
    (if any changed) define and import what it needs at module level."""

    def __init__(self, functions: tuple[str, ...], flag: str, old: str, new: str, path: str) -> None:
        super().__init__()
        self.functions, self.flag, self.old, self.new = functions, flag, old, new
        self.new_flag = flag.replace(old, new)
        self.path = path
        self.defs: list[str] = []
        self.seen: list[str] = []  # the defs of those names found
        self.inner: set[int] = set()  # or-nodes inside a longer chain
        self.results: list[PredicateResult] = []
        self.added: list[str] = []
        self.helper: Helper | None = None

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Outside the gate's defs only statements can lead to one: no need to walk expressions.
        if isinstance(node, _LEAVES) and not any(d in self.functions for d in self.defs):
            return False
        return super().on_visit(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.defs.append(node.name.value)
        if node.name.value in self.functions and node.name.value not in self.seen:
            self.seen.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self.defs.pop()
        return updated_node

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        if _is_or(node):
            self.inner.update(id(side) for side in (node.left, node.right) if _is_or(side) and not side.lpar)

    def leave_BooleanOperation(
        self, original_node: cst.BooleanOperation, updated_node: cst.BooleanOperation
    ) -> cst.BaseExpression:
        inside = [d for d in self.defs if d in self.functions]
        if not _is_or(updated_node) or id(original_node) in self.inner or not inside:
            return updated_node
        names = [o.value if isinstance(o, cst.Name) else None for o in _chain(updated_node)[0]]
        if self.new_flag in names:
            status, node = ALREADY_UPSTREAM, updated_node
        elif self.flag in names:
            status, node = PATCHED, _insert_flag(updated_node, names.index(self.flag), self.new_flag)
        else:
            return updated_node
        self.results.append(PredicateResult(inside[-1], self.flag, self.new_flag, status, one_line(node)))
        return node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.seen and not self.results:
            raise no_fit(self.path, Misfit.NO_OR_EXPRESSION, functions=list(self.seen), flag=self.flag)
        if not any(r.status == PATCHED for r in self.results):
            return updated_node
        plan = _Plan(updated_node, self.flag, self.new_flag, self.old, self.new, self.path)
        body = list(updated_node.body)
        if plan.definition is not None:
            flag_at, definition = plan.definition
            body.insert(flag_at + 1, definition)
            self.added.append(updated_node.code_for_node(definition.body[0]))
        helper = self.helper = plan.helper
        if plan.import_at is not None and helper is not None:  # the import's helper is the plan's
            at, old_helper = plan.import_at
            body[at] = _add_import(ensure_type(body[at], cst.SimpleStatementLine), old_helper, helper.name)
            self.added.append(f"from {helper.module} import {helper.name}")
        return updated_node.with_changes(body=body)


def _check(flag: str, old: str, new: str, path: str) -> None:
    if old == new:
        raise no_fit(path, Misfit.SAME_SPELLINGS, spelling=old)
    if old not in flag:
        raise no_fit(path, Misfit.FLAG_LACKS_SPELLING, flag=flag, spelling=old)


def rewrite(
    source: bytes,
    function: str | tuple[str, ...],
    flag: str,
    old: str,
    new: str,
    *,
    path: str = "<source>",
    line_length: int | None = LINE_LENGTH,
) -> PredicateRewrite:
    """Add ``flag`` with ``old`` replaced by ``new`` after ``flag`` in every or-expression of
    ``def function`` in ``source``; define the new flag and import its helper when missing.

    No such function: the source as it is, and no predicates.  An or-expression that already
    holds the new flag is ``already upstream``.  The result's ``helper``: the helper the new
    flag's definition calls that the module does not define (imported next to the flag's
    helper, or reached as an attribute); the caller checks that the release has it.  Raises
    RewriteError (naming ``path``) for a syntax error, a function without an or-expression
    holding ``flag``, a flag without a module-level definition to copy, a helper that is not
    imported by ``from ... import``, or a line the rewrite would make wider than ``line_length``.  ``function`` may name several defs (a gate that
    moved between releases): a def without such an or-expression is refused only when none
    of them has one.
    """
    _check(flag, old, new, path)
    functions = (function,) if isinstance(function, str) else tuple(function)
    if not mentions(source, functions):
        return PredicateRewrite(source, ())
    adder = AddFlag(functions, flag, old, new, path)

    def run(data: bytes) -> bytes:
        out = parse(data, path).visit(adder)
        return render(out, data, path, line_length) if any(r.status == PATCHED for r in adder.results) else data

    # Only the gate's defs, the simple statements and what may define the new names are parsed.
    result = rewrite_cut(source, lambda name: name in functions or new in name, run)
    results = tuple(adder.results)
    if not any(r.status == PATCHED for r in results):
        return PredicateRewrite(source, results)
    return PredicateRewrite(result, results, tuple(adder.added), adder.helper)
