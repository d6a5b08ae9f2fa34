"""Read the fixes and the projects from their data files (TOML beside this module, read in their
built form: ``build.py``).

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
  the files (globs) where a helper reached as an attribute must be defined;
- ``comparison``: ``subject`` (as written: ``sm_version``, ``get_device_sm()``) compared with
  the SM int ``from_cc`` (120) also admits ``to_cc`` (121), "what 12.0 has, 12.1 gets";
  optionally only inside ``functions``;
- ``backport``: an upstream change carried as its diff (``diff``: a file beside the fix, in
  ``git diff`` form, any file type), its ``origin`` (project, pr, commit, title, the release
  it ``landed_in``) and ``made_on``, the release its pre-image is taken from for a three-way
  merge; ``files`` are the diff's files.  ``from_cc``/``to_cc`` say which GPUs it is for.

Any rule may name the releases it is for (``since``, ``until``): outside them it finds nothing.
Every rule's ``evidence`` says what it is, in one of four forms: "same as upstream X",
"part of upstream X (the rest: ...)", "proposed upstream X (not merged ...)", "not upstream...".

``projects.toml`` says how each project is laid out.  A wrong file is one BadInput line
naming the file and the key.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, overload

from patchkit.cc import KeyStyle
from patchkit.errors import BadInput
from patchkit.fixes.kinds import (
    RULES,
    BackportRule,
    ComparisonRule,
    DictKeyRule,
    ListMemberRule,
    Origin,
    PredicateRule,
    Refresh,
    Rule,
    RuleKind,
)
from patchkit.values import Value

HERE = Path(__file__).resolve().parent
# The data folders: each holds its TOML files and their built form, BUILT (``fixes/build.py``).
FOLDERS = (HERE, HERE / "modes")
BUILT = "data.json"
EVIDENCE = ("same as upstream ", "part of upstream ", "proposed upstream ", "not upstream")
_DIFF_MAX = 1 << 20  # a backport's diff is read whole: one upstream change, not a tree
_LOCATORS = ("call", "keyword", "target", "test")
# The data files beside the fixes that are not fixes.
NOT_FIXES = ("projects.toml", "known-failures.toml", "known-speedups.toml", "known-kernels.toml", "known-settings.toml")


# A TOML table as the TOML reader gives it.  Any: its values are TOML's, each checked by ``_get`` where it is read.
Table = dict[str, Any]
_T = TypeVar("_T")
_U = TypeVar("_U")


class FeaturePath(Value):
    """The files a fix's feature goes through in a range of releases of one project, from
    the flag to the kernel sources: after the rules, no gate there may still refuse the GPU."""

    project: str
    since: str
    until: str | None
    files: tuple[str, ...]  # globs over repository paths: every gate in them counts
    # (glob, defs): files where only the gates inside these defs count (the rest of a large
    # module is another feature's)
    functions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # (file, text, says): a refusal no capability test shows, found by its text (a probe that
    # fails on every GPU of the family), and what it does
    blocks: tuple[tuple[str, str, str], ...] = ()

    def globs(self) -> tuple[str, ...]:
        return self.files + tuple(g for g, _ in self.functions) + tuple(f for f, _, _ in self.blocks)

    def covers(self, project: str, version: str | None) -> bool:
        from patchkit.versions import in_range

        return project == self.project and in_range(version, self.since, self.until)


class Fix(Value):
    name: str
    title: str
    rationale: str
    default: bool
    rules: tuple[Rule, ...]
    paths: tuple[FeaturePath, ...] = ()

    def path(self, project: str, version: str | None) -> FeaturePath | None:
        """The feature's path in this release, if the fix declares one."""
        return next((p for p in self.paths if p.covers(project, version)), None)


def _read(path: Path) -> Table:
    """The document of the data file ``path``: from its folder's built form (``data.json``, every
    document of the folder in one JSON file, read once in a process), else the TOML file itself (a
    folder nobody built: a test's).  Callers share the document and never change it."""
    built = _built(path.parent)
    if built is None:
        return parse_toml(path)
    doc = built.get(path.name)
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"not in {path.parent / BUILT}, or not a table there: {_BROKEN}")
    return doc


def parse_toml(path: Path) -> Table:
    """The TOML document of ``path``, or BadInput naming it: what ``make fix-data`` builds from."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: tomllib's own project
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and TOMLDecodeError are ValueErrors
        raise BadInput(str(path), f"not a readable TOML file ({exc})") from None


def data_files(folder: Path) -> list[Path]:
    """The data files of ``folder`` (``*.toml``), sorted by name: as its built form lists them, else
    as they are in the folder."""
    built = _built(folder)
    return [folder / name for name in sorted(built)] if built is not None else sorted(folder.glob("*.toml"))


_BROKEN = "a broken install (reinstall patchkit; in a source tree, `make fix-data`)"


@lru_cache(maxsize=4)
def _built(folder: Path) -> dict[str, object] | None:
    """The documents of ``folder``'s built form by file name (read once in a process); None when it
    has none."""
    path = folder / BUILT
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise BadInput(str(path), f"cannot read it ({exc.strerror}): {_BROKEN}") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BadInput(str(path), f"not JSON ({exc}): {_BROKEN}") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise BadInput(str(path), f"not the fixes' built data (no 'files' table): {_BROKEN}")
    return files


@overload
def _get(doc: Table, key: str, kind: type[_T], where: Path, what: str) -> _T: ...
@overload
def _get(doc: Table, key: str, kind: tuple[type[_T], type[_U]], where: Path, what: str) -> _T | _U: ...
def _get(doc: Table, key: str, kind: type[object] | tuple[type[object], ...], where: Path, what: str) -> object:
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadInput(str(where), f"{what}: {key!r} is missing or not {getattr(kind, '__name__', 'a value of the right type')}")
    return value


def _strings(doc: Table, key: str, where: Path, what: str, required: bool = True) -> tuple[str, ...]:
    if not required and key not in doc:
        return ()
    value = _get(doc, key, list, where, what)
    if not value or not all(isinstance(v, str) and v for v in value):
        raise BadInput(str(where), f"{what}: {key!r} must be a list of strings")
    return tuple(value)


def _optional(doc: Table, key: str, where: Path, what: str) -> str | None:
    return _get(doc, key, str, where, what) if key in doc else None


def _rule(name: str, rule: object, path: Path, what: str) -> Rule:
    """The rule a table of a fix's ``rules`` holds, of the class its ``kind`` names: the one
    place that reads a kind's name."""
    if not isinstance(rule, dict):
        raise BadInput(str(path), f"{what}: not a table")
    kind = _get(rule, "kind", str, path, what)
    if kind not in tuple(RuleKind):
        raise BadInput(str(path), f"{what}: kind {kind!r} is not one of {', '.join(RuleKind)}")
    cls = RULES[RuleKind(kind)]
    cc = str if cls is PredicateRule else int if cls is ComparisonRule else (int, str)
    backport = _backport(rule, path, what) if cls is BackportRule else {}
    # Any: each kind's class takes its own of these fields, each of the type read here.
    values: dict[str, Any] = dict(
        fix=name,
        project=_get(rule, "project", str, path, what),
        files=backport.pop("files") if backport else _strings(rule, "files", path, what),
        tables=_strings(rule, "tables", path, what, required=cls is DictKeyRule),
        from_cc=_get(rule, "from_cc", cc, path, what),
        to_cc=_get(rule, "to_cc", cc, path, what),
        evidence=_get(rule, "evidence", str, path, what),
        needs=_optional(rule, "needs", path, what) or "",
        functions=_strings(rule, "functions", path, what, required=cls is PredicateRule),
        subject=_get(rule, "subject", str, path, what) if cls is ComparisonRule else None,
        since=_optional(rule, "since", path, what),
        until=_optional(rule, "until", path, what),
        helpers=_strings(rule, "helpers", path, what, required=False),
        flag=_get(rule, "flag", str, path, what) if cls is PredicateRule else None,
        **{k: _optional(rule, k, path, what) for k in _LOCATORS},
        **backport,
    )
    if not values["evidence"].startswith(EVIDENCE):
        raise BadInput(str(path), f"{what}: evidence must start with one of {', '.join(repr(e.strip()) for e in EVIDENCE)}")
    if values["evidence"].startswith("part of") and "(the rest: " not in values["evidence"]:
        raise BadInput(str(path), f"{what}: evidence 'part of upstream ...' must say '(the rest: ...)'")
    if values["evidence"].startswith("proposed") and "not merged" not in values["evidence"]:
        raise BadInput(str(path), f"{what}: evidence 'proposed upstream ...' must say 'not merged'")
    if cls is ListMemberRule:
        given = (values["call"] is not None or values["keyword"] is not None, values["target"] is not None,
                 values["test"] is not None)
        if sum(given) != 1 or given[0] and (values["call"] is None or values["keyword"] is None):
            raise BadInput(str(path), f"{what}: a list-member rule names 'call' and 'keyword', or 'target', or 'test'")
    if cls is PredicateRule and values["from_cc"] not in values["flag"]:
        raise BadInput(str(path), f"{what}: flag {values['flag']!r} does not contain from_cc {values['from_cc']!r}")
    if values["from_cc"] == values["to_cc"]:
        raise BadInput(str(path), f"{what}: from_cc and to_cc are both {values['from_cc']!r}")
    return cls(**{f: values[f] for f in cls._fields})


def _backport(rule: Table, path: Path, what: str) -> dict[str, object]:
    """A backport's diff (read beside the fix), its files, origin and base release."""
    name = _get(rule, "diff", str, path, what)
    file = path.parent / name
    if "\\" in name or name.startswith("/") or ".." in Path(name).parts:
        raise BadInput(str(path), f"{what}: diff {name!r} must be a path below {path.parent}")
    try:
        with open(file, "rb") as f:
            diff = f.read(_DIFF_MAX + 1)
    except OSError as exc:
        raise BadInput(str(file), f"{what}: cannot read the backport's diff ({exc.strerror})") from None
    if len(diff) > _DIFF_MAX:
        raise BadInput(str(file), f"{what}: the diff is over {_DIFF_MAX} bytes")
    files = []
    for a, b in re.findall(rb"^diff --git a/(\S+) b/(\S+)$", diff, re.M):
        if a != b:
            raise BadInput(str(file), f"{what}: renames are not carried ({a.decode()} -> {b.decode()})")
        files.append(a.decode("utf-8", "replace"))
    if not files:
        raise BadInput(str(file), f"{what}: not a diff (no 'diff --git a/X b/X' line)")
    origin = _get(rule, "origin", dict, path, what)
    where = f"{what}, origin"
    # A pull request or commit nobody could find is said so: "not known" (the release it landed in stays).
    pr = None if origin.get("pr") == "not known" else _get(origin, "pr", int, path, where)
    commit = None if origin.get("commit") == "not known" else _get(origin, "commit", str, path, where)
    cited = Origin(_get(origin, "project", str, path, where), pr, commit,
                   _get(origin, "title", str, path, where), _get(origin, "landed_in", str, path, where))
    refresh = []
    for i, entry in enumerate(rule.get("refresh", []), 1):
        where = f"{what}, refresh {i}"
        if not isinstance(entry, dict):
            raise BadInput(str(path), f"{where}: not a table")
        changed = _get(entry, "file", str, path, where)
        if changed not in files:
            raise BadInput(str(path), f"{where}: {changed!r} is not a file of the diff")
        refresh.append(Refresh(changed, _optional(entry, "since", path, where), _optional(entry, "until", path, where),
                               _strings(entry, "drop", path, where), _get(entry, "why", str, path, where)))
    return dict(files=tuple(files), diff=diff, origin=cited, made_on=_get(rule, "made_on", str, path, what),
                refresh=tuple(refresh))


def _globs(entry: Table, path: Path, what: str) -> tuple[str, ...]:
    files = _get(entry, "files", list, path, what)
    if not all(isinstance(f, str) and f for f in files) or not files and not entry.get("functions"):
        raise BadInput(str(path), f"{what}: 'files' must be a list of globs (or empty, with 'functions')")
    return tuple(files)


def read_fix(path: Path) -> Fix:
    doc = _read(path)
    name = path.stem
    rules = tuple(_rule(name, rule, path, f"{name}, rule {i}") for i, rule in enumerate(_get(doc, "rules", list, path, name), 1))
    paths = []
    for i, entry in enumerate(doc.get("path", []), 1):
        what = f"{name}, path {i}"
        if not isinstance(entry, dict):
            raise BadInput(str(path), f"{what}: not a table")
        functions = entry.get("functions", {})
        if not isinstance(functions, dict) or not all(
            isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in functions.values()
        ):
            raise BadInput(str(path), f"{what}: 'functions' maps a file to the list of defs whose gates count")
        blocks = []
        for j, block in enumerate(entry.get("blocks", []), 1):
            where = f"{what}, block {j}"
            if not isinstance(block, dict):
                raise BadInput(str(path), f"{where}: not a table")
            blocks.append((_get(block, "file", str, path, where), _get(block, "text", str, path, where),
                           _get(block, "says", str, path, where)))
        paths.append(FeaturePath(_get(entry, "project", str, path, what), _get(entry, "since", str, path, what),
                                 _optional(entry, "until", path, what), _globs(entry, path, what),
                                 tuple((k, tuple(v)) for k, v in functions.items()), tuple(blocks)))
    return Fix(name, _get(doc, "title", str, path, name), _get(doc, "rationale", str, path, name).strip(),
               _get(doc, "default", bool, path, name), rules, tuple(paths))


def read_fixes(folder: Path = HERE) -> dict[str, Fix]:
    """Every ``*.toml`` in ``folder`` but projects.toml, known-failures.toml (signatures.py reads
    it), known-speedups.toml (speedups.py) and known-kernels.toml (kernels.py): the default fixes first, then by name."""
    fixes = [read_fix(p) for p in data_files(folder) if p.name not in NOT_FIXES]
    return {f.name: f for f in sorted(fixes, key=lambda f: (not f.default, f.name))}


def read_projects(folder: Path = HERE) -> dict[str, Table]:
    path = folder / "projects.toml"
    doc = _read(path)
    for name, project in doc.items():
        for key in ("label", "distribution", "source_root", "key_style", "patches"):
            _get(project, key, str, path, name)
        if project["key_style"] not in tuple(KeyStyle):
            raise BadInput(str(path), f"{name}: key_style must be \"major\" or \"major.minor\"")
        installed = project.get("installed", {})
        if not isinstance(installed, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k.endswith("/") and v.endswith("/") and k and v
            for k, v in installed.items()
        ):
            raise BadInput(str(path), f"{name}.installed: maps a repository folder to its installed folder, both ending in '/'")
        if not isinstance(project.get("jit_builds", False), bool):
            raise BadInput(str(path), f"{name}: jit_builds must be true or false")
    return doc
