"""Fixes that are a setting, not a patch (``known-settings.toml``): an environment variable, a
server flag or an upgrade, each spelled per range of the installed project's releases, with the
GPUs it is for, its evidence and what was measured.  Data only: ``judge/settings.py`` judges each
from what is installed, ``render/settings.py`` says it.  A wrong file is one BadInput line naming
the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar, overload

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, Table, _get, _optional, _read, _strings
from patchkit.types import StrEnum
from patchkit.values import Value

_E = TypeVar("_E", bound=StrEnum)
from patchkit.versions import at_least, is_version

SETTINGS = "known-settings.toml"


class SettingKind(StrEnum):
    """What a setting is: where it is set."""

    ENV = "env"  # an environment variable of the server's process
    FLAG = "flag"  # a flag of the server's command line
    UPGRADE = "upgrade"  # a distribution to upgrade


class Check(StrEnum):
    """How ``judge/settings.py`` judges a setting from what is installed."""

    PTXAS = "ptxas-knows-target"  # the ptxas the installed Triton calls knows the GPU's sm_ target
    DEEPGEMM = "deepgemm-without-sm12x"  # the DeepGEMM the project loads has no impls/sm120_*.cuh
    NCCL = "nccl-pcie"  # the installed NCCL is older than the release without the PCIe fault
    RELEASE = "release-has-it"  # the installed release has the variable or flag (its marks)
    LOG_ONLY = "from-log-only"  # nothing installed tells: only a log (a hang) does


class Spelling(Value):
    """How one range of releases (``since`` <= version < ``before``) spells the setting."""

    since: str
    before: str | None
    name: str  # the variable, the flag, the distribution
    value: str | None  # what to set it to; None for a path the judge finds (a ptxas)
    needed: bool  # False: this range needs nothing
    ptxas: tuple[str, str | None] | None  # the CUDA releases of a ptxas this range takes: (since, before)
    marks: tuple[tuple[str, str], ...]  # (file, text) the installed package must hold for it to exist

    def covers(self, version: str) -> bool:
        return at_least(version, self.since) and (self.before is None or not at_least(version, self.before))


class Setting(Value):
    name: str
    kind: SettingKind
    project: str  # the distribution whose release decides it
    check: Check
    ccs: tuple[CC, ...]
    rank: int  # 1: wrong output without it, silently; 2: a crash or a hang
    does: str
    does_not: str
    evidence: str
    measured: str
    spellings: tuple[Spelling, ...]
    caveat: str | None = None  # what can still go wrong with it set (said with it by doctor and verify)
    # DEEPGEMM: where the project loads DeepGEMM from, in its order (site-packages paths)
    loads_from: tuple[str, ...] = ("deep_gemm",)
    admitted_by: tuple[str, str] | None = None  # DEEPGEMM: (file, text) the release holds where it admits the 12.x family
    probe: tuple[str, ...] = ()  # DEEPGEMM: the APIs the project's probe asks of deep_gemm/__init__.py before it uses it

    def spelling(self, version: str | None) -> Spelling | None:
        """How the installed release spells it; None: no range covers it (or no version)."""
        return next((s for s in self.spellings if version and s.covers(version)), None)


@overload
def _version(doc: Table, key: str, path: Path, what: str, required: Literal[True] = True) -> str: ...
@overload
def _version(doc: Table, key: str, path: Path, what: str, required: bool) -> str | None: ...
def _version(doc: Table, key: str, path: Path, what: str, required: bool = True) -> str | None:
    value = _get(doc, key, str, path, what) if required or key in doc else None
    if value is not None and not is_version(value):
        raise BadInput(str(path), f"{what}: {key!r} is not a version: {value!r}")
    return value


def _spelling(doc: object, path: Path, what: str) -> Spelling:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    needed = doc.get("needed", True)
    if not isinstance(needed, bool):
        raise BadInput(str(path), f"{what}: 'needed' must be true or false")
    ptxas = None
    if "ptxas_since" in doc:
        ptxas = (_version(doc, "ptxas_since", path, what), _version(doc, "ptxas_before", path, what, required=False))
    marks = doc.get("marks", [])
    if not isinstance(marks, list) or not all(isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) and x for x in m)
                                              for m in marks):
        raise BadInput(str(path), f"{what}: 'marks' must be a list of [file, text] pairs")
    return Spelling(_version(doc, "since", path, what), _version(doc, "before", path, what, required=False),
                    _get(doc, "name", str, path, what), _optional(doc, "value", path, what), needed, ptxas,
                    tuple((f, t) for f, t in marks))


def _enum(cls: type[_E], doc: Table, key: str, path: Path, what: str) -> _E:
    word = _get(doc, key, str, path, what)
    try:
        return cls(word)
    except ValueError:
        raise BadInput(str(path), f"{what}: {key!r} is {word!r}, not one of {', '.join(m.value for m in cls)}") from None


def _setting(doc: object, path: Path, what: str) -> Setting:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    name = _get(doc, "name", str, path, what)
    what = f"setting {name!r}"
    ccs = []
    for word in _get(doc, "ccs", list, path, what):
        try:
            ccs.append(CC.parse(word))
        except (BadInput, ValueError, TypeError):
            raise BadInput(str(path), f"{what}: 'ccs' holds {word!r}, not a compute capability such as \"12.1\"") from None
    rank = _get(doc, "rank", int, path, what)
    if rank not in (1, 2):
        raise BadInput(str(path), f"{what}: 'rank' must be 1 (wrong output) or 2 (a crash or a hang)")
    spellings = tuple(_spelling(s, path, f"{what}, spelling {i}") for i, s in enumerate(_get(doc, "spellings", list, path, what), 1))
    if not spellings:
        raise BadInput(str(path), f"{what}: 'spellings' is empty")
    return Setting(name, _enum(SettingKind, doc, "kind", path, what), _get(doc, "project", str, path, what),
                   _enum(Check, doc, "check", path, what), tuple(ccs), rank, _get(doc, "does", str, path, what),
                   _get(doc, "does_not", str, path, what), _get(doc, "evidence", str, path, what),
                   _get(doc, "measured", str, path, what), spellings, _optional(doc, "caveat", path, what),
                   *_deepgemm(doc, path, what))


def _deepgemm(doc: Table, path: Path, what: str) -> tuple[tuple[str, ...], tuple[str, str] | None, tuple[str, ...]]:
    """``loads_from``, ``admitted_by`` and ``probe`` of a DeepGEMM setting (their defaults when absent)."""
    loads_from = _strings(doc, "loads_from", path, what, required=False) or ("deep_gemm",)
    admitted = _strings(doc, "admitted_by", path, what, required=False) or None
    if admitted is not None and len(admitted) != 2:
        raise BadInput(str(path), f"{what}: 'admitted_by' must be [file, text]")
    admitted_by = None if admitted is None else (admitted[0], admitted[1])
    return loads_from, admitted_by, _strings(doc, "probe", path, what, required=False)


def read_settings(folder: Path = HERE) -> tuple[Setting, ...]:
    """The settings of ``known-settings.toml``, in its order."""
    path = folder / SETTINGS
    found = _read(path).get("settings", [])
    if not isinstance(found, list):
        raise BadInput(str(path), "'settings' must be an array of tables ([[settings]])")
    settings = tuple(_setting(s, path, f"setting {i}") for i, s in enumerate(found, 1))
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise BadInput(str(path), f"two settings share a name: {sorted(n for n in names if names.count(n) > 1)[0]}")
    return settings
