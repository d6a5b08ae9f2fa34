"""A target on disk: an SGLang (or vLLM) checkout or installed package, its files,
its version and its state dir."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import BadInput
from patchkit.registry import PROJECTS, Project
from patchkit.safety import resolve_inside
from patchkit.sources.git_refs import git_dir, release_tags_at_head
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
            for meta in sorted(self.root.glob(f"{self.project.name}-*.dist-info/METADATA")):
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
    return (site / project.name / "__init__.py").is_file() and any(site.glob(f"{project.name}-*.dist-info"))


def open_target(path: Path, project: str | None = None) -> Target:
    """The checkout or installed package at ``path``, or BadInput saying why it is none.

    PATH may be a checkout (``python/sglang/`` or ``vllm/`` inside), a site-packages
    folder holding the package, or the installed package folder itself.
    """
    if not path.exists():
        raise BadInput(str(path), "no such file or directory")
    if not path.is_dir():
        raise BadInput(str(path), "not a directory")
    root = path.resolve()
    for p in [PROJECTS[project]] if project else PROJECTS.values():
        if root.name == p.name and _installed_here(root.parent, p):
            root = root.parent
        if _installed_here(root, p):
            return Target(root, INSTALLED, root / f".patchkit-{p.name}", p)
        if (root / p.repo_path(p.name)).is_dir() and (p.source_root or (root / p.name / "__init__.py").is_file()):
            gdir = git_dir(root)
            if gdir is not None:
                return Target(root, CHECKOUT, gdir / "patchkit", p)
            return Target(root, DIRECTORY, root / ".patchkit", p)
    raise BadInput(
        str(path),
        "not an SGLang or vLLM checkout or installed package (no python/sglang/ or vllm/ folder, no package with a dist-info)",
    )


def site_packages_of(python: str) -> list[Path]:
    """Where the interpreter ``python`` installs packages, found without running any code
    of its environment (``-I -S``: no site, no .pth files); a virtualenv is recognised by
    its pyvenv.cfg, because without ``site`` Python 3.11 does not know it."""
    import json
    import subprocess

    code = "import json, sys, sysconfig; print(json.dumps(['%d.%d' % sys.version_info[:2], sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))"
    try:
        done = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, timeout=60)
        version, *paths = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raise BadInput(python, f"cannot ask this interpreter for its site-packages ({exc})") from None
    venv = Path(python).parent.parent
    if (venv / "pyvenv.cfg").is_file():
        paths = [str(venv / lib / f"python{version}" / "site-packages") for lib in ("lib", "lib64")]
    return [Path(p) for p in dict.fromkeys(paths) if Path(p).is_dir()]


def installed_package(python: str, project: str = "sglang") -> Path:
    """The site-packages folder where ``python`` has ``project`` installed."""
    p = PROJECTS[project]
    for site in site_packages_of(python):
        if _installed_here(site, p):
            return site
    raise BadInput(python, f"{p.name} is not installed for this interpreter")
