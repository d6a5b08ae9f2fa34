"""The shared objects of the distributions installed in site-packages folders, from their RECORDs.

A wheel's ``<name>-<version>.dist-info/RECORD`` (PEP 376 / the wheel spec) lists every file it
installed, one CSV row each, paths relative to the site-packages folder.  The rows naming a
shared object (``*.so``, ``*.so.13``) are the files read for CUDA code (``fatbin.py``); a bare
``*.cubin`` (flashinfer-cubin ships thousands) is counted, not read.  RECORDs are read as files,
their rows as CSV (``targets/dist_info.py``: regular files only, each within a cap);
nothing of the distribution is imported.  An editable install lists only its links in RECORD:
its checkout's shared objects are not found.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.targets import dist_info
from patchkit.values import Record

SHARED = re.compile(r"\.so(\.[0-9]+)*$")


class Distribution(Record):
    name: str  # canonical (packaging.utils.canonicalize_name): "sglang-kernel"
    version: str
    site: Path
    dist_info: Path
    shared: tuple[str, ...]  # the shared objects RECORD lists, relative to ``site``
    cubins: int  # bare .cubin files RECORD lists (not read)
    problem: str | None  # a RECORD that cannot be read


def distributions(sites: list[Path]) -> list[Distribution]:
    """Every distribution with a dist-info in ``sites`` (the first folder that has a name wins,
    as on sys.path), sorted by name."""
    found: dict[str, Distribution] = {}
    for site in sites:
        for name, version, folder in dist_info.installed(site):
            if name not in found:
                found[name] = _read_record(site, folder, name, version)
    return [found[name] for name in sorted(found)]


def _read_record(site: Path, info: Path, name: str, version: str) -> Distribution:
    try:
        rows = dist_info.record(info, mentioning=(".so", ".cubin"))  # the rows of the files counted here
    except BadInput as exc:
        return Distribution(name, version, site, info, (), 0, str(exc))
    if rows is None:
        record = info / "RECORD"
        return Distribution(name, version, site, info, (), 0, f"{record}: cannot read it (No such file or directory)")
    shared, cubins = [], 0
    for row in rows:
        path = os.path.normpath(row.path)
        if path.startswith(("..", "/")) or path == ".":
            continue  # installed outside site-packages (scripts, headers), or an empty path
        if SHARED.search(path):
            shared.append(path)
        elif path.endswith(".cubin"):
            cubins += 1
    return Distribution(name, version, site, info, tuple(sorted(shared)), cubins, None)
