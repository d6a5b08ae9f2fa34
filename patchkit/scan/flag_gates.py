"""Platform-flag gates: the parts of a flag expression that tell ``from_cc`` from ``cc``.

A *flag expression* is a platform flag (``patchkit.scan.flags``), or ``not``, ``and``, ``or``
of flag expressions and of other operands.  It is evaluated for each capability in
three values: a flag is true or false, ``True``/``False`` are themselves, anything else
(``is_multi_node``, ``batch_size > 0``) is unknown, and ``and``/``or``/``not`` combine them
as Kleene's logic does (false ``and`` unknown is false, true ``or`` unknown is true).

A gate is each largest part whose value is known for both capabilities and differs:
``not (get_platform().is_sm90 or get_platform().is_sm100)`` as a whole (true on SM120,
false on SM100); in ``(_is_sm90_supported or _is_sm100_supported) and batch_size > 0``
(unknown on SM100, since ``batch_size > 0`` is unknown) the part in parentheses.  A part
known the same for both (``is_sm100 or is_sm120``, ``is_blackwell``) is no gate, and
nothing inside it is looked at.  Pure LibCST nodes in, nodes out; ``gate_visitor`` decides
where a flag expression stands.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

import libcst as cst

from patchkit.cc import CC
from patchkit.scan.flags import flag

_Value = tuple[bool | None, bool | None]  # (value for from_cc, value for cc): True, False or None (unknown)
_UNKNOWN: _Value = (None, None)


def atom_name(node: cst.CSTNode) -> str | None:
    """The identifier of a name, an attribute or a call of either: ``get_platform().is_sm100``
    -> ``is_sm100``; ``is_sm100_supported()`` -> ``is_sm100_supported``."""
    if isinstance(node, cst.Call):
        node = node.func
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def _is_not(node: cst.CSTNode) -> TypeGuard[cst.UnaryOperation]:
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not)


def _children(node: cst.CSTNode) -> tuple[cst.BaseExpression, ...]:
    if isinstance(node, cst.BooleanOperation):
        return node.left, node.right
    if _is_not(node):
        return (node.expression,)
    return ()


def parts(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node of the flag expression at ``node``: its ``and``/``or``/``not`` and operands."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(_children(n)))


def flag_names(node: cst.CSTNode) -> tuple[str, ...]:
    """The platform flags in the flag expression, in source order, once each."""
    out: dict[str, None] = {}
    for n in parts(node):
        name = atom_name(n) if not _children(n) else None
        if name is not None and flag(name) is not None:
            out[name] = None
    return tuple(out)


def _and(x: bool | None, y: bool | None) -> bool | None:
    if x is False or y is False:
        return False
    return True if x is True and y is True else None


def _or(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    return False if x is False and y is False else None


def gates(node: cst.CSTNode, caps: tuple[CC, CC]) -> list[cst.CSTNode]:
    """The largest parts of the flag expression at ``node`` whose value is known for both
    capabilities and differs, in source order."""
    values: dict[int, _Value] = {}
    # Post-order without recursion: a long ``a or b or ...`` chain is a deep tree.
    order = list(parts(node))
    for n in reversed(order):
        kids = _children(n)
        if isinstance(n, cst.BooleanOperation):
            left, right = values[id(kids[0])], values[id(kids[1])]
            op = _and if isinstance(n.operator, cst.And) else _or
            values[id(n)] = (op(left[0], right[0]), op(left[1], right[1]))
        elif kids:  # not
            inner = values[id(kids[0])]
            values[id(n)] = (None if inner[0] is None else not inner[0], None if inner[1] is None else not inner[1])
        elif isinstance(n, cst.Name) and n.value in ("True", "False"):
            values[id(n)] = (n.value == "True", n.value == "True")
        else:
            name = atom_name(n)
            f = flag(name) if name is not None else None
            values[id(n)] = (f.holds(caps[0]), f.holds(caps[1])) if f is not None else _UNKNOWN
    found: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        a, b = values[id(n)]
        if a is not None and b is not None:
            if a != b:
                found.append(n)
            continue
        stack.extend(reversed(_children(n)))
    return found
