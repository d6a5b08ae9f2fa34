"""What speeds up a collective where no fix of patchkit can: ``known-speedups.toml``.

Each ``[[speedups]]`` is upstream code the user turns on (``turn_on``) on a kind of machine
(``major``: every GPU's compute capability major; ``links``: ``pcie``, two or more GPUs and
every pair through PCIe only), with the first release of each project that has it
(``[[speedups.requires]]``: the first is the server that turns it on, its ``server``), and, where
its ``source`` quotes one, a measurement with who made it (``measured``, ``measured_by``; never one
from elsewhere).  ``patchkit doctor`` says it.  A wrong table is one BadInput line naming the file
and the key.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.errors import BadInput
from patchkit.fixes.load import HERE, Table, _get, _read, _strings, read_projects
from patchkit.values import Value
from patchkit.versions import at_least, is_version

SPEEDUPS = "known-speedups.toml"
LINKS = ("pcie",)


class Requires(Value):
    project: str
    since: str  # the first release that has it
    otherwise: str  # what the server does with an older one ("" when nothing is known)

    def met(self, version: str | None) -> bool:
        return at_least(version, self.since)


class Speedup(Value):
    name: str
    what: str
    major: int  # every GPU's compute capability major
    links: str  # "pcie": two or more GPUs, every pair through PCIe only
    turn_on: str
    serves: str
    source: str  # the server's file that turns it on
    measured_by: str  # "" when ``source`` quotes no measurement
    measured: tuple[str, ...]  # lines quoted from ``source`` (none where it quotes none)
    requires: tuple[Requires, ...]  # the server first

    @property
    def server(self) -> str:
        """The project whose server turns it on (``turn_on``): the first of ``requires``."""
        return self.requires[0].project


def _requires(entry: Table, path: Path, what: str, projects: Table) -> Requires:
    project = _get(entry, "project", str, path, what)
    if project not in projects:
        raise BadInput(str(path), f"{what}: project {project!r} is not a project of projects.toml")
    since = _get(entry, "since", str, path, what)
    if not is_version(since):
        raise BadInput(str(path), f"{what}: since {since!r} is not a release version")
    otherwise = _get(entry, "otherwise", str, path, what) if "otherwise" in entry else ""
    return Requires(project, since, otherwise)


def _speedup(entry: object, path: Path, what: str, projects: Table) -> Speedup:
    if not isinstance(entry, dict):
        raise BadInput(str(path), f"{what}: not a table")
    name = _get(entry, "name", str, path, what)
    what = f"speedup {name}"
    links = _get(entry, "links", str, path, what)
    if links not in LINKS:
        raise BadInput(str(path), f"{what}: links {links!r} is not one of {', '.join(LINKS)}")
    requires = entry.get("requires")
    if not isinstance(requires, list) or not requires or not all(isinstance(r, dict) for r in requires):
        raise BadInput(str(path), f"{what}: 'requires' must be a list of tables ([[speedups.requires]])")
    measured = _strings(entry, "measured", path, what, required=False)
    if bool(measured) != ("measured_by" in entry):
        raise BadInput(str(path), f"{what}: 'measured' and 'measured_by' go together (a measurement says who made it)")
    return Speedup(
        name, _get(entry, "what", str, path, what), _get(entry, "major", int, path, what), links,
        _get(entry, "turn_on", str, path, what), _get(entry, "serves", str, path, what),
        _get(entry, "source", str, path, what),
        _get(entry, "measured_by", str, path, what) if measured else "", measured,
        tuple(_requires(r, path, f"{what}, requires {i}", projects) for i, r in enumerate(requires, 1)),
    )


def read_speedups(folder: Path = HERE) -> tuple[Speedup, ...]:
    """Every ``[[speedups]]`` of ``folder/known-speedups.toml``, in the file's order."""
    path = folder / SPEEDUPS
    doc = _read(path)
    entries = doc.get("speedups", [])
    if not isinstance(entries, list):
        raise BadInput(str(path), "'speedups' must be an array of tables ([[speedups]])")
    projects = read_projects(folder)
    return tuple(_speedup(e, path, f"speedup {i}", projects) for i, e in enumerate(entries, 1))
