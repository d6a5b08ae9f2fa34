"""A target on disk: an SGLang (or vLLM) checkout or installed package, its files,
its version and its state dir."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import BadInput
from patchkit.fixes.registry import PROJECTS, Project
from patchkit.targets.safety import resolve_inside
from patchkit.git.refs import git_dir, release_tags_at_head
from patchkit.versions import tag_to_version

CHECKOUT = "git checkout"
DIRECTORY = "directory"
INSTALLED = "installed package"

_VERSION = r"""^__version__\s*(?::[^=]*)?=\s*(?:version\s*=\s*)?["']([^"']+)["']"""


class Target(NamedTuple):
    root: Path  # the checkout, or the site-packages folder of an installed package
    kind: str  # CHECKOUT, DIRECTORY or INSTALLED
    state_dir: Path
    project: Project

    @property
    def name(self) -> str:
        """How messages call the project: its distribution name when installed ("sglang"), else its label."""
        return self.project.name if self.kind == INSTALLED else self.project.label

    def local(self, repo_path: str) -> str:
        """Where a repository path is below ``root`` (an installed package has no ``python/``)."""
        return self.project.package_path(repo_path) if self.kind == INSTALLED else repo_path

    def path(self, repo_path: str, must_exist: bool = True) -> Path:
        """Where a repository path of the patch lives here (checked: inside, no symlinks)."""
        return resolve_inside(self.root, self.local(repo_path), must_exist=must_exist)

    def candidates(self) -> list[str]:
        """Repository paths of the project's candidate files present here, sorted."""
        found = set()
        for pattern in self.project.files:
            for path in self.root.glob(self.local(pattern)):
                if path.is_file():
                    rel = path.relative_to(self.root).as_posix()
                    found.add(self.project.repo_path(rel) if self.kind == INSTALLED else rel)
        return sorted(found)

    def version(self, override: str | None = None) -> tuple[str | None, str]:
        """(version, how it was found)."""
        if override:
            return override, "given with --version"
        if self.kind == INSTALLED:
            for meta in sorted(self.root.glob(f"{self.project.dist_info()}/METADATA")):
                match = re.search(r"^Version:\s*(\S+)", meta.read_text(errors="replace"), re.MULTILINE)
                if match:
                    return match.group(1), f"from {meta.parent.name}/METADATA"
            return None, "unknown (no dist-info METADATA)"
        if self.kind == CHECKOUT:
            tags = release_tags_at_head(self.root)
            if tags:
                return tag_to_version(tags[0]), f"tag {tags[0]} at HEAD"
        package = self.project.repo_path(self.project.name)
        declared = ((f"{package}/version.py", _VERSION), (f"{package}/_version.py", _VERSION),
                    (self.project.repo_path("pyproject.toml"), r"""^version\s*=\s*["']([^"']+)["']"""))
        for rel, pattern in declared:
            file = self.root / rel
            if file.is_file() and not file.is_symlink():
                match = re.search(pattern, file.read_text(errors="replace"), re.MULTILINE)
                if match:
                    return match.group(1), f"declared in {rel}"
        return None, "unknown (no release tag at HEAD, no declared version)"


def _installed_here(site: Path, project: Project) -> bool:
    return (site / project.name / "__init__.py").is_file() and any(site.glob(project.dist_info()))


def _recognise(folder: Path, p: Project) -> Target | None:
    """The target of project ``p`` whose root ``folder`` is: a site-packages folder holding
    the package, the installed package folder itself, or a checkout."""
    if folder.name == p.name and _installed_here(folder.parent, p):
        folder = folder.parent
    if _installed_here(folder, p):
        return Target(folder, INSTALLED, folder / f".patchkit-{p.name}", p)
    if (folder / p.repo_path(p.name)).is_dir() and (p.source_root or (folder / p.name / "__init__.py").is_file()):
        gdir = git_dir(folder)
        if gdir is not None:
            return Target(folder, CHECKOUT, gdir / "patchkit", p)
        return Target(folder, DIRECTORY, folder / ".patchkit", p)
    return None


def open_target(path: Path, project: str | None = None) -> Target:
    """The checkout or installed package at or above ``path``, or BadInput saying why it is none.

    PATH may be a checkout (``python/sglang/`` or ``vllm/`` inside), a site-packages
    folder holding the package, or the installed package folder itself.  From a folder
    inside one of them, the parents are walked up, the way git finds its work tree; the
    nearest root wins.  A site-packages folder counts on the way up only when the walk
    came through the package's own folder (``site-packages/torch`` is not SGLang).
    """
    if not path.exists():
        raise BadInput(str(path), "no such file or directory")
    if not path.is_dir():
        raise BadInput(str(path), "not a directory")
    start = path.resolve()
    projects = [PROJECTS[project]] if project else list(PROJECTS.values())
    for folder in (start, *start.parents):
        for p in projects:
            target = _recognise(folder, p)
            if target is not None and (folder == start or not (target.kind == INSTALLED and target.root == folder)):
                return target
    raise BadInput(
        str(path),
        "not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, no package with a dist-info)",
    )


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
    import shutil

    if not python:
        raise BadInput("--python", "empty: give an interpreter, a name on PATH or a virtualenv folder")
    if os.sep not in python:
        found = shutil.which(python)
        if found is None:
            here = f" (for the one in this folder, write ./{python})" if os.path.lexists(python) else ""
            raise BadInput(python, f"not found on PATH{here}")
        return Path(found).absolute()
    exe = Path(python).absolute()
    if exe.is_dir():
        if not (exe / "pyvenv.cfg").is_file():
            raise BadInput(python, "a folder that is not a virtualenv (no pyvenv.cfg); give the interpreter itself")
        found = next((exe / "bin" / name for name in ("python", "python3") if (exe / "bin" / name).is_file()), None)
        if found is None:
            raise BadInput(python, "a virtualenv without bin/python or bin/python3")
        exe = found
    if not exe.exists():
        raise BadInput(python, "no such file or directory")
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise BadInput(python, "not an executable file")
    return exe


def _virtualenv(executable: Path) -> tuple[Path, bool] | None:
    """(the virtualenv, whether it includes the system site-packages) that ``executable``
    belongs to, found like Python does: a pyvenv.cfg beside it or one folder up."""
    for folder in (executable.parent, executable.parent.parent):
        cfg = folder / "pyvenv.cfg"
        if cfg.is_file():
            try:
                text = cfg.read_text(errors="replace")
            except OSError as exc:
                raise BadInput(str(cfg), f"cannot read it ({exc.strerror or exc})") from None
            system = re.search(r"^\s*include-system-site-packages\s*=\s*true\s*$", text, re.M | re.I)
            return folder, system is not None
    return None


def _probe(exe: Path) -> tuple[str, str, str, str | None, list[str]]:
    """(version, executable, platlibdir, user site or None, system site-packages) from ``exe -I -S``."""
    import json
    import subprocess

    try:
        done = subprocess.run([str(exe), "-I", "-S", "-c", _PROBE], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(str(exe), f"cannot ask this interpreter for its site-packages ({exc})") from None
    try:
        version, executable, libdir, user, system = json.loads(done.stdout)
        return str(version), str(executable or exe), str(libdir), str(user) if user else None, [str(s) for s in system if s]
    except (ValueError, TypeError):
        said = done.stderr.decode(errors="replace").strip().splitlines()
        last = said[-1] if said else ""
        why = f"exit {done.returncode}" + (f": {last[:160]}{'...' if len(last) > 160 else ''}" if last else "")
        raise BadInput(str(exe), f"did not answer as a Python interpreter ({why})") from None


def site_packages_of(exe: Path) -> list[Path]:
    """Where the interpreter ``exe`` imports installed packages from, in its sys.path
    order, found without running any code of its environment (``-I -S``: no site, no .pth
    files).  A virtualenv is recognised by its pyvenv.cfg, because without ``site`` Python
    does not know it; its own site-packages come first, and it sees the user site and the
    system site-packages only when it includes the system site-packages.  Every folder is
    listed, present or not."""
    version, executable, libdir, user, system = _probe(exe)
    venv = _virtualenv(Path(executable))
    paths = ([user] if user else []) + system
    if venv is not None:
        folder, sees_system = venv
        # site.getsitepackages() with sys.prefix = the virtualenv, which comes first
        own = [str(folder / lib / f"python{version}" / "site-packages") for lib in dict.fromkeys((libdir, "lib"))]
        paths = own + paths if sees_system else own
    return [Path(p) for p in dict.fromkeys(paths)]


def installed_package(python: str, project: str | None = None) -> Path:
    """The site-packages folder where the interpreter ``python`` (a path, a name on PATH or
    a virtualenv folder) has ``project`` (default: any project patchkit knows) installed:
    the first one it would import from."""
    return installed_projects(python, project)[0][0]

def installed_projects(python: str, project: str | None = None) -> list[tuple[Path, str]]:
    """(site-packages folder, project) of every project patchkit knows (or only ``project``)
    that the interpreter ``python`` has installed, each where it would import it from."""
    wanted = [PROJECTS[project]] if project else list(PROJECTS.values())
    exe = interpreter(python)
    sites = site_packages_of(exe)
    found = []
    for p in wanted:
        site = next((site for site in sites if site.is_dir() and _installed_here(site, p)), None)
        if site is not None:
            found.append((site, p.name))
    if not found:
        looked = ", ".join(map(str, sites)) or "no site-packages"
        names = " or ".join(p.name for p in wanted)
        raise BadInput(str(exe), f"{names} is not installed for this interpreter (looked in {looked})")
    return found
