"""Apply the rules of the fixes to one file: source bytes in, source bytes out.

Pure: the one map from a rule's class to its rewrite (``dict_key``, ``list_member``,
``predicate``, ``backport``, ``comparison``: each kind its own transformer).  Every kind reports what it found as one ``Found``, which
stays a value through plan, state and commands; ``Found.to_json`` is the one shape that
manifests, state and ``--json`` carry::

    {"name", "scope", "status", "added_key", "copied_from", "value", "fix", "kind"}

``added_key``/``copied_from`` are what was added and what it copies: a key (dict-key), a
member (list-member) or a flag (predicate, which also lists the module lines it ``added``); a
backport's are values (``rewrite/backported.py``: its hunks, its upstream change, how they went in).
A predicate rule needs to know whether its helper exists in the release: ``read`` gives
the bytes of another file of the release (a repository path; None if there is none).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from patchkit.fixes.kinds import (
    BackportRule,
    ComparisonRule,
    DictKeyRule,
    ListMemberRule,
    PredicateRule,
    Rule,
    RuleKind,
)
from patchkit.match import Pattern
from patchkit.rewrite.found import Found
from patchkit.types import ALREADY_UPSTREAM, Status
from patchkit.values import Record

if TYPE_CHECKING:
    import libcst as cst

    from patchkit.rewrite.output import HitJson
    from patchkit.rewrite.predicate import Helper

Read = Callable[[str], "bytes | None"]
# A backport's three-way merge base: (rule, repository path) -> the file in the release the
# change was made on (rule.made_on), or None where there is none to read (a target's files).
Base = Callable[[Rule, str], "bytes | None"]


class FileRewrite(Record):
    source: bytes
    found: tuple[Found, ...]

    @property
    def changed(self) -> bool:
        return any(f.patched for f in self.found)


def matches(path: str, pattern: str) -> bool:
    """Does the repository path match the rule's glob (``*`` stays inside one folder)?"""
    return path.count("/") == pattern.count("/") and fnmatchcase(path, pattern)


def rules_of(path: str, rules: Iterable[Rule]) -> list[Rule]:
    """The rules whose files include ``path``."""
    return [r for r in rules if any(matches(path, g) for g in r.files)]


def rewrite_file(
    data: bytes, path: str, rules: Iterable[Rule], read: Read | None = None, root: str = "", base: Base | None = None,
    version: str | None = None,
) -> FileRewrite:
    """``data`` (the file at repository path ``path``) with every rule of ``rules`` that
    names the file applied in order, and what each found.  ``root``: where the import
    packages sit in the repository (``python`` for SGLang), to find a helper's module.
    ``base`` gives a backport's merge base; ``version``: the release (a backport is upstream
    from the release it landed in on, and some releases take it refreshed).  Raises RewriteError (naming ``path``) when a rule
    cannot be applied."""
    found: list[Found] = []
    for rule in (r for r in rules_of(path, rules) if r.covers(version)):
        data, more = REWRITES[rule.kind](data, path, rule, _Context(read, root, base, version))
        found += [Found(rule.fix, rule.kind, *f) for f in more]
    return FileRewrite(data, tuple(found))


class _Context(Record):
    """What a rewrite may need beside the file: another file of the release (a predicate's
    helper), where its packages sit, a backport's merge base and the release."""

    read: Read | None
    root: str
    base: Base | None
    version: str | None


class _Finding(Protocol):
    def to_json(self) -> HitJson: ...


# Found's fields after fix and kind: name, scope, status, added_key, copied_from, value, added.
_Fields = tuple[str, str, Status, object, object, object, "tuple[str, ...] | None"]


def _of(f: _Finding, added: tuple[str, ...] | None = None) -> _Fields:
    """A kind's finding (``output.Hit``, ``PredicateResult``) as Found's fields after fix and kind."""
    doc = f.to_json()
    return (doc["name"], doc["scope"], doc["status"], doc["added_key"], doc["copied_from"], doc["value"], added)


def _dict_key(data: bytes, path: str, rule: DictKeyRule, ctx: _Context) -> tuple[bytes, list[_Fields]]:
    from patchkit.rewrite import dict_key

    result = dict_key.rewrite(data, rule.tables, rule.from_cc, rule.to_cc, path)
    return result.source, [_of(t) for t in result.tables]


def _backport(data: bytes, path: str, rule: BackportRule, ctx: _Context) -> tuple[bytes, list[_Fields]]:
    """Its finding's values (``rewrite.backported``): the hunks, the upstream change, how they went in."""
    from patchkit.rewrite.backported import Carried, HowCarried, Refreshed, Upstream

    version, origin = ctx.version, rule.origin
    if origin is None:  # the loader gives every backport its origin
        raise ValueError(f"{rule.fix}'s backport has no origin")
    name, scope, upstream = origin.cite(), "the upstream change", Upstream(origin.commit, origin.landed_in)
    if rule.landed(version):  # counted, not read: the diff reader is imported where a change is carried
        from patchkit.rewrite.diff import count_hunks

        return data, [(name, scope, ALREADY_UPSTREAM, count_hunks(rule.diff, path), upstream, Carried(HowCarried.LANDED), None)]
    from patchkit.rewrite import backport

    hunks = backport.parse(rule.diff, f"{rule.fix}'s diff")[path]
    count = len(hunks)
    refreshed = [r for r in rule.refresh if r.file == path and r.covers(version)]
    hunks = backport.refresh(hunks, tuple(line for r in refreshed for line in r.drop))
    base = ctx.base
    result = backport.rewrite(data, path, hunks, (lambda: base(rule, path)) if base else None, rule.made_on or "")
    how = Carried(result.how, result.offsets, tuple(Refreshed(r.since, r.until, r.drop, r.why) for r in refreshed))
    return result.source, [(name, scope, result.status, count, upstream, how, None)]


def _list_member(data: bytes, path: str, rule: ListMemberRule, ctx: _Context) -> tuple[bytes, list[_Fields]]:
    from patchkit.rewrite.list_member import Locator, rewrite

    found: list[_Fields] = []
    for function in rule.functions or (None,):
        locator = Locator(call=rule.call, keyword=rule.keyword, target=rule.target, test=rule.test, function=function)
        result = rewrite(data, locator, rule.from_cc, rule.to_cc, path)
        data = result.source
        found += [_of(r) for r in result.lists]
    return data, found


def _predicate(data: bytes, path: str, rule: PredicateRule, ctx: _Context) -> tuple[bytes, list[_Fields]]:
    from patchkit.rewrite import predicate
    from patchkit.rewrite.unfit import Misfit, no_fit

    result = predicate.rewrite(data, rule.functions, rule.flag, rule.from_cc, rule.to_cc, path=path)
    # The helper matters only when an or-expression changed, and this release must define it.
    if result.helper is not None and not helper_exists(result.helper, path, rule, ctx.read, ctx.root):
        helper = result.helper
        raise no_fit(path, Misfit.HELPER_UNDEFINED, new_flag=result.predicates[0].new_flag, helper=helper.reached, module=helper.module)
    return result.source, [_of(p, tuple(result.added)) for p in result.predicates]


def _comparison(data: bytes, path: str, rule: ComparisonRule, ctx: _Context) -> tuple[bytes, list[_Fields]]:
    from patchkit.rewrite import comparison

    result = comparison.rewrite(data, rule.subject, rule.from_cc, rule.to_cc, rule.functions, path)
    return result.source, [_of(t) for t in result.tests]


# Each kind of rule (``fixes.kinds.RULES``), its rewrite.
REWRITES: dict[RuleKind, Callable[..., tuple[bytes, list[_Fields]]]] = {
    RuleKind.DICT_KEY: _dict_key, RuleKind.LIST_MEMBER: _list_member, RuleKind.PREDICATE: _predicate,
    RuleKind.BACKPORT: _backport, RuleKind.COMPARISON: _comparison,
}


def helper_exists(helper: Helper, path: str, rule: PredicateRule, read: Read | None, root: str) -> bool:
    """Whether the release defines the helper the new flag needs: a module-level name of the
    module it is imported from (following ``from .x import *``), or an attribute named in
    one of the rule's ``helpers`` files (a def, an assignment or a string key)."""
    if read is None:
        return False
    if helper.module is None:
        name = re.escape(helper.name).encode()
        pattern = re.compile(rb"\bdef " + name + rb"\b|[\"']" + name + rb"[\"']|^\s*" + name + rb"\s*[:=]", re.M)
        return any(pattern.search(read(p) or b"") for p in rule.helpers)
    return _defines(_module_files(helper.module, path, root), helper.name, read, root, set())


_IMPORT = Pattern(rb"^(?:from|import)[ \t\\]", re.M)  # where a module-level import statement starts
_STAR = Pattern(rb"import[\s\\(]*\*")


def _imports(data: bytes) -> Iterable[bytes]:
    """The text of each module-level import statement of ``data``: its first line, and the
    lines its parentheses or backslashes carry it over."""
    for start in _IMPORT.finditer(data):
        end = start.start()
        while True:
            newline = data.find(b"\n", end)
            end = len(data) if newline < 0 else newline + 1
            text = data[start.start():end]
            if end == len(data) or (text.count(b"(") <= text.count(b")") and not text.rstrip().endswith(b"\\")):
                break
        yield text


@lru_cache(maxsize=64)  # generate asks again for each release that shares a helper module's text
def _imported(data: bytes, name: str) -> tuple[bool, tuple[str, ...]]:
    """(whether a module-level import of ``data`` binds ``name``: ``from m import name``,
    ``... import x as name``, ``import m as name``; the modules it imports ``*`` from), as
    LibCST reads the statements.  Only an import statement whose text names ``name`` or ``*``
    is parsed, on its own."""
    import libcst as cst

    from patchkit.rewrite.predicate import _import_module

    stars = []
    for text in _imports(data):
        if name.encode() not in text and not _STAR.search(text):
            continue
        try:
            statement = cst.parse_statement(text.decode("utf-8"))
        except (cst.ParserSyntaxError, UnicodeDecodeError, RecursionError):
            continue  # a line of a string that starts like an import, or a file that is no Python
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                stars.append(_import_module(small))
            elif isinstance(small, (cst.Import, cst.ImportFrom)) and name in _bound(small):
                return True, ()
    return False, tuple(stars)


def _bound(small: cst.Import | cst.ImportFrom) -> list[str]:
    """The names an import binds as ``helper_exists`` counts them: each name of a ``from``
    import (its ``as`` name if it has one), each ``as`` name of an ``import``."""
    import libcst as cst

    if isinstance(small, cst.ImportFrom):
        if isinstance(small.names, cst.ImportStar):  # binds no name of its own (``_imported`` follows it)
            return []
        bound = (a.asname.name if a.asname else a.name for a in small.names)
        return [b.value for b in bound if isinstance(b, cst.Name)]
    return [a.asname.name.value for a in small.names if a.asname and isinstance(a.asname.name, cst.Name)]


def _module_files(module: str, path: str, root: str) -> list[str]:
    """The repository paths a module may be: ``a/b.py`` or ``a/b/__init__.py``."""
    dots = len(module) - len(module.lstrip("."))
    if dots:
        parts = path.split("/")[:-1]
        base = parts[: len(parts) - (dots - 1)] if dots > 1 else parts
        stem = "/".join(base + [p for p in module[dots:].split(".") if p])
    else:
        stem = "/".join(([root] if root else []) + module.split("."))
    return [f"{stem}.py", f"{stem}/__init__.py"]


def _defines(files: list[str], name: str, read: Read, root: str, seen: set[str]) -> bool:
    for file in files:
        if file in seen:
            continue
        seen.add(file)
        data = read(file)
        if data is None:
            continue
        escaped = re.escape(name).encode()
        defined = re.compile(rb"^(?:def|class|async def) " + escaped + rb"\b|^" + escaped + rb"\s*(?::[^=\n]*)?=[^=]", re.M)
        if defined.search(data):
            return True
        imported, stars = _imported(data, name)
        if imported:
            return True
        for star in stars:
            if _defines(_module_files(star, file, root), name, read, root, seen):
                return True
        return False
    return False
