"""Add a compute-capability key to dict tables: source bytes in, source bytes out.

Pure: no I/O.  The one rewrite (plain isinstance checks rather than ``libcst.matchers``,
whose import alone costs ~190 ms): for every assignment (module level or class body,
walked by ``patchkit.rewrite.scope``; plain or annotated) of a known table name to a
dict literal that has ``from_cc`` and lacks ``to_cc``, insert ``to_cc: <value of
from_cc>`` right after the ``from_cc`` entry.  The value node is copied verbatim
(inner comments and line breaks included); every other byte stays as it was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import libcst as cst

from patchkit.cc import Key
from patchkit.match import mentions
from patchkit.rewrite.cut import rewrite_cut
from patchkit.rewrite.insert import insert_after
from patchkit.rewrite.output import Hit, Rewritten, new_literal, render
from patchkit.rewrite.scope import Scope, assignments, statements
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import ALREADY_UPSTREAM, PATCHED


class TableResult(Hit):
    """What happened to one table assignment (``scope``: "module" or "class <Name>";
    ``value``: the copied value's source, on one line, comments dropped)."""


class Rewrite(Rewritten[TableResult]):
    """The rewritten source and what happened to each table found in it."""

    @property
    def tables(self) -> tuple[TableResult, ...]:
        return self.found


def key_value(node: cst.BaseExpression) -> Key | None:
    """The literal int or str a dict key stands for, or None."""
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def insert_key(table: cst.Dict, from_cc: Key, to_cc: Key) -> cst.Dict:
    """Return ``table`` with ``to_cc: <from_cc's value>`` after the last ``from_cc`` entry, the
    existing lines byte-identical (``rewrite.insert.insert_after``)."""
    index, source = max(((i, e) for i, e in enumerate(table.elements) if isinstance(e, cst.DictElement) and key_value(e.key) == from_cc),
                        key=lambda found: found[0])
    added = source.with_changes(key=new_literal(source.key, to_cc), value=source.value.deep_clone())
    elements, close_ws = insert_after(table.elements, index, added, table.lbrace.whitespace_after,
                                      table.rbrace.whitespace_before, entries=True)
    return table.with_changes(elements=elements, rbrace=table.rbrace.with_changes(whitespace_before=close_ws))


def one_line(node: cst.CSTNode) -> str:
    """A value's source on one line: ``{2: 64 * MiB, 4: 32 * MiB}``."""
    code = cst.Module(body=[]).code_for_node(node)
    code = re.sub(r"#[^\n]*", "", code)
    code = re.sub(r"\s+", " ", code).strip()
    code = re.sub(r"([\[{(]) ", r"\1", code)
    return re.sub(r",? ?([\]})])", r"\1", code)


def _value_of(table: cst.Dict, key: Key) -> str:
    entries = [e for e in table.elements if isinstance(e, cst.DictElement) and key_value(e.key) == key]
    return one_line(entries[-1].value) if entries else ""


def _keys(table: cst.Dict) -> list[Key | None]:
    return [key_value(e.key) for e in table.elements if isinstance(e, cst.DictElement)]


def _table_name(targets: list[cst.BaseExpression], names: frozenset[str]) -> str | None:
    for target in targets:
        if isinstance(target, cst.Name) and target.value in names:
            return target.value
    return None


def _add_key(
    table: cst.BaseExpression, name: str, scope: Scope, from_cc: Key, to_cc: Key, path: str
) -> tuple[TableResult, cst.Dict | None]:
    """(what happened to the table, its new value or None when it stays as it is)."""
    if not isinstance(table, cst.Dict):
        raise no_fit(path, Misfit.NOT_A_DICT, name=name, scope=scope.label())
    keys = _keys(table)
    if to_cc in keys:
        return TableResult(name, scope.label(), ALREADY_UPSTREAM, from_cc, to_cc, _value_of(table, to_cc)), None
    if from_cc not in keys:
        known = [repr(k) for k in keys if k is not None]
        raise no_fit(path, Misfit.NO_KEY_TO_COPY, name=name, scope=scope.label(), key=from_cc, keys=known)
    result = TableResult(name, scope.label(), PATCHED, from_cc, to_cc, _value_of(table, from_cc))
    return result, insert_key(table, from_cc, to_cc)


class _Replace(cst.CSTTransformer):
    """Put each new node in place of the old one (``{id(old): new}``)."""

    def __init__(self, new: Mapping[int, cst.CSTNode]) -> None:
        super().__init__()
        self.new = new

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.new

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]  # LibCST's is generic in the node's type: each new node has its old one's type, which a dict keyed by id() cannot say
        return self.new.get(id(original_node), updated_node)


def parse(source: bytes, path: str) -> cst.Module:
    """LibCST's tree of ``source``, or RewriteError naming ``path``: never a traceback.

    CPython's own parser checks the file first: it is fast, it refuses what LibCST's
    native parser would crash on (brackets nested hundreds deep), and it reports
    undecodable bytes and unknown coding cookies cleanly.
    """
    import ast

    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        if "encoding" in str(exc.msg):
            raise no_fit(path, Misfit.CANNOT_DECODE, detail=exc.msg) from None
        raise no_fit(path, Misfit.CANNOT_PARSE_LINE, line=exc.lineno, detail=exc.msg) from None
    except (UnicodeDecodeError, LookupError) as exc:
        raise no_fit(path, Misfit.CANNOT_DECODE, detail=str(exc)) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise no_fit(path, Misfit.CANNOT_PARSE, detail=str(exc)) from None
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise no_fit(path, Misfit.CANNOT_PARSE_AT, line=exc.raw_line, column=exc.raw_column, detail=exc.message) from None
    except (UnicodeDecodeError, LookupError, SyntaxError, RecursionError) as exc:
        raise no_fit(path, Misfit.CANNOT_DECODE, detail=str(exc)) from None


def rewrite(source: bytes, names: Iterable[str], from_cc: Key, to_cc: Key, path: str = "<source>") -> Rewrite:
    """Add ``to_cc`` copied from ``from_cc`` to every table in ``names`` found in ``source``.

    Raises RewriteError (naming ``path``) for a syntax error, a table without
    ``from_cc`` or a table that is not a dict literal.
    """
    names = frozenset(names)
    if from_cc == to_cc:
        raise no_fit(path, Misfit.SAME_KEYS, key=from_cc)
    if not mentions(source, names):
        return Rewrite(source, ())
    results: list[TableResult] = []

    def run(data: bytes) -> bytes:
        module = parse(data, path)
        new = {}
        for scope, statement in statements(module):
            for _, targets, value in assignments(statement):
                name = _table_name(targets, names)
                if name is not None:
                    result, table = _add_key(value, name, scope, from_cc, to_cc, path)
                    results.append(result)
                    if table is not None:
                        new[id(value)] = table
        return render(module.visit(_Replace(new)), data, path, line_length=None) if new else data

    # Only the module's simple statements and the classes that assign a table are parsed.
    out = rewrite_cut(source, lambda name: False, run, assigns=names)
    return Rewrite(out if any(r.status == PATCHED for r in results) else source, tuple(results))
