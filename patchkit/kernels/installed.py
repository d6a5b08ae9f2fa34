"""The shared objects of the distributions installed in site-packages folders, from their RECORDs.

A wheel's ``<name>-<version>.dist-info/RECORD`` (PEP 376 / the wheel spec) lists every file it
installed, one CSV row each, paths relative to the site-packages folder.  The rows naming a
shared object (``*.so``, ``*.so.13``) are the files read for CUDA code (``fatbin.py``); a bare
``*.cubin`` (flashinfer-cubin ships thousands) is counted, not read.  RECORDs are read as
text, each at most ``MAX_RECORD`` bytes; nothing of the distribution is imported.  An
editable install lists only its links in RECORD: its checkout's shared objects are not found.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import NamedTuple

MAX_RECORD = 64 << 20  # torch's RECORD is a few MB
SHARED = re.compile(r"\.so(\.[0-9]+)*$")
_DIST_INFO = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info$")


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 normalises it: ``sglang_kernel`` -> ``sglang-kernel``."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Distribution(NamedTuple):
    name: str  # canonical: "sglang-kernel"
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
        try:
            names = sorted(os.listdir(site))
        except OSError:
            continue
        for folder in names:
            match = _DIST_INFO.fullmatch(folder)
            if match is None or canonical(match["name"]) in found:
                continue
            dist = _read_record(site, site / folder, canonical(match["name"]), match["version"])
            found[dist.name] = dist
    return [found[name] for name in sorted(found)]


def _read_record(site: Path, info: Path, name: str, version: str) -> Distribution:
    record = info / "RECORD"
    try:
        with open(record, "rb") as f:
            data = f.read(MAX_RECORD + 1)
    except OSError as exc:
        return Distribution(name, version, site, info, (), 0, f"{record}: cannot read it ({exc.strerror or exc})")
    if len(data) > MAX_RECORD:
        return Distribution(name, version, site, info, (), 0, f"{record}: larger than {MAX_RECORD >> 20} MiB, not read")
    shared, cubins = [], 0
    try:
        for row in csv.reader(data.decode("utf-8", "replace").splitlines()):
            if not row or not row[0]:
                continue
            path = os.path.normpath(row[0])
            if path.startswith(("..", "/")):
                continue  # installed outside site-packages (scripts, headers)
            if SHARED.search(path):
                shared.append(path)
            elif path.endswith(".cubin"):
                cubins += 1
    except csv.Error as exc:
        return Distribution(name, version, site, info, (), 0, f"{record}: not a CSV file ({exc})")
    return Distribution(name, version, site, info, tuple(sorted(shared)), cubins, None)
