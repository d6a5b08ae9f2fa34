"""Whether the failure modes' data (patchkit/fixes/modes/*.toml) reaches the newest releases on the
package index: ``make check-releases``, for maintainers (not part of make test).

    PYTHONPATH=tests .venv/bin/python -m support.check_releases [--modes DIR] [--cache DIR]

For each project that a mode's ``[[exposed]]`` bounds name, it asks the indexes pip is configured with
(support.index: pip's settings, the simple API) for the newest release, pre-releases and yanked files
left out.  Then, per mode, each bound read to an older release:

    <mode>: <project> read to X, newest on the index Y: the bound is not proven past X

and, for a bound with a first fixed release whose files prove the fix (a ``holds`` proof at
``fixed_in``), whether that file of the newest release still holds the text (read in part from the
index, or from the source archive for a proof of one: support.released).  It exits 0 whatever it
finds, 2 with one line when an index cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from patchkit.errors import MirrorError, PatchkitError
from patchkit.fixes.modes import Exposure, Mode, modes
from support import released
from support.index import Listed
from support.repos import ROOT

FOLDER = ROOT / "patchkit" / "fixes" / "modes"


class Unreadable(Exception):
    """An index (or a file on it) that cannot be read: exit 2."""


def newest(files: list[Listed]) -> str | None:
    """The newest release among ``files`` (wheels and source archives): pre-releases, dev releases and
    yanked files left out; a name that is neither is not counted."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    versions = []
    for f in files:
        if f.yanked:
            continue
        try:
            version = parse_wheel_filename(f.name)[1] if f.name.endswith(".whl") else parse_sdist_filename(f.name)[1]
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        if not version.is_prerelease:
            versions.append(version)
    return str(max(versions)) if versions else None


def newest_on_index(project: str) -> str | None:
    """The newest release of ``project`` over every index of pip's (None: no index has one)."""
    found = []
    for address, files, problem in released.listings(project):
        if problem is not None:
            raise Unreadable(f"cannot read the package index {address} for {project}: {problem}")
        found.extend(files)
    return newest(found)


def _mark(mode: Mode, exposure: Exposure, newest_of: dict, cache: Path | None) -> list[str]:
    lines = []
    for proof in exposure.fix_marks():
        version = newest_of[proof.distribution]
        if version is None:
            continue
        read = released.source_member if proof.sdist else released.member  # a file of the source archive there too
        try:
            data = read(proof.distribution, version, proof.file, cache)
        except released.MissingMember:
            where = " source archive" if proof.sdist else ""
            lines.append(f"{mode.name}: {proof.distribution} {version}{where} has no {proof.file}: read the release")
            continue
        except MirrorError as exc:
            raise Unreadable(str(exc)) from None
        if proof.text.encode() in data:
            lines.append(f"{mode.name}: {proof.distribution} {version}'s {proof.file} still holds {proof.text!r}"
                         f" (the fix of {exposure.fixed_in})")
        else:
            lines.append(f"{mode.name}: {proof.distribution} {version}'s {proof.file} does not hold {proof.text!r}"
                         f" (the fix of {exposure.fixed_in}): read the release")
    return lines


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def report(found: tuple[Mode, ...], cache: Path | None = None) -> list[str]:
    """The lines of the check (Unreadable when an index or a file on it cannot be read)."""
    exposures = [(m, e) for m in found for e in m.exposed]
    projects = sorted({e.project for _, e in exposures} | {p.distribution for _, e in exposures for p in e.fix_marks()})
    newest_of = {p: newest_on_index(p) for p in projects}
    lines = [f"{p}: no release on the package index" for p in projects if newest_of[p] is None]
    behind = 0
    for mode, exposure in exposures:
        version = newest_of[exposure.project]
        if version is not None and not exposure.read(version):
            behind += 1
            lines.append(f"{mode.name}: {exposure.project} read to {exposure.read_to}, newest on the index {version}:"
                         f" the bound is not proven past {exposure.read_to}")
        lines.extend(_mark(mode, exposure, newest_of, cache))
    newest_text = ", ".join(f"{p} {v}" for p, v in newest_of.items() if v is not None)
    lines.append(f"{_count(len(exposures), 'bound')} of {_count(len(found), 'mode')} against the newest releases"
                 f" ({newest_text}): {behind} read to an older release")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="PYTHONPATH=tests python -m support.check_releases",
        description="List the failure modes' bounds read to a release older than the newest on the package index,"
        " and whether the newest release still holds each fix's text.")
    parser.add_argument("--modes", type=Path, default=FOLDER, help="the modes' folder (default: patchkit/fixes/modes)")
    parser.add_argument("--cache", type=Path, default=None, help="default: $PATCHKIT_CACHE or ~/.cache/patchkit")
    args = parser.parse_args(argv)
    try:
        lines = report(modes(args.modes), args.cache)
    except (Unreadable, PatchkitError) as exc:  # pip's settings unread, a mode's file wrong: one line too
        print(f"check-releases: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
