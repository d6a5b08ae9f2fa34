"""Why a running Python process would run a package's files: the evidence, as values.

A process runs the files of a package when Python's import system would find the package
where they are, or when what it runs is one of them.  What CPython does at start-up, read
from what ``/proc`` shows of the process (``processes.py`` reads it, bounded) and from its
interpreter's site-packages (read as text, as ``import_path.py`` reads them), in this order:

- the script it runs is a file of the package (``python /x/python/sglang/launch_server.py``);
- ``sys.path[0]``: for ``-m`` and ``-c`` the current folder (``python -m sglang.launch_server``
  started in ``/x/python``), left out under ``-P``, ``-I`` or ``PYTHONSAFEPATH``;
- ``PYTHONPATH`` (left out under ``-E`` and ``-I``), a relative entry taken from the current folder;
- for an installed package, an interpreter of the environment it is installed in;
- the interpreter's site-packages (its virtualenv's; for an interpreter outside one, its prefix's
  and the user's): a folder a ``.pth`` line names, or a setuptools editable finder whose
  ``MAPPING`` names the package (``pip install -e /x/python``).

The first of these that holds the package is the evidence.  Any of them counts, even where an
earlier folder would give Python another copy of the package first: naming a server that does
not need a restart costs a glance, missing one leaves old code running.  A virtualenv made with
``--system-site-packages`` is read for its own site-packages only.

Where no evidence is found and something the answer needs could not be read (another user's
process: its environment, current folder and executable are not readable; an environment larger
than patchkit reads), the evidence says so (``UNREADABLE``, ``TOO_LARGE``): patchkit cannot
tell.  Nothing of the process is run or imported.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import PatchkitError
from patchkit.match import Pattern
from patchkit.values import Value

if TYPE_CHECKING:  # the site folders are read only for a process that may run the project
    from patchkit.targets.import_path import ImportPath

    Sites = dict[tuple[Path, ...], ImportPath]  # the import paths of the site folders seen, over one scan


class Why(str, Enum):
    """Why a process is named: what shows that it runs the package's files."""

    SCRIPT = "script"  # path: the file of the package it runs
    CWD = "cwd"  # path: its current folder, which holds the package (python -m, -c)
    PYTHONPATH = "pythonpath"  # path: the entry of its PYTHONPATH that holds the package
    INTERPRETER = "interpreter"  # path: its interpreter, of the environment the package is installed in
    EDITABLE = "editable"  # path: the folder an editable install names; detail: the .pth that installs it
    UNREADABLE = "unreadable"  # cannot tell: path is the /proc file it could not read; detail: the OS's error
    TOO_LARGE = "too large"  # cannot tell: path is the /proc file larger than patchkit reads; detail: the cap in bytes


CANNOT_TELL = (Why.UNREADABLE, Why.TOO_LARGE)


class Evidence(Value):
    reason: Why
    path: str
    detail: str = ""


class CommandLine(Value):
    """An interpreter's command line as CPython reads it: its one-letter options, then what runs."""

    flags: frozenset[str]  # one-letter options without a value (E, I, P, s, ...)
    module: str | None  # -m MODULE
    script: str | None  # a file (or folder, or zip) to run
    code: bool  # -c CODE, or a program from stdin (-, or nothing)
    rest: tuple[str, ...]  # the arguments of what runs


_VALUED = "cmWX"  # one-letter options that take a value, joined or as the next argument
_VALUED_LONG = ("--check-hash-based-pycs",)


def parse_command(argv: list[str]) -> CommandLine:
    """``argv`` (argv[0] the interpreter) read as CPython's getopt reads it."""
    args, i = argv[1:], 0
    flags: set[str] = set()
    while i < len(args):
        arg = args[i]
        if arg in _VALUED_LONG:
            i += 2
            continue
        if arg == "-" or arg == "--" or not arg.startswith("-"):
            break
        if arg.startswith("--"):
            i += 1
            continue
        for j, letter in enumerate(arg[1:], start=1):
            if letter in _VALUED:
                value = arg[j + 1:] if j + 1 < len(arg) else (args[i + 1] if i + 1 < len(args) else "")
                i += 1 if j + 1 < len(arg) else 2
                if letter == "m":
                    return CommandLine(frozenset(flags), value, None, False, tuple(args[i:]))
                if letter == "c":
                    return CommandLine(frozenset(flags), None, None, True, tuple(args[i:]))
                break
            flags.add(letter)
        else:
            i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if i >= len(args) or args[i] == "-":
        return CommandLine(frozenset(flags), None, None, True, tuple(args[i + 1:]))
    return CommandLine(frozenset(flags), None, args[i], False, tuple(args[i + 1:]))


def runs_project(argv: list[str], project: str) -> bool:
    """Whether a command line (argv[0] being the interpreter) runs ``project``.

    The interpreter's own options are read as CPython reads them, up to what it runs:
    ``-m project``, ``-m project.x`` (or the joined ``-mproject.x``, ``-Im project``), or a
    script that is a path to a file named ``project`` (a console script, ``/venv/bin/vllm``) or
    to a ``.py`` file below a ``project`` folder (``.../sglang/launch_server.py``).  Arguments of
    what runs are not scripts (``patchkit generate --repo ~/sglang`` runs patchkit), except a
    later ``-m project...`` pair, as wrappers such as ``python -m debugpy ... -m sglang.x`` pass it.
    """
    command = parse_command(argv)
    if command.code:
        return False
    if _names(command.module, project) or (command.script is not None and _is_script_of(command.script, project)):
        return True
    rest = command.rest
    return any(flag == "-m" and _names(m, project) for flag, m in zip(rest, rest[1:], strict=False))


def _names(module: str | None, project: str) -> bool:
    return module is not None and (module == project or module.startswith(project + "."))


def _is_script_of(arg: str, project: str) -> bool:
    parts = arg.split("/")
    if len(parts) < 2:  # a bare word is not a path ("pytest -k sglang")
        return False
    return parts[-1] == project or (parts[-1].endswith(".py") and project in parts[:-1])


class Seen(Value):
    """What patchkit read of a running process (``processes.py``); None where it could not."""

    command: CommandLine
    cwd: str | None
    environ: dict[str, str] | None  # its initial environment; None when not read whole
    interpreter: str | None  # argv[0] as an absolute path, symlinks not resolved (else its executable)
    exe: str | None  # /proc/PID/exe
    unread: tuple[Evidence, ...]  # Evidence (UNREADABLE or TOO_LARGE) of each /proc file not read whole


def absolute(path: str, cwd: str | None) -> str | None:
    """``path`` made absolute against the process's cwd, lexically (no symlink resolved)."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(cwd, path)) if cwd else None


def in_venv(interpreter: str) -> str | None:
    """The virtualenv the interpreter at this path starts (pyvenv.cfg beside or above it), or None."""
    folder = os.path.dirname(interpreter)
    return next((f for f in (folder, os.path.dirname(folder)) if os.path.isfile(os.path.join(f, "pyvenv.cfg"))), None)


class EnvironmentPrefix:
    """Tells whether a process's interpreter is that of the environment at ``prefix``."""

    def __init__(self, prefix: Path) -> None:
        import glob

        bin_dir = os.path.join(os.path.abspath(prefix), "bin")
        self.bin = os.path.realpath(bin_dir)
        # A system Python (no pyvenv.cfg) may also run under a name outside prefix/bin
        # (/usr/local/bin/python3 -> ...): then its binary identifies it.
        system = not os.path.isfile(os.path.join(prefix, "pyvenv.cfg"))
        pythons = glob.glob(os.path.join(glob.escape(bin_dir), "python*")) if system else []
        self.binaries = {os.path.realpath(p) for p in pythons}

    def owns(self, interpreter: str | None, exe: str | None) -> bool:
        # The interpreter's own link is never followed, but its folder is resolved:
        # /bin/python3 is in /usr/bin/ where /bin links to /usr/bin.
        if interpreter and os.path.realpath(os.path.dirname(interpreter)) == self.bin:
            return True
        if not self.binaries or (interpreter and in_venv(interpreter)):
            return False  # a venv on the same base binary runs its own site-packages
        return exe is not None and os.path.realpath(exe) in self.binaries


_VERSIONED = Pattern(r"(?:python|pypy)(\d+\.\d+)")


def site_folders(seen: Seen) -> list[Path]:
    """The site-packages folders the process's interpreter reads, as ``site`` orders them: its
    virtualenv's; outside one, the user's (unless -s, -I or PYTHONNOUSERSITE) then its prefix's."""
    if seen.interpreter is None:
        return []
    import glob

    venv = in_venv(seen.interpreter)
    if venv is not None:
        return [Path(p) for p in sorted(glob.glob(os.path.join(glob.escape(venv), "lib", "*", "site-packages")))]
    binary = os.path.realpath(seen.interpreter)
    prefix = os.path.dirname(os.path.dirname(binary))
    version = _VERSIONED.match(os.path.basename(binary))
    lib = f"python{version.group(1)}" if version else "python3*"
    env = seen.environ or {}
    ignore_env = {"E", "I"} & seen.command.flags
    user = not ({"s", "I"} & seen.command.flags) and not (not ignore_env and env.get("PYTHONNOUSERSITE"))
    patterns = [os.path.join(glob.escape(env["HOME"]), ".local", "lib", lib, "site-packages")] if user and env.get("HOME") else []
    patterns += [os.path.join(glob.escape(prefix), *parts) for parts in (
        ("local", "lib", lib, "dist-packages"), ("lib", lib, "site-packages"), ("lib", lib, "dist-packages"),
        ("lib", "python3", "dist-packages"))]
    return [Path(p) for pattern in patterns for p in sorted(glob.glob(pattern))]


def _same(path: str | Path, real: str) -> bool:
    return os.path.realpath(path) == real


def _inside(path: str, real: str) -> bool:
    resolved = os.path.realpath(path)
    return resolved == real or resolved.startswith(real.rstrip("/") + "/")


def _import_path(folders: tuple[Path, ...], cache: Sites | None) -> ImportPath:
    """The import path of these site folders (remembered in ``cache``); a .pth file that cannot
    be read (over import_path's cap, unreadable) leaves nothing to find there."""
    from patchkit.targets.import_path import ImportPath, import_path

    if cache is not None and folders in cache:
        return cache[folders]
    try:
        found = import_path(list(folders))
    except (PatchkitError, OSError):
        found = ImportPath([], [], [])
    if cache is not None:
        cache[folders] = found
    return found


def _editable(path: ImportPath, package: str, name: str) -> Evidence | None:
    """An editable install of ``package`` among the site folders: a .pth line naming the folder
    that holds it, or a setuptools finder mapping ``name`` to it."""
    from patchkit.targets.import_path import mapping

    holder = os.path.dirname(package)
    for entry in path.entries:
        if entry.pth is not None and _same(entry.folder, holder):
            return Evidence(Why.EDITABLE, str(entry.folder), str(entry.pth))
    for finder in path.finders:
        try:
            folder = mapping(finder.module, name).get(name)
        except (PatchkitError, OSError):
            continue
        if isinstance(folder, str) and _same(folder, package):
            return Evidence(Why.EDITABLE, folder, str(finder.pth))
    return None


def evidence(seen: Seen, folder: Path, environment: Path | None = None, sites: Sites | None = None) -> Evidence | None:
    """Why the process ``seen`` runs the files of the package ``folder`` (``/x/python/sglang`` of a
    checkout, ``site-packages/sglang`` of an install; ``environment``: for an installed package,
    the prefix of its environment, ``V`` for ``V/lib/python3.11/site-packages``): its first
    evidence in CPython's order; an ``UNREADABLE``/``TOO_LARGE`` one when none was found and a
    file that could tell was not read; None when it does not run them.  ``sites``: a cache of the
    import paths of site folders, kept over one scan."""
    real = os.path.realpath(folder)
    holder = os.path.dirname(real)
    command, env, cwd = seen.command, seen.environ, seen.cwd
    ignore_env = bool({"E", "I"} & command.flags)
    if command.script is not None:
        script = absolute(command.script, cwd)
        if script is not None and _inside(script, real):
            return Evidence(Why.SCRIPT, script)
    safe = {"I", "P"} & command.flags or (not ignore_env and env and env.get("PYTHONSAFEPATH"))
    if command.script is None and not safe and cwd is not None and _same(cwd, holder):
        return Evidence(Why.CWD, cwd)
    if not ignore_env and env is not None:
        for entry in env.get("PYTHONPATH", "").split(os.pathsep):
            where = absolute(entry, cwd) if entry else None
            if where is not None and _same(where, holder):
                return Evidence(Why.PYTHONPATH, where)
    if environment is not None and EnvironmentPrefix(environment).owns(seen.interpreter, seen.exe):
        return Evidence(Why.INTERPRETER, seen.interpreter or seen.exe or "")
    folders = site_folders(seen)
    if any(_same(site, holder) for site in folders):
        return Evidence(Why.INTERPRETER, seen.interpreter or "")
    editable = _editable(_import_path(tuple(folders), sites), real, os.path.basename(real))
    if editable is not None:
        return editable
    return seen.unread[0] if seen.unread else None
