"""Where a statement stands: one scope value, one walk over a LibCST module, and the
display forms of a scope.

``Scope`` is the classes around a statement and whether only module and class bodies
enclose it (``plain``: where patchkit's tables live, and all the rewriter looks at).
``statements`` yields (scope, statement) in source order; the rewriter and ``evaluate``
walk the plain statements, ``patchkit scan`` every one.  Each reader shows a scope its
own way, all derived here: ``label`` ("module", "class A.B"), ``qualify`` ("A.B.NAME").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from patchkit.values import Record

CLASS = "class"
DEF = "def"
BLOCK = "block"  # any other compound statement: if, for, while, with, try, match


class Scope(Record):
    classes: tuple[str, ...] = ()  # the enclosing classes, outermost first (a function starts afresh)
    plain: bool = True  # only module level and class bodies enclose it

    def enter(self, kind: str, name: str = "") -> Scope:
        """The scope inside a statement of this kind (CLASS, named; DEF; BLOCK)."""
        if kind == CLASS:
            return Scope((*self.classes, name), self.plain)
        return Scope((), False) if kind == DEF else Scope(self.classes, False)

    @property
    def dotted(self) -> str:
        """``A.B``; "" at module level."""
        return ".".join(self.classes)

    def label(self) -> str:
        """``module`` or ``class A.B``: the rewriter's tables and errors."""
        return f"class {self.dotted}" if self.classes else "module"

    def qualify(self, name: str) -> str:
        """``A.B.NAME`` (``NAME`` at module level): evaluated tables and scan's findings."""
        return ".".join((*self.classes, name))


MODULE = Scope()


class Enclosing(cst.CSTTransformer):
    """A transformer that knows the classes and functions around the node it is at: ``scopes``,
    (CLASS or DEF, name) outermost first.  The base of the rewrites that look inside functions
    (``comparison``, ``list_member``)."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[tuple[str, str]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append((CLASS, node.name.value))

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.scopes.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append((DEF, node.name.value))

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self.scopes.pop()
        return updated_node

    def inside(self, functions: tuple[str, ...]) -> bool:
        """Inside one of the functions named (anywhere when none is named)."""
        return not functions or any((DEF, f) in self.scopes for f in functions)

    def where(self) -> str:
        """``module``, or the innermost scope's kind and the dotted names to it: ``def A.f``."""
        return f"{self.scopes[-1][0]} {'.'.join(n for _, n in self.scopes)}" if self.scopes else "module"

# The parts of a compound statement that carry a header and a block of their own.
_CLAUSES = (cst.If, cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
_SIMPLE = (cst.SimpleStatementLine, cst.SimpleStatementSuite)


Walk = Iterator[tuple[Scope, cst.CSTNode]]


def statements(module: cst.Module, scope: Scope = MODULE, everywhere: bool = False) -> Walk:
    """(scope, statement) for the statements of the module and of its class bodies.

    A compound statement comes before the statements of its blocks.  A one-line block
    (``class A: X = 1``) comes as one statement, a ``SimpleStatementSuite``.
    ``everywhere``: the blocks of every compound statement too, and its clauses (``elif``,
    ``else``, ``except``, ``finally``, ``case``) as statements of their own.
    """
    yield from _body(module.body, scope, everywhere)


def _body(body: Sequence[cst.BaseStatement], scope: Scope, everywhere: bool) -> Walk:
    for statement in body:
        yield scope, statement
        if isinstance(statement, cst.ClassDef):
            yield from _blocks(statement, scope.enter(CLASS, statement.name.value), everywhere)
        elif everywhere and isinstance(statement, cst.BaseCompoundStatement):
            kind = DEF if isinstance(statement, cst.FunctionDef) else BLOCK
            yield from _blocks(statement, scope.enter(kind), everywhere)


def _blocks(node: cst.CSTNode, scope: Scope, everywhere: bool) -> Walk:
    for child in node.children:
        if isinstance(child, cst.IndentedBlock):
            yield from _body(child.body, scope, everywhere)
        elif isinstance(child, cst.SimpleStatementSuite):
            yield scope, child
        elif isinstance(child, _CLAUSES):
            yield scope, child
            yield from _blocks(child, scope, everywhere)


def header(statement: cst.CSTNode) -> list[cst.CSTNode]:
    """A statement's own code, without its blocks and clauses: all of a simple statement,
    the header of a compound one (decorators, test, target, bases ...)."""
    if isinstance(statement, _SIMPLE):
        return [statement]
    return [c for c in statement.children if not isinstance(c, (cst.BaseSuite, *_CLAUSES))]


def assignments(statement: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, list[cst.BaseExpression], cst.BaseExpression]]:
    """(assignment, targets, value) of each assignment in a simple statement: ``a = b = v``,
    ``a: T = v``."""
    if not isinstance(statement, _SIMPLE):
        return
    for small in statement.body:
        if isinstance(small, cst.Assign):
            yield small, [t.target for t in small.targets], small.value
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            yield small, [small.target], small.value
