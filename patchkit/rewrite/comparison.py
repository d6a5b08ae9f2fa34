"""What one compute capability has, its sibling gets: comparisons on an SM int, bytes in, bytes out.

Pure: no I/O.  The ``comparison`` rewrite: a test of one subject (as written: ``sm_version``,
``get_device_sm()``) against ``from_cc`` (an SM int: 120) also admits ``to_cc`` (121), so a
gate written for 12.0 lets 12.1 through the same way::

    sm_version == 120            ->  sm_version in (120, 121)
    sm_version != 120            ->  sm_version not in (120, 121)
    sm_version in (100, 120)     ->  sm_version in (100, 120, 121)

Only where the subject is compared by ``==``, ``!=``, ``in`` or ``not in`` with a literal int (or
a literal list, tuple or set holding ``from_cc``); optionally only inside named functions.  A
test that already admits ``to_cc`` is ``already upstream``; ``sm_version < 90``,
``major == 12`` (another subject) and ``sm_version == 100`` are left alone.  Every other byte
stays as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from patchkit.rewrite.cut import rewrite_cut
from patchkit.rewrite.dict_key import key_value, one_line, parse
from patchkit.rewrite.list_member import add_member
from patchkit.rewrite.output import LINE_LENGTH, Hit, Rewritten, render
from patchkit.rewrite.scope import Enclosing
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import ALREADY_UPSTREAM, PATCHED, Status

if TYPE_CHECKING:
    from patchkit.cc import Key


class ComparisonResult(Hit):
    """What happened to one test: ``name`` is the test as it read (``sm_version == 120``),
    ``scope`` what encloses it ("module", "def f"), ``value`` the test as it reads now."""


class ComparisonRewrite(Rewritten[ComparisonResult]):
    @property
    def tests(self) -> tuple[ComparisonResult, ...]:
        return self.found


def _members(seq: cst.List | cst.Tuple | cst.Set) -> list[Key | None]:
    return [key_value(e.value) if isinstance(e, cst.Element) else None for e in seq.elements]


class Widen(Enclosing):
    """Widen every comparison of ``subject`` with ``from_cc`` to admit ``to_cc``."""

    def __init__(self, subject: str, functions: tuple[str, ...], from_cc: int, to_cc: int) -> None:
        super().__init__()
        self.subject, self.functions, self.from_cc, self.to_cc = subject, functions, from_cc, to_cc
        self.results: list[ComparisonResult] = []

    def _widened(self, target: cst.ComparisonTarget) -> tuple[cst.ComparisonTarget, Status | None]:
        """The target admitting ``to_cc`` too, and PATCHED / ALREADY_UPSTREAM (None: not a test of ours)."""
        op, value = target.operator, target.comparator
        if isinstance(op, (cst.Equal, cst.NotEqual)):
            if key_value(value) != self.from_cc or isinstance(value, cst.SimpleString):
                return target, None
            pair = cst.Tuple([cst.Element(cst.Integer(str(self.from_cc)), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                              cst.Element(cst.Integer(str(self.to_cc)))])
            new_op = cst.In(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after) \
                if isinstance(op, cst.Equal) else cst.NotIn(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
            return target.with_changes(operator=new_op, comparator=pair), PATCHED
        if isinstance(op, (cst.In, cst.NotIn)):
            if not isinstance(value, (cst.List, cst.Tuple, cst.Set)):
                return target, None
            members = _members(value)
            if self.from_cc not in members:
                return target, None
            if self.to_cc in members:
                return target, ALREADY_UPSTREAM
            return target.with_changes(comparator=add_member(value, self.from_cc, self.to_cc)), PATCHED
        return target, None

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        if not self.inside(self.functions):
            return updated_node
        left, comparisons, seen = updated_node.left, [], []
        for target in updated_node.comparisons:
            status = None
            if one_line(left) == self.subject:
                target, status = self._widened(target)
            if status is not None:
                seen.append((one_line(left), target, status))
            comparisons.append(target)
            left = target.comparator
        if not seen:
            return updated_node
        new = updated_node.with_changes(comparisons=comparisons)
        before = one_line(original_node)
        for _, _, status in seen:
            self.results.append(ComparisonResult(before, self.where(), status, self.from_cc, self.to_cc, one_line(new)))
        return new


def rewrite(
    source: bytes, subject: str, from_cc: int, to_cc: int, functions: tuple[str, ...] = (), path: str = "<source>",
    line_length: int | None = LINE_LENGTH,
) -> ComparisonRewrite:
    """Widen every comparison of ``subject`` with ``from_cc`` in ``source`` (inside ``functions``
    if named) to admit ``to_cc``.  Nothing found: the source as it is, and no tests.  Raises
    RewriteError (naming ``path``) for a syntax error or a line wider than ``line_length``."""
    if from_cc == to_cc:
        raise no_fit(path, Misfit.SAME_KEYS, key=from_cc)
    if subject.encode() not in source or str(from_cc).encode() not in source:
        return ComparisonRewrite(source, ())
    widen = Widen(subject, functions, from_cc, to_cc)

    def run(data: bytes) -> bytes:
        new = parse(data, path).visit(widen)
        return render(new, data, path, line_length) if any(r.status == PATCHED for r in widen.results) else data

    result = run(source) if not functions else rewrite_cut(source, lambda name: name in functions, run)
    results = tuple(widen.results)
    return ComparisonRewrite(result if any(r.status == PATCHED for r in results) else source, results)
