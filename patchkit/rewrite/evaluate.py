"""Evaluate capability tables from source, without importing or running it.

Folds the constant expressions SGLang writes in its tables (``64 * MiB``,
``[4, 6, 8]``, nested dicts), where names resolve to earlier module-level
constant assignments (``MiB = 1024 * 1024``).  Anything else is an error.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import libcst as cst

from patchkit.rewrite.scope import MODULE, assignments, statements
from patchkit.rewrite.unfit import Misfit, no_fit

_BINARY = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
    cst.Divide: operator.truediv,
    cst.Modulo: operator.mod,
    cst.Power: operator.pow,
    cst.LeftShift: operator.lshift,
    cst.RightShift: operator.rshift,
}


class NotConstant(Exception):
    pass


LIMIT_BITS = 256  # table values are sizes and counts: anything larger is refused
LIMIT_ITEMS = 10_000


def _check_size(operator: cst.BaseBinaryOp, left: Any, right: Any) -> None:
    """Refuse operations whose result would be huge (``2 ** 2 ** 40``, ``"x" * 10**18``)."""
    if isinstance(operator, (cst.Power, cst.LeftShift)) and isinstance(left, int) and isinstance(right, int):
        bits = abs(left).bit_length() * right if isinstance(operator, cst.Power) else abs(left).bit_length() + right
        if right < 0 or bits > LIMIT_BITS:
            raise NotConstant("value too large")
    if isinstance(operator, cst.Multiply):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int) and len(seq) * count > LIMIT_ITEMS:
                raise NotConstant("value too large")


def fold(node: cst.BaseExpression, names: dict[str, Any]) -> Any:
    """The value of a constant expression."""
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return node.evaluated_value
    if isinstance(node, cst.Name):
        if node.value in names:
            return names[node.value]
        if node.value in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.value]
        raise NotConstant(f"name {node.value!r} is not a known constant")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return -fold(node.expression, names)
    if isinstance(node, cst.BinaryOperation) and type(node.operator) in _BINARY:
        left, right = fold(node.left, names), fold(node.right, names)
        _check_size(node.operator, left, right)
        return _BINARY[type(node.operator)](left, right)
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        items = [fold(e.value, names) for e in node.elements if isinstance(e, cst.Element)]
        if len(items) != len(node.elements):
            raise NotConstant("starred element")
        return {cst.List: list, cst.Tuple: tuple, cst.Set: frozenset}[type(node)](items)
    if isinstance(node, cst.Dict):
        out = {}
        for e in node.elements:
            if not isinstance(e, cst.DictElement):
                raise NotConstant("** in a dict")
            out[fold(e.key, names)] = fold(e.value, names)
        return out
    raise NotConstant(f"{type(node).__name__} is not a constant expression")


def tables(source: bytes, table_names: Iterable[str], path: str = "<source>") -> dict[str, Any]:
    """``{"<Class>.<name>": value}`` (``{"<name>": value}`` at module level) for every named
    table assigned at module level or in a class body."""
    from patchkit.rewrite.dict_key import parse

    wanted = frozenset(table_names)
    found: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for scope, statement in statements(parse(source, path)):
        for _, targets, value in assignments(statement):
            names = [t.value for t in targets if isinstance(t, cst.Name)]
            try:
                folded = fold(value, constants)
            except (NotConstant, ArithmeticError, TypeError, ValueError, RecursionError, MemoryError) as exc:
                for name in set(names) & wanted:
                    where = scope.dotted or "module"
                    raise no_fit(path, Misfit.NOT_EVALUATED, name=name, scope=where, detail=str(exc)) from None
                continue
            for name in names:
                if scope == MODULE:
                    constants[name] = folded
                if name in wanted:
                    found[scope.qualify(name)] = folded
    return found
