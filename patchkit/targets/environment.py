"""What an interpreter's environment has installed, read as text: where it imports from,
and each project patchkit knows installed there, as a wheel or as an editable install.

Nothing of the environment runs: the interpreter is asked for its paths under ``-I -S``
(no ``site``, no ``.pth`` file), and dist-info folders, ``direct_url.json`` (PEP 610),
setuptools' ``__editable__.*.pth`` files and their finders' ``MAPPING``, and legacy
``.egg-link`` files are read as text or JSON, never imported or executed.  A project
that is there in a form patchkit cannot read or patch (an editable install whose folder
is gone, a dist-info without its package, an unreadable ``direct_url.json``, a zipped egg)
is a BadInput naming the file: never "not installed", so no command answers "ok" for it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.bounded import load_json, read_file
from patchkit.errors import BadInput
from patchkit.fixes.registry import PROJECTS, Project
from patchkit.targets.import_path import TEXT_CAP, ImportPath, candidates, import_path, mapping, read_text
from patchkit.targets.interpreter import interpreter, site_packages_of
from patchkit.types import StrEnum
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only
    from patchkit.targets.import_path import ImportPlace


class InstallForm(StrEnum):
    """How a project is installed for an interpreter (``Install.how``; --json's ``how``)."""

    WHEEL = "wheel"  # its files in site-packages
    EDITABLE = "editable"  # a checkout that the environment imports


WHEEL, EDITABLE = InstallForm.WHEEL, InstallForm.EDITABLE


class Install(Value):
    """One project installed for an interpreter."""

    project: str  # the project's name in patchkit ("sglang")
    how: InstallForm
    site: Path  # the site-packages folder where it was found
    package: Path  # the package folder Python imports: site/sglang, or a checkout's python/sglang
    dist_info: Path | None  # its dist-info folder (a legacy .egg-link has none)
    via: Path  # the file that says where the package is (its dist-info, direct_url.json, .pth, .egg-link)

    @property
    def path(self) -> Path:
        """What a command opens: the site-packages folder of a wheel, the package folder of an editable install."""
        return self.site if self.how is WHEEL else self.package


class Environment(Value):
    """What ``--python EXE`` holds: the interpreter, where it imports from, what is installed."""

    exe: Path
    sites: list[Path]
    installs: list[Install]
    missing: list[str]  # the projects asked for that are not installed (their names)


def read_environment(python: str, project: str | None = None, none: bool = False) -> Environment:
    """Every project patchkit knows (or only ``project``) installed for the interpreter
    ``python`` (a path, a name on PATH or a virtualenv folder), each where it would import
    it from; BadInput when one is there in a form patchkit cannot judge, and when none is,
    unless ``none`` (doctor: what else is installed, Triton or torch alone, is judged still)."""
    wanted = [PROJECTS[project]] if project else list(PROJECTS.values())
    exe = interpreter(python)
    sites = site_packages_of(exe)
    path = import_path(sites)
    installs, missing = [], []
    for p in wanted:
        found = _install(sites, path, p)
        if found is None:
            missing.append(p.name)
        else:
            installs.append(found)
    env = Environment(exe, sites, installs, missing)
    if not installs and not none:
        raise none_installed(env)
    return env


def none_installed(env: Environment) -> BadInput:
    """The error of an environment that has none of the projects looked for."""
    looked = ", ".join(map(str, env.sites)) or "no site-packages"
    return BadInput(str(env.exe), f"{' or '.join(env.missing)} is not installed for this interpreter (looked in {looked})")


def _install(sites: list[Path], path: ImportPath, p: Project) -> Install | None:
    """Project ``p`` as Python imports it for an interpreter whose site-packages are ``sites``
    (``path``: its sys.path and editable finders): None when nothing of it is there, BadInput
    when Python would import it from something patchkit cannot read or patch, or when what is
    installed disagrees with what Python imports."""
    dist = p.distribution.replace("-", "_")
    egg = f"{_glob(dist)}-*.egg"
    for site in sites:
        for zipped in sorted(site.glob(egg)) if site.is_dir() else ():
            if zipped.is_file():
                raise BadInput(str(zipped), f"a zipped egg of {p.label}: patchkit cannot patch files inside a zip archive; reinstall it with pip")
    seen = candidates(p.name, path, p.label, egg)
    win = seen.first()
    if len(seen.found) > 1 and path.reordering:
        a, b = seen.found[0].package, seen.found[1].package
        raise BadInput(str(path.reordering[0]), f"runs code that rewrites sys.path, which patchkit never runs: it cannot tell "
                                                f"whether Python imports {p.label} from {a} or from {b}")
    if win is None:
        shadowed = next((f for f in seen.found if f.finder is not None), None)
        if seen.namespace is not None and shadowed is not None:
            raise BadInput(str(seen.namespace), f"a folder {p.name}/ without __init__.py on sys.path: Python imports it as an empty "
                                                f"namespace package and never asks the editable finder of {shadowed.via.name} "
                                                f"({shadowed.package}); remove the folder")
        for site in sites:
            found = _not_imported(site, p)
            if found is not None:
                return found
        return None
    if win.entry is not None and win.entry.folder.name.endswith(".egg"):
        raise BadInput(str(win.entry.folder), f"an unzipped egg of {p.label}, on sys.path through {win.via.name}: patchkit "
                                              "judges a release by its dist-info (its name, its RECORD), which an egg does not have; "
                                              "reinstall it with pip")
    for loser in seen.found[1:]:
        if loser.site == win.site:
            why = ("setuptools' editable finder is asked only when no folder on sys.path holds the package"
                   if loser.finder is not None else "it comes later on sys.path")
            raise BadInput(str(loser.via), f"{p.label} at {loser.package}, which Python does not import: it imports {win.package} "
                                           f"({why}); the two installs disagree: {_remedy(loser, p)}")
    for site in sites[: sites.index(win.site)]:  # importlib.metadata would read an earlier dist-info first
        if site.is_dir() and any(site.glob(p.dist_info())):
            _not_imported(site, p)
    infos = _one_dist_info(win.site, p)
    if win.entry is not None and win.entry.pth is None:  # site-packages/sglang: a wheel
        if not infos:
            raise BadInput(str(win.package), f"{p.label} without a dist-info: patchkit cannot tell which release it is; reinstall it with pip")
        if _editable_of(infos[0]):
            raise BadInput(str(infos[0]), f"an editable install of {p.label} by its dist-info, but Python imports {win.package}, "
                                          "which no editable install puts there; the two disagree: reinstall it with pip")
        return Install(p.name, WHEEL, win.site, win.package, infos[0], infos[0])
    return Install(p.name, EDITABLE, win.site, win.package, infos[0] if infos else None, win.via)


def _remedy(loser: ImportPlace, p: Project) -> str:
    """What ends a disagreement: an editable install no dist-info records any more is files to
    remove; otherwise pip uninstalls both."""
    named = re.fullmatch(r"__editable__\.(.+)\.pth", loser.via.name)
    if named and not (loser.site / f"{named.group(1)}.dist-info").is_dir():
        files = " and ".join(f.name for f in (loser.via, loser.finder.module if loser.finder else None) if f)
        return f"no {named.group(1)}.dist-info records that editable install any more: remove {files} from {loser.site}"
    return f"`pip uninstall {p.distribution}` until none is left, then reinstall the one you want"


def _one_dist_info(site: Path, p: Project) -> list[Path]:
    """The dist-info of ``p`` in ``site`` ([] or one); BadInput naming both when there are two."""
    infos = sorted(site.glob(p.dist_info()))
    if len(infos) > 1:
        raise BadInput(str(site), f"two dist-infos of {p.label}, {infos[0].name} and {infos[1].name}: importlib.metadata takes "
                                  "whichever the folder lists first, so which release this is cannot be told (a half-done "
                                  f"upgrade?); `pip uninstall {p.distribution}` until none is left, then reinstall it")
    return infos


def _editable_of(info: Path) -> bool:
    """Whether the dist-info records an editable install (PEP 610)."""
    direct = info / "direct_url.json"
    return direct.exists() and _direct_url(direct) is not None


def _not_imported(site: Path, p: Project) -> Install | None:
    """What of ``p`` is in ``site`` although Python imports nothing of it from there: BadInput
    naming it (an editable install whose folder is gone, a dist-info without its package, an
    unzipped egg no .pth names), never "not installed"; a legacy ``.egg-link`` is read as pip
    reads it; None when nothing of it is there."""
    if not site.is_dir():
        return None
    dist = p.distribution.replace("-", "_")
    infos = _one_dist_info(site, p)
    if infos:
        info = infos[0]
        direct = info / "direct_url.json"
        url = _direct_url(direct) if direct.exists() else None
        editable = _editable_pth(site, dist)
        if url is not None or editable is not None:
            package = _editable_package(p, url, editable, direct)
            raise BadInput(str(editable or direct), f"an editable install of {p.label} from {package} that Python does not "
                                                    "import (no .pth puts it on sys.path, no finder maps it); reinstall it")
        raise BadInput(str(info), f"a dist-info of {p.label} without its package {p.name}/ beside it (a half-done install or uninstall?); reinstall it")
    for link in sorted(site.glob(f"{_glob(dist)}.egg-link")):
        folder = _first_line(link)
        linked = _package_in(p, Path(folder), link) if folder else None
        if linked is None:
            raise BadInput(str(link), f"an .egg-link of {p.label} that names no folder")
        return Install(p.name, EDITABLE, site, linked, None, link)
    for egg in sorted(site.glob(f"{_glob(dist)}-*.egg")):
        raise BadInput(str(egg), f"an unzipped egg of {p.label} that no .pth puts on sys.path: patchkit judges a release by "
                                 "its dist-info (its name, its RECORD), which an egg does not have; reinstall it with pip")
    return None


def _glob(name: str) -> str:
    """A glob that matches ``name`` in any case, with ``-``, ``_`` or ``.`` between its words (PEP 503)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else "[-_.]" if c in "-_." else c for c in name)


def _direct_url(path: Path) -> str | None:
    """The folder of an editable install that ``direct_url.json`` names; None for any other install."""
    try:
        doc = load_json(read_file(path, TEXT_CAP, "direct_url.json").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(str(path), f"unreadable direct_url.json ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        raise BadInput(str(path), "unreadable direct_url.json (not an object with a \"url\" string, PEP 610)")
    info = doc.get("dir_info")
    if not isinstance(info, dict) or info.get("editable") is not True:
        return None
    local = re.match(r"file://(?:localhost)?(/[^?#]*)$", doc["url"])
    if local is None:
        raise BadInput(str(path), f"an editable install from {doc['url']!r}, which is not a local folder")
    # Percent-decoded as UTF-8, the way pip wrote it (urllib.parse costs more to import than this).
    raw = re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), local.group(1).encode("utf-8", "surrogateescape"))
    return os.fsdecode(raw)


def _editable_pth(site: Path, dist: str) -> Path | None:
    """setuptools' ``__editable__.<dist>-<version>.pth`` of the distribution, if there is one."""
    found = sorted(site.glob(f"__editable__.{_glob(dist)}-*.pth"))
    return found[0] if found else None


def _editable_package(p: Project, url: str | None, pth: Path | None, direct: Path) -> Path:
    """The package folder an editable install imports: the finder's MAPPING, a compat-mode
    ``.pth`` folder, or the project folder that ``direct_url.json`` names."""
    if pth is not None:
        text = _text(pth)
        finder = re.match(r"\s*import\s+([A-Za-z_][\w]*)\s*;", text)
        if finder:
            package = _mapping(pth.parent / f"{finder.group(1)}.py", p)
            if package is not None:
                return _existing(package, pth.parent / f"{finder.group(1)}.py", p)
        else:
            for line in text.splitlines():
                if line.strip() and not line.startswith(("#", "import ", "import\t")):
                    package = _package_in(p, Path(line.strip()), pth)
                    if package is not None:
                        return package
    if url is None:
        raise BadInput(str(pth), f"an editable install of {p.label} whose .pth names no folder patchkit can read")
    package = _package_in(p, Path(url), direct)
    if package is None:
        raise BadInput(str(direct), f"an editable install of {p.label} from {url}, which is not there (moved or deleted?); reinstall it")
    return package


def _mapping(finder: Path, p: Project) -> Path | None:
    """The folder that a setuptools editable finder's ``MAPPING`` gives the package (read as text)."""
    folder = mapping(finder, p.label).get(p.name)
    return Path(folder) if isinstance(folder, str) else None


def _package_in(p: Project, folder: Path, via: Path) -> Path | None:
    """The package below a project folder named by ``via`` (``folder/sglang``, or ``folder/src/sglang``)."""
    if not folder.is_dir():
        raise BadInput(str(via), f"an editable install of {p.label} from {folder}, which is not there (moved or deleted?); reinstall it")
    for package in (folder / p.name, folder / "src" / p.name):
        if (package / "__init__.py").is_file():
            return package
    return None


def _existing(package: Path, via: Path, p: Project) -> Path:
    if not (package / "__init__.py").is_file():
        raise BadInput(str(via), f"an editable install of {p.label} from {package}, which is not there (moved or deleted?); reinstall it")
    return package


def _text(path: Path) -> str:
    return read_text(path, "file")


def _first_line(path: Path) -> str:
    lines = _text(path).splitlines()
    return lines[0].strip() if lines else ""
