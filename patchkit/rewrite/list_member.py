"""Add a compute capability to literal lists of capabilities: source bytes in, source bytes out.

Pure: no I/O.  The ``list-member`` rewrite: every literal list, tuple or set that a
``Locator`` names (a call's keyword argument, an assignment, or the right side of a
membership test; optionally only inside a named function) and that holds ``from_cc``
gains ``to_cc`` right after it: ``[9, 10]`` -> ``[9, 10, 12]``.  A one-line list stays on
its line; in a multi-line list the new member gets a line of its own, indented and
comma'd like its neighbours.  Every other byte stays as it was.

The new member's whitespace is arranged by ``rewrite.insert.insert_after``, as every rewrite's is.
"""

from __future__ import annotations

import libcst as cst

from patchkit.cc import Key
from patchkit.match import mentions
from patchkit.rewrite.cut import rewrite_cut
from patchkit.rewrite.dict_key import key_value, one_line, parse
from patchkit.rewrite.insert import insert_after
from patchkit.rewrite.output import LINE_LENGTH, Hit, Rewritten, new_literal, render
from patchkit.rewrite.scope import Enclosing
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from patchkit.values import Value


class Locator(Value):
    """Which lists a rule means: exactly one of ``call`` + ``keyword`` (a keyword argument,
    ``get_nvcc_flags_list(supported_major_versions=[9, 10])``; the call matches on its last
    name, so ``ctx.get_nvcc_flags_list(...)`` too), ``target`` (``SUPPORTED = [9, 10]``) or
    ``test`` (the left side of a membership test as written, ``major`` in ``major in (9, 10)``).
    ``function``: only inside a ``def`` of that name (at any depth)."""

    call: str | None = None
    keyword: str | None = None
    target: str | None = None
    test: str | None = None
    function: str | None = None

    def __post_init__(self) -> None:
        kinds = (self.call is not None or self.keyword is not None, self.target is not None, self.test is not None)
        if sum(kinds) != 1 or (kinds[0] and (self.call is None or self.keyword is None)):
            raise ValueError("a locator names call and keyword, or target, or test")

    def label(self) -> str:
        """``get_nvcc_flags_list(supported_major_versions=...)``, ``SUPPORTED``, ``major in (...)``."""
        if self.call is not None:
            return f"{self.call}({self.keyword}=...)"
        return self.target if self.target is not None else f"{self.test} in (...)"

    def names(self) -> list[str]:
        """Names the source must hold for the locator to match anything (a cheap pre-filter)."""
        return [n for n in (self.call, self.keyword, self.target, self.function) if n is not None]


class ListResult(Hit):
    """What happened to one list: ``name`` is the Locator's label; ``scope`` is what encloses
    the list ("module", "class A", "def f", "def A.f"); ``value`` the list as it reads now."""


class ListRewrite(Rewritten[ListResult]):
    """The rewritten source and what happened to each list found in it."""

    @property
    def lists(self) -> tuple[ListResult, ...]:
        return self.found


# A literal sequence a member is added to.
_Seq = cst.List | cst.Set | cst.Tuple
_Ws = cst.BaseParenthesizableWhitespace


def _brackets(seq: _Seq) -> tuple[_Ws | None, _Ws | None]:
    """(whitespace after the opening bracket, before the closing one) of a list, set or tuple."""
    if isinstance(seq, cst.List):
        return seq.lbracket.whitespace_after, seq.rbracket.whitespace_before
    if isinstance(seq, cst.Set):
        return seq.lbrace.whitespace_after, seq.rbrace.whitespace_before
    if seq.lpar:  # a tuple's own parentheses are the innermost
        return seq.lpar[-1].whitespace_after, seq.rpar[0].whitespace_before
    return None, None


def _with_close(seq: _Seq, elements: list[cst.BaseElement], close_ws: _Ws | None) -> _Seq:
    if isinstance(seq, cst.List):
        return seq.with_changes(elements=elements, rbracket=seq.rbracket.with_changes(whitespace_before=close_ws))
    if isinstance(seq, cst.Set):
        return seq.with_changes(elements=elements, rbrace=seq.rbrace.with_changes(whitespace_before=close_ws))
    if seq.lpar:
        rpar = [seq.rpar[0].with_changes(whitespace_before=close_ws), *seq.rpar[1:]]
        return seq.with_changes(elements=elements, rpar=rpar)
    return seq.with_changes(elements=elements)


def add_member(seq: _Seq, from_cc: Key, to_cc: Key) -> _Seq:
    """``seq`` (a literal list, set or tuple holding ``from_cc``) with ``to_cc`` after the
    last ``from_cc``, spelled like it (``"10.0"`` gives ``"12.0"`` in the same quotes)."""
    index, source = max(((i, e) for i, e in enumerate(seq.elements) if isinstance(e, cst.Element) and _member(e) == from_cc),
                        key=lambda found: found[0])
    added = source.with_changes(value=new_literal(source.value, to_cc))
    open_ws, close_ws = _brackets(seq)
    elements, close_ws = insert_after(seq.elements, index, added, open_ws, close_ws)
    return _with_close(seq, elements, close_ws)


def _member(element: cst.BaseElement) -> Key | None:
    return key_value(element.value) if isinstance(element, cst.Element) else None


def _last_name(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    return func.attr.value if isinstance(func, cst.Attribute) else None


class AddMember(Enclosing):
    """Add ``to_cc`` after ``from_cc`` in every list the locator names; ``results`` says
    what happened to each.  Raises RewriteError for a located value that is not a literal
    list, set or tuple, or that lacks ``from_cc``."""

    def __init__(self, locator: Locator, from_cc: Key, to_cc: Key, path: str) -> None:
        super().__init__()
        self.locator, self.from_cc, self.to_cc, self.path = locator, from_cc, to_cc, path
        self.results: list[ListResult] = []

    def _here(self) -> bool:
        return self.inside(() if self.locator.function is None else (self.locator.function,))

    def _add(self, value: cst.BaseExpression) -> cst.BaseExpression:
        name, scope = self.locator.label(), self.where()
        if not isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            raise no_fit(self.path, Misfit.NOT_A_LIST, name=name, scope=scope)
        members = [_member(e) for e in value.elements]
        if self.to_cc in members:
            self.results.append(ListResult(name, scope, ALREADY_UPSTREAM, self.from_cc, self.to_cc, one_line(value)))
            return value
        if self.from_cc not in members:
            known = [repr(m) for m in members if m is not None]
            raise no_fit(self.path, Misfit.NO_MEMBER_TO_FOLLOW, name=name, scope=scope, member=self.from_cc, members=known)
        new = add_member(value, self.from_cc, self.to_cc)
        self.results.append(ListResult(name, scope, PATCHED, self.from_cc, self.to_cc, one_line(new)))
        return new

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        loc = self.locator
        if loc.call is None or _last_name(updated_node.func) != loc.call or not self._here():
            return updated_node
        args = [
            a.with_changes(value=self._add(a.value)) if a.keyword is not None and a.keyword.value == loc.keyword else a
            for a in updated_node.args
        ]
        return updated_node.with_changes(args=args)

    def _assigned(self, targets: list[cst.BaseExpression]) -> bool:
        wanted = self.locator.target
        return wanted is not None and self._here() and any(isinstance(t, cst.Name) and t.value == wanted for t in targets)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if self._assigned([t.target for t in updated_node.targets]):
            return updated_node.with_changes(value=self._add(updated_node.value))
        return updated_node

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        if updated_node.value is not None and self._assigned([updated_node.target]):
            return updated_node.with_changes(value=self._add(updated_node.value))
        return updated_node

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.Comparison:
        if self.locator.test is None or not self._here():
            return updated_node
        left, comparisons = updated_node.left, []
        for target in updated_node.comparisons:
            if isinstance(target.operator, (cst.In, cst.NotIn)) and one_line(left) == self.locator.test:
                target = target.with_changes(comparator=self._add(target.comparator))
            comparisons.append(target)
            left = target.comparator
        return updated_node.with_changes(comparisons=comparisons)


def rewrite(
    source: bytes,
    locator: Locator,
    from_cc: Key,
    to_cc: Key,
    path: str = "<source>",
    line_length: int | None = LINE_LENGTH,
) -> ListRewrite:
    """Add ``to_cc`` right after ``from_cc`` to every literal list ``locator`` names in ``source``.

    Nothing located: the source as it is, and no lists.  A list that already holds
    ``to_cc`` is ``already upstream`` and stays as it is.  Raises RewriteError (naming
    ``path``) for a syntax error, a located value that is not a literal list or tuple, a
    list without ``from_cc``, or a line the rewrite would make wider than ``line_length``.
    """
    if from_cc == to_cc:
        raise no_fit(path, Misfit.SAME_KEYS, key=from_cc)
    if not all(mentions(source, [name]) for name in locator.names()):
        return ListRewrite(source, ())
    adder = AddMember(locator, from_cc, to_cc, path)

    def run(data: bytes) -> bytes:
        new = parse(data, path).visit(adder)
        return render(new, data, path, line_length) if any(r.status == PATCHED for r in adder.results) else data

    # Inside a named def, only that def (and the module's simple statements) is parsed.
    wanted = locator.function
    result = run(source) if wanted is None else rewrite_cut(source, lambda name: name == wanted, run)
    results = tuple(adder.results)
    if not any(r.status == PATCHED for r in results):
        return ListRewrite(source, results)
    return ListRewrite(result, results)
