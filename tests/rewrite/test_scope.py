"""One walk over a module's statements, and one scope value shown three ways."""

from __future__ import annotations

import libcst as cst

from patchkit.rewrite.scope import MODULE, Scope, assignments, header, statements

SOURCE = b"""\
A = 1
class C:
    B = 2
    class D: E = 3
    def f(self):
        class F:
            G = 4
if x:
    H = 5
elif y:
    pass
"""


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip().splitlines()[0]


def test_plain_statements_are_the_module_and_class_bodies() -> None:
    module = cst.parse_module(SOURCE)
    got = [(scope.label(), _code(s)) for scope, s in statements(module)]
    assert got == [
        ("module", "A = 1"),
        ("module", "class C:"),
        ("class C", "B = 2"),
        ("class C", "class D: E = 3"),
        ("class C.D", "E = 3"),
        ("class C", "def f(self):"),
        ("module", "if x:"),
    ]


def test_everywhere() -> None:
    module = cst.parse_module(SOURCE)
    got = [(scope, _code(s)) for scope, s in statements(module, everywhere=True)]
    assert (Scope(("F",), False), "G = 4") in got  # a function starts afresh, and is not plain
    assert (Scope((), False), "H = 5") in got
    assert (Scope((), False), "if y:") in got  # a clause (here: elif) is a statement of its own
    (if_x,) = [s for _, s in statements(module) if _code(s) == "if x:"]
    assert [code for h in header(if_x) if (code := cst.Module(body=[]).code_for_node(h).strip())] == ["x"]


def test_display_forms() -> None:
    inner = MODULE.enter("class", "A").enter("class", "B")
    assert (inner.label(), inner.qualify("NAME"), inner.dotted) == ("class A.B", "A.B.NAME", "A.B")
    assert (MODULE.label(), MODULE.qualify("NAME"), MODULE.dotted) == ("module", "NAME", "")
    assert inner.enter("def") == Scope((), False) and inner.enter("block") == Scope(("A", "B"), False)


def test_assignments() -> None:
    statement = cst.parse_statement("a = b = {10: 1}; c: int = 2; d: int; e += 1\n")
    got = [([_code(t) for t in targets], _code(value)) for _, targets, value in assignments(statement)]
    assert got == [(["a", "b"], "{10: 1}"), (["c"], "2")]
