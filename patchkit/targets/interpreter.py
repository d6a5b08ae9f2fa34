"""The interpreter ``--python`` names and where it imports installed packages from, found
without running any code of its environment (docs/ARCHITECTURE.md, "targets")."""

from __future__ import annotations

import os
import re
from pathlib import Path

from patchkit.bounded import TIME, load_json, run
from patchkit.errors import BadInput
from patchkit.targets.import_path import read_text
from patchkit.values import Value

# Asked of the target interpreter under -I -S: its version, its own idea of its path (a
# pyenv shim execs the real one), its platlibdir, its user site unless disabled
# (PYTHONUSERBASE and PYTHONNOUSERSITE are read from os.environ, which -I leaves visible)
# and its system site-packages (importing ``site`` under -S defines functions only: no
# .pth file runs).
_PROBE = """
import json, os, site, sys, sysconfig
user = None
if not os.environ.get('PYTHONNOUSERSITE'):
    get = getattr(sysconfig, 'get_preferred_scheme', None)
    user = sysconfig.get_path('purelib', get('user') if get else os.name + '_user')
system = list(getattr(site, 'getsitepackages', list)())
system += [sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]
libdir = getattr(sys, 'platlibdir', 'lib')
print(json.dumps(['%d.%d' % sys.version_info[:2], sys.executable, libdir, user, system]))
"""


def interpreter(python: str) -> Path:
    """The interpreter ``--python`` names, as a shell would find it, symlinks kept (a
    virtualenv's ``bin/python`` links to the base interpreter): a bare name is looked up
    on PATH, a virtualenv folder means its ``bin/python``."""
    if not python:
        raise BadInput("--python", "empty: give an interpreter, a name on PATH or a virtualenv folder")
    if os.sep not in python:
        import shutil  # for a bare name only: shutil imports the compression modules

        found = shutil.which(python)
        if found is None:
            here = f" (for the one in this folder, write ./{python})" if os.path.lexists(python) else ""
            raise BadInput(python, f"not found on PATH{here}")
        return Path(found).absolute()
    exe = Path(python).absolute()
    if exe.is_dir():
        if not (exe / "pyvenv.cfg").is_file():
            raise BadInput(python, "a folder that is not a virtualenv (no pyvenv.cfg); give the interpreter itself")
        in_bin = next((exe / "bin" / name for name in ("python", "python3") if (exe / "bin" / name).is_file()), None)
        if in_bin is None:
            raise BadInput(python, "a virtualenv without bin/python or bin/python3")
        exe = in_bin
    if not exe.exists():
        raise BadInput(python, "no such file or directory")
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise BadInput(python, "not an executable file")
    return exe


class _Venv(Value):
    folder: Path
    sees_system: bool  # include-system-site-packages = true
    version: str | None  # "3.11" from its version (venv) or version_info (uv, virtualenv) line


def _virtualenv(executable: Path) -> _Venv | None:
    """The virtualenv that ``executable`` belongs to, found like Python does: a pyvenv.cfg
    beside it or one folder up."""
    for folder in (executable.parent, executable.parent.parent):
        cfg = folder / "pyvenv.cfg"
        if cfg.is_file():
            text = read_text(cfg, "pyvenv.cfg")
            system = re.search(r"^\s*include-system-site-packages\s*=\s*true\s*$", text, re.M | re.I)
            version = re.search(r"^\s*version(?:_info)?\s*=\s*(\d+\.\d+)[.\d]*\S*\s*$", text, re.M)
            return _Venv(folder, system is not None, version.group(1) if version else None)
    return None


PROBE_LIMIT = 60.0  # seconds: a cold start of a big environment's interpreter on a slow disk
PROBE_CAP = 1 << 20  # bytes of output: the answer is one line


def _probe(exe: Path) -> tuple[str, str, str, str | None, list[str]]:
    """(version, executable, platlibdir, user site or None, system site-packages) from
    ``exe -I -S -``, the probe given on its standard input (never on its command line, where a
    program that is no interpreter could print it back), within PROBE_LIMIT s and PROBE_CAP bytes."""
    try:
        ran = run([str(exe), "-I", "-S", "-"], PROBE_LIMIT, PROBE_CAP, stdin=_PROBE.encode())
    except OSError as exc:
        raise BadInput(str(exe), f"cannot ask this interpreter for its site-packages ({exc.strerror or exc})") from None
    if ran.stopped:
        said = f"no answer within {PROBE_LIMIT:g} s" if ran.stopped == TIME else f"more than {PROBE_CAP} bytes of output"
        raise BadInput(str(exe), f"did not answer as a Python interpreter ({said}; stopped it)")
    try:
        version, executable, libdir, user, system = load_json(ran.out)
        return str(version), str(executable or exe), str(libdir), str(user) if user else None, [str(s) for s in system if s]
    except (ValueError, TypeError):
        why = f"exit {ran.returncode}" + (f": {_summary(ran.err)}" if _summary(ran.err) else "")
        raise BadInput(str(exe), f"did not answer as a Python interpreter ({why})") from None


def _summary(err: bytes) -> str:
    """The last line a failed probe printed on stderr, at most 160 characters, never a line of the probe itself."""
    probe = {line.strip() for line in _PROBE.splitlines() if len(line.strip()) > 8}
    lines = [line.strip() for line in err[-8192:].decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line and not any(code in line for code in probe)]
    last = lines[-1] if lines else ""
    return f"{last[:160]}..." if len(last) > 160 else last


def site_packages_of(exe: Path) -> list[Path]:
    """Where the interpreter ``exe`` imports installed packages from, in its sys.path
    order, found without running any code of its environment (``-I -S``: no site, no .pth
    files).  A virtualenv is recognised by its pyvenv.cfg, because without ``site`` Python
    does not know it; its own site-packages come first, and it sees the user site and the
    system site-packages only when it includes the system site-packages.  Every folder is
    listed, present or not.

    A virtualenv that sees only its own site-packages and says its Python version in its
    pyvenv.cfg needs no question at all: its ``lib`` (and a ``lib64`` of its own) folder.
    """
    venv = _virtualenv(exe)
    if venv is not None and not venv.sees_system and venv.version:
        libs = ["lib"] + [lib for lib in ("lib64",) if (venv.folder / lib).is_dir() and not (venv.folder / lib).is_symlink()]
        return [venv.folder / lib / f"python{venv.version}" / "site-packages" for lib in libs]
    version, executable, libdir, user, system = _probe(exe)
    venv = _virtualenv(Path(executable))
    paths = ([user] if user else []) + system
    if venv is not None:
        # site.getsitepackages() with sys.prefix = the virtualenv, which comes first
        own = [str(venv.folder / lib / f"python{version}" / "site-packages") for lib in dict.fromkeys((libdir, "lib"))]
        paths = own + paths if venv.sees_system else own
    return [Path(p) for p in dict.fromkeys(paths)]
