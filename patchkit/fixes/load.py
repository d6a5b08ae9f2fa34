"""Read the fixes and the projects from their data files (TOML, beside this module).

A fix (``<name>.toml``) is a title, a rationale, whether it is on by default, and its
rules; a rule names a project, the files (globs over repository paths) and what to
rewrite there (``kind`` and its locator), the cc pair, its evidence (the first upstream
release with the same change, or "not upstream; copied from SM100, untuned") and what it
needs at run time.  ``projects.toml`` says how each project is laid out.  A wrong file is
one BadInput line naming the file and the key.
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
KINDS = ("dict-key",)


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


def _strings(doc: dict, key: str, where: Path, what: str) -> tuple[str, ...]:
    value = _get(doc, key, list, where, what)
    if not value or not all(isinstance(v, str) and v for v in value):
        raise BadInput(str(where), f"{what}: {key!r} must be a list of strings")
    return tuple(value)


def read_fix(path: Path) -> Fix:
    doc = _read(path)
    name = path.stem
    rules = []
    for i, rule in enumerate(_get(doc, "rules", list, path, name), 1):
        what = f"{name}, rule {i}"
        if not isinstance(rule, dict):
            raise BadInput(str(path), f"{what}: not a table")
        kind = _get(rule, "kind", str, path, what)
        if kind not in KINDS:
            raise BadInput(str(path), f"{what}: kind {kind!r} is not one of {', '.join(KINDS)}")
        cc = (int, str)
        rules.append(Rule(
            fix=name,
            project=_get(rule, "project", str, path, what),
            kind=kind,
            files=_strings(rule, "files", path, what),
            tables=_strings(rule, "tables", path, what),
            from_cc=_get(rule, "from_cc", cc, path, what),
            to_cc=_get(rule, "to_cc", cc, path, what),
            evidence=_get(rule, "evidence", str, path, what),
            needs=rule.get("needs", ""),
        ))
    return Fix(name, _get(doc, "title", str, path, name), _get(doc, "rationale", str, path, name).strip(),
               _get(doc, "default", bool, path, name), tuple(rules))


def read_fixes(folder: Path = HERE) -> dict[str, Fix]:
    """Every ``*.toml`` in ``folder`` but projects.toml, by name."""
    return {p.stem: read_fix(p) for p in sorted(folder.glob("*.toml")) if p.name != "projects.toml"}


def read_projects(folder: Path = HERE) -> dict[str, dict]:
    path = folder / "projects.toml"
    doc = _read(path)
    for name, project in doc.items():
        for key in ("label", "source_root", "key_style", "patches"):
            _get(project, key, str, path, name)
        if project["key_style"] not in ("major", "major.minor"):
            raise BadInput(str(path), f"{name}: key_style must be \"major\" or \"major.minor\"")
    return doc
