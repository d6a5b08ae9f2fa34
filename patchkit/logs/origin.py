"""Which checkout or environment a traceback's frames ran from, as a ``patchkit apply`` target.

A frame ``/root/sglang/python/sglang/srt/...`` ran the checkout ``/root/sglang`` (the project's
source root, "python" for SGLang, sits between); ``/opt/venv/lib/python3.11/site-packages/sglang/...``
ran the package installed for ``/opt/venv/bin/python``.  Debian's ``dist-packages`` belong to
``/usr/bin/pythonX.Y``.  Paths are read as text: nothing is looked up on disk.  A target is the
words of the command line (``("/root/sglang",)``, ``("--python", "/opt/venv/bin/python")``), for
``shlex.join``: a path a log names may hold spaces or ``;``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_INSTALLED = re.compile(r"(?P<prefix>.*)/lib/(?P<python>python\d+(?:\.\d+)?)/(?P<kind>site|dist)-packages/(?P<rest>.*)")


def interpreter(prefix: str, python: str, kind: str) -> str:
    """The interpreter whose packages live in ``<prefix>/lib/<python>/<kind>-packages``."""
    if kind == "dist" and prefix in ("/usr", "/usr/local"):
        return f"/usr/bin/{python}"
    return f"{prefix}/bin/python"


def target(path: str, package: str, source_root: str) -> tuple[str, ...] | None:
    """The apply target of a frame's ``path`` inside ``package`` (``sglang``): a checkout's
    root, ``--python EXE`` for an installed package, or None when the path is not in it."""
    installed = _INSTALLED.match(path)
    if installed:
        if installed["rest"].startswith(f"{package}/"):
            return ("--python", interpreter(installed["prefix"], installed["python"], installed["kind"]))
        return None
    inside = f"/{source_root}/{package}/" if source_root else f"/{package}/"
    at = path.rfind(inside)
    return (path[:at] or "/",) if at >= 0 else None


def python_of(paths: Iterable[str]) -> str | None:
    """The interpreter whose installed packages the first installed path of ``paths`` is in; None
    when none is installed (a checkout, a file run from elsewhere)."""
    for path in paths:
        installed = _INSTALLED.match(path)
        if installed:
            return interpreter(installed["prefix"], installed["python"], installed["kind"])
    return None


def site_of(path: str) -> tuple[str, str] | None:
    """The site-packages folder of an installed frame's ``path`` and the top folder below it
    (``/opt/venv/lib/python3.11/site-packages``, ``sgl_kernel``); None for any other path."""
    installed = _INSTALLED.match(path)
    if installed is None or "/" not in installed["rest"]:
        return None
    return f"{installed['prefix']}/lib/{installed['python']}/{installed['kind']}-packages", installed["rest"].split("/", 1)[0]


def targets(paths: Iterable[str], packages: Iterable[tuple[str, str]]) -> list[tuple[str, ...]]:
    """The distinct targets of ``packages`` ((name, source root), in order) that ``paths`` show."""
    paths = list(paths)
    found: list[tuple[str, ...]] = []
    for package, root in packages:
        for path in paths:
            where = target(path, package, root)
            if where is not None:
                if where not in found:
                    found.append(where)
                break
    return found
