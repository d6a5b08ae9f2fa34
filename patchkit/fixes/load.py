"""Read the fixes and the projects from their data files (TOML, beside this module).

A fix (``<name>.toml``) is a title, a rationale, whether it is on by default, and its
rules; a rule names a project, the files (globs over repository paths), the kind of
rewrite and its locator, the cc pair, its evidence (the first upstream release with the
same change, or "not upstream; copied from SM100, untuned") and what it needs at run
time.  The locator depends on the kind:

- ``dict-key``: ``tables``, the names of dicts keyed by compute capability;
- ``list-member``: ``call`` + ``keyword`` (a call's keyword argument), or ``target`` (an
  assignment), or ``test`` (the left side of a membership test); optionally only inside
  ``functions``;
- ``predicate``: ``functions`` and the ``flag`` whose or-expressions gain the new flag;
  ``from_cc``/``to_cc`` are the spellings in names ("sm100" -> "sm120"); ``helpers``:
  the files (globs) where a helper reached as an attribute must be defined.

``projects.toml`` says how each project is laid out.  A wrong file is one BadInput line
naming the file and the key.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
DICT_KEY, LIST_MEMBER, PREDICATE = KINDS = ("dict-key", "list-member", "predicate")
_LOCATORS = ("call", "keyword", "target", "test")


class Rule(NamedTuple):
    fix: str
    project: str
    kind: str
    files: tuple[str, ...]
    tables: tuple[str, ...]  # dict-key: the table names
    from_cc: object
    to_cc: object
    evidence: str
    needs: str
    call: str | None = None  # list-member: the locator
    keyword: str | None = None
    target: str | None = None
    test: str | None = None
    functions: tuple[str, ...] = ()  # list-member: only inside these defs; predicate: the defs
    flag: str | None = None  # predicate: the source flag
    helpers: tuple[str, ...] = ()  # predicate: where an attribute helper is defined

    def names(self) -> tuple[str, ...]:
        """The names a file must mention for the rule to find anything in it."""
        if self.kind == DICT_KEY:
            return self.tables
        if self.kind == PREDICATE:
            return (self.flag,)
        return tuple(n for n in (self.call, self.keyword, self.target) if n) or self.functions

    def where(self) -> str:
        """What the rule rewrites, as a person reads it."""
        if self.kind == DICT_KEY:
            return ", ".join(self.tables)
        inside = f" in {' / '.join(self.functions)}()" if self.functions else ""
        if self.kind == PREDICATE:
            return f"{self.flag} or-expressions{inside}"
        what = f"{self.call}({self.keyword}=[...])" if self.call else self.target or f"{self.test} in (...)"
        return what + inside


class Fix(NamedTuple):
    name: str
    title: str
    rationale: str
    default: bool
    rules: tuple[Rule, ...]


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(str(path), f"not a readable TOML file ({exc})") from None


def _get(doc: dict, key: str, kind: type | tuple, where: Path, what: str):
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadInput(str(where), f"{what}: {key!r} is missing or not {getattr(kind, '__name__', 'a value of the right type')}")
    return value


def _strings(doc: dict, key: str, where: Path, what: str, required: bool = True) -> tuple[str, ...]:
    if not required and key not in doc:
        return ()
    value = _get(doc, key, list, where, what)
    if not value or not all(isinstance(v, str) and v for v in value):
        raise BadInput(str(where), f"{what}: {key!r} must be a list of strings")
    return tuple(value)


def _optional(doc: dict, key: str, where: Path, what: str) -> str | None:
    return _get(doc, key, str, where, what) if key in doc else None


def _rule(name: str, rule: object, path: Path, what: str) -> Rule:
    if not isinstance(rule, dict):
        raise BadInput(str(path), f"{what}: not a table")
    kind = _get(rule, "kind", str, path, what)
    if kind not in KINDS:
        raise BadInput(str(path), f"{what}: kind {kind!r} is not one of {', '.join(KINDS)}")
    cc = str if kind == PREDICATE else (int, str)
    fields = dict(
        fix=name,
        project=_get(rule, "project", str, path, what),
        kind=kind,
        files=_strings(rule, "files", path, what),
        tables=_strings(rule, "tables", path, what, required=kind == DICT_KEY),
        from_cc=_get(rule, "from_cc", cc, path, what),
        to_cc=_get(rule, "to_cc", cc, path, what),
        evidence=_get(rule, "evidence", str, path, what),
        needs=_optional(rule, "needs", path, what) or "",
        functions=_strings(rule, "functions", path, what, required=kind == PREDICATE),
        helpers=_strings(rule, "helpers", path, what, required=False),
        flag=_get(rule, "flag", str, path, what) if kind == PREDICATE else None,
        **{k: _optional(rule, k, path, what) for k in _LOCATORS},
    )
    if kind == LIST_MEMBER:
        given = (fields["call"] is not None or fields["keyword"] is not None, fields["target"] is not None,
                 fields["test"] is not None)
        if sum(given) != 1 or given[0] and (fields["call"] is None or fields["keyword"] is None):
            raise BadInput(str(path), f"{what}: a list-member rule names 'call' and 'keyword', or 'target', or 'test'")
    if kind == PREDICATE and fields["from_cc"] not in fields["flag"]:
        raise BadInput(str(path), f"{what}: flag {fields['flag']!r} does not contain from_cc {fields['from_cc']!r}")
    if fields["from_cc"] == fields["to_cc"]:
        raise BadInput(str(path), f"{what}: from_cc and to_cc are both {fields['from_cc']!r}")
    return Rule(**fields)


def read_fix(path: Path) -> Fix:
    doc = _read(path)
    name = path.stem
    rules = tuple(_rule(name, rule, path, f"{name}, rule {i}") for i, rule in enumerate(_get(doc, "rules", list, path, name), 1))
    return Fix(name, _get(doc, "title", str, path, name), _get(doc, "rationale", str, path, name).strip(),
               _get(doc, "default", bool, path, name), rules)


def read_fixes(folder: Path = HERE) -> dict[str, Fix]:
    """Every ``*.toml`` in ``folder`` but projects.toml, known-failures.toml (signatures.py reads
    it) and known-speedups.toml (speedups.py): the default fixes first, then by name."""
    others = ("projects.toml", "known-failures.toml", "known-speedups.toml")
    fixes = [read_fix(p) for p in sorted(folder.glob("*.toml")) if p.name not in others]
    return {f.name: f for f in sorted(fixes, key=lambda f: (not f.default, f.name))}


def read_projects(folder: Path = HERE) -> dict[str, dict]:
    path = folder / "projects.toml"
    doc = _read(path)
    for name, project in doc.items():
        for key in ("label", "distribution", "source_root", "key_style", "patches"):
            _get(project, key, str, path, name)
        if project["key_style"] not in ("major", "major.minor"):
            raise BadInput(str(path), f"{name}: key_style must be \"major\" or \"major.minor\"")
    return doc
