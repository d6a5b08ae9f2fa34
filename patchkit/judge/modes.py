"""The failure modes (``fixes/modes.py``) judged for what is installed and the GPUs: which this
install is exposed to, under which conditions, and the ways out that fit its releases.  Values
only; ``render/modes.py`` says them.  Read only: the installed files are read as text, bounded,
never imported.

- A release inside an ``Exposure``'s range, on a GPU of the mode's, is ``EXPOSED`` when the mode
  needs no condition or the conditions are stated (``doctor -- CMD``), ``IF`` while a condition is
  unstated.
- A release newer than the data (``read_to``) is read: where the first fixed release's texts
  (``fix_marks``) are in its files it is not exposed; where no fix is known, or its texts are not
  found, it is ``UNREAD``: never judged like the last release read (docs/RELEASES.md).
- A mode a fix or a setting cures is ``AVERTED`` where that way out is in effect here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.fixes.modes import Condition, Exposure, Mode, WayKind, WayOut, modes
from patchkit.judge.launch import Launch
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.judge.kernels import FileHere

_MAX_MARK_FILE = 8 << 20  # a source file read for a fix's text


class Exposed(Enum):
    """What a mode is to this install."""

    EXPOSED = "exposed"  # it happens here (its conditions, if any, are stated)
    IF = "exposed if"  # it happens here under a condition nobody stated
    AVERTED = "averted"  # exposed, and a way out is in effect here
    UNREAD = "newer than read"  # a release newer than the data, whose files do not tell


class ModeHere(Value):
    mode: Mode
    exposure: Exposure
    version: str  # the installed release of the exposure's project
    gpus: tuple[CC, ...]  # the GPUs judged for that the mode is of
    verdict: Exposed
    unstated: tuple[Condition, ...]  # the conditions nobody stated (``IF``)
    ways: tuple[WayOut, ...]  # the ways out that fit the installed releases, in order
    averted_by: WayOut | None = None


def _holds(site_files: list[Path], rel: str, text: str) -> bool | None:
    """Whether the installed file ``rel`` holds ``text`` (None: no such file in any site)."""
    for site in site_files:
        path = site / rel
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_MARK_FILE)
        except OSError:
            continue
        return text.encode() in data
    return None


def _newer_is_fixed(exposure: Exposure, sites: list[Path]) -> bool | None:
    """A release newer than the data: True where its files hold every text of the first fixed
    release, False where one is missing, None where nothing tells (no fix known, no file)."""
    # The texts of source files: a compiled file's name changes with the Python and the build it is for.
    marks = [p for p in exposure.fix_marks() if not _compiled(p.file)]
    if not marks:
        return None
    found = [_holds(sites, p.file, p.text) for p in marks]
    return None if None in found else all(found)


def _compiled(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".so") or ".so." in name


def _without_code(paths: tuple[str, ...], gpus: tuple[CC, ...], sites: list[Path], judged: Mapping[Path, FileHere]) -> tuple[CC, ...]:
    """Those of ``gpus`` that the first of ``paths`` installed carries no code for (its fat-binary headers
    read, or judged already: ``judged``); all of them where none of the paths is installed (the release decides)."""
    from patchkit.judge.kernels import judge
    from patchkit.kernels.compat import NONE

    for rel in paths:
        for site in sites:
            if (site / rel).is_file():
                found = judged.get(site / rel) or judge(str(site / rel), rel, list(gpus))
                return tuple(f.cc for f in found.fits if f.runs == NONE and f.cc in gpus) if not found.binary.problem else gpus
    return gpus


def ways_here(mode: Mode, versions: Mapping[str, str]) -> tuple[WayOut, ...]:
    """The ways out of ``mode`` that fit the releases ``versions`` installed (canonical name -> release), in
    order: doctor's for a mode this install is exposed to, diagnose's for a mode a log shows."""
    return tuple(w for w in mode.ways_out if w.project in versions and w.fits(versions[w.project]))


def modes_here(versions: dict[str, str], ccs: list[CC], sites: list[Path],
               launch: Launch | None = None, in_effect: frozenset[str] = frozenset(),
               compiled: Mapping[Path, FileHere] | None = None) -> list[ModeHere]:
    """Each mode this install is exposed to (or may be), silent wrong output first.  ``versions``:
    canonical distribution name -> installed release; ``ccs``: the GPUs judged for; ``launch``: the
    server's command line (``doctor -- CMD``: the conditions it states or rules out; None: every
    condition open); ``in_effect``: the names of the fixes and settings in effect here (a way out of
    those averts the mode); ``compiled``: the shared objects judged already for ``ccs``, by path (doctor's
    compiled-code section: a 500 MB libtorch_cuda.so is read once)."""
    found = []
    for mode in modes():
        judged = [h for e in mode.exposed for h in [_judge(mode, e, versions, ccs, sites, launch, in_effect, compiled or {})]
                  if h is not None]
        if judged:  # one finding per mode: the exposure that says the most
            found.append(min(judged, key=lambda h: _ORDER.index(h.verdict)))
    return sorted(found, key=lambda h: (h.mode.cost.rank, h.verdict != Exposed.EXPOSED, h.mode.survey))


_ORDER = (Exposed.EXPOSED, Exposed.IF, Exposed.UNREAD, Exposed.AVERTED)


def _judge(mode: Mode, exposure: Exposure, versions: dict[str, str], ccs: list[CC], sites: list[Path],
           launch: Launch | None, in_effect: frozenset[str], compiled: Mapping[Path, FileHere]) -> ModeHere | None:
    """The mode at one exposure: None where the release, the GPUs or the launch line keep it out."""
    gpus = tuple(g for g in (exposure.gpus or mode.gpus) if g in ccs)
    version = versions.get(exposure.project)
    if not gpus or version is None:
        return None
    if exposure.read(version):
        if not exposure.covers(version):
            return None
        verdict = Exposed.EXPOSED
    else:
        if _newer_is_fixed(exposure, sites):
            return None
        verdict = Exposed.UNREAD  # no fix known, or its texts not in the files: not judged like the last read
    if exposure.code_in:  # read only where the release leaves it open (a torch out of the range is not read)
        gpus = _without_code(exposure.code_in, gpus, sites, compiled)
        if not gpus:
            return None
    when = mode.when if exposure.when is None else exposure.when
    said = {c: launch.holds(c) if launch is not None else None for c in when}
    if False in said.values():
        return None  # the launch line rules out what the mode needs
    unstated = tuple(c for c, v in said.items() if v is None)
    ways = ways_here(mode, versions)
    averted = next((w for w in ways if w.kind in (WayKind.PATCH, WayKind.SETTING) and w.what in in_effect), None)
    if averted is not None:
        verdict = Exposed.AVERTED
    elif verdict == Exposed.EXPOSED and unstated:
        verdict = Exposed.IF
    return ModeHere(mode, exposure, version, gpus, verdict, unstated, ways, averted)


def failing(found: list[ModeHere]) -> list[ModeHere]:
    """The modes known to break this install as it is: exposed with every condition stated, no way out in effect."""
    return [h for h in found if h.verdict == Exposed.EXPOSED]


class FlagHere(Value):
    """A flag of the server's command line that a way out names, against the installed release."""

    flag: str  # as the launch line gives it ("--moe-backend")
    project: str
    version: str
    read_in: tuple[tuple[str | None, str | None], ...]  # the releases the data reads it in: (since, before)
    known: bool  # whether the installed release is one of them (False: not read there, or not there)


def flags_here(launch: Launch, versions: dict[str, str]) -> list[FlagHere]:
    """Each flag of ``launch`` that a mode's way out names (another backend, a switch), judged for the
    release of its project installed: known there, or not read in that release."""
    given = set(launch.options) | set(launch.switches)
    ranges: dict[tuple[str, str], list[WayOut]] = {}
    for mode in modes():
        for way in mode.ways_out:
            flag = way.what.split()[0]
            if way.kind == WayKind.BACKEND and flag.startswith("--") and flag in given and way.project in versions:
                ranges.setdefault((flag, way.project), []).append(way)
    found = []
    for (flag, project), ways in sorted(ranges.items()):
        version = versions[project]
        spans = tuple(dict.fromkeys((w.since, w.before) for w in ways))
        found.append(FlagHere(flag, project, version, spans, any(w.fits(version) for w in ways)))
    return found
