"""A target on disk: an SGLang (or vLLM) checkout or installed package, its files,
its version and its state dir."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput, NoProject
from patchkit.fixes.registry import PROJECTS, Project
from patchkit.git.refs import git_dir, release_tags_at_head
from patchkit.targets.safety import resolve_inside
from patchkit.types import StrEnum
from patchkit.values import Value
from patchkit.versions import tag_to_version

if TYPE_CHECKING:  # a checkout's commands do not read an environment
    from patchkit.targets.environment import Install


class Layout(StrEnum):
    """How a target lies on disk (its root, where its state dir is, how its version is read), in
    the words doctor's --json and a journal use: not what a report calls it (``types.TargetKind``,
    which tells an editable install apart and calls a git checkout and a plain folder both a checkout)."""

    CHECKOUT = "git checkout"
    DIRECTORY = "directory"
    INSTALLED = "installed package"


CHECKOUT, DIRECTORY, INSTALLED = Layout.CHECKOUT, Layout.DIRECTORY, Layout.INSTALLED

ENV_DIR = ".patchkit-environment"  # an environment's state dir, in its site-packages (targets/env_transaction.py)

_VERSION = r"""^__version__\s*(?::[^=]*)?=\s*(?:version\s*=\s*)?["']([^"']+)["']"""


class Target(Value):
    root: Path  # the checkout, or the site-packages folder of an installed package
    kind: Layout
    state_dir: Path
    project: Project
    install: Install | None = None  # how --python found it, when it is an editable install

    @property
    def name(self) -> str:
        """How messages call the project: its distribution name when installed ("sglang"), else its label."""
        return self.project.name if self.kind is INSTALLED else self.project.label

    @property
    def environment_dir(self) -> Path | None:
        """The state dir of the environment this target was found in: the site-packages folder's
        ``.patchkit-environment/`` (a wheel's, or where an editable install is recorded); None for
        a checkout named by PATH (``targets/env_transaction.py``)."""
        if self.install is not None:
            return self.install.site / ENV_DIR
        return self.root / ENV_DIR if self.kind is INSTALLED else None

    def local(self, repo_path: str) -> str:
        """Where a repository path is below ``root`` (an installed package has no ``python/``)."""
        return self.project.package_path(repo_path) if self.kind is INSTALLED else repo_path

    def path(self, repo_path: str, must_exist: bool = True) -> Path:
        """Where a repository path of the patch lives here (checked: inside, no symlinks)."""
        return resolve_inside(self.root, self.local(repo_path), must_exist=must_exist)

    def candidates(self) -> list[str]:
        """Repository paths of the project's candidate files present here, sorted."""
        found = set()
        for pattern in self.project.files:
            for rel in _matching(self.root, self.local(pattern)):
                found.add(self.project.repo_path(rel) if self.kind is INSTALLED else rel)
        return sorted(found)

    def version(self, override: str | None = None) -> tuple[str | None, str]:
        """(version, how it was found)."""
        if override:
            return override, "given with --version"
        if self.kind is INSTALLED:
            return _dist_info_version(sorted(self.root.glob(self.project.dist_info())))
        if self.kind is CHECKOUT:
            tags = release_tags_at_head(self.root)
            if tags:
                return tag_to_version(tags[0]), f"tag {tags[0]} at HEAD"
        if self.install is not None and self.install.dist_info is not None:
            found = _dist_info_version([self.install.dist_info])
            if found[0]:
                return found
        package = self.project.repo_path(self.project.name)
        declared = ((f"{package}/version.py", _VERSION), (f"{package}/_version.py", _VERSION),
                    (self.project.repo_path("pyproject.toml"), r"""^version\s*=\s*["']([^"']+)["']"""))
        for rel, pattern in declared:
            file = self.root / rel
            if file.is_file() and not file.is_symlink():
                from patchkit.targets.import_path import read_text

                match = re.search(pattern, read_text(file, "version file"), re.MULTILINE)
                if match:
                    return match.group(1), f"declared in {rel}"
        return None, "unknown (no release tag at HEAD, no declared version)"


def _dist_info_version(folders: list[Path]) -> tuple[str | None, str]:
    """(version, how it was found) from the first of the dist-info ``folders`` whose name says one."""
    from patchkit.targets import dist_info

    for folder in folders:
        found = dist_info.version(folder) if folder.is_dir() else None
        if found:
            return found, f"from {folder.name}"
    return None, "unknown (no dist-info folder)"


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


def _matching(root: Path, pattern: str) -> list[str]:
    """The files (or links to files) below ``root`` that ``pattern`` names, relative (``root.glob``)."""
    return [p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file()]


def open_target(path: Path, project: str | None = None, install: Install | None = None) -> Target:
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
            if target is not None and (folder == start or not (target.kind is INSTALLED and target.root == folder)):
                return target if install is None else target._replace(install=install)
    raise NoProject(
        str(path),
        "not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, no package with a dist-info)",
    )


def open_install(install: Install) -> Target:
    """The target of a project that ``--python`` found: the site-packages folder of a wheel,
    or the checkout around the package folder of an editable install (the folder that holds
    ``python/sglang/``), recorded with the install."""
    from patchkit.targets.environment import WHEEL

    p = PROJECTS[install.project]
    if install.how is WHEEL:
        return open_target(install.site, p.name)
    folder = install.package.parent
    root = folder if not p.source_root else folder.parent if folder.name == p.source_root else None
    target = _recognise(root, p) if root is not None else None
    if target is None or target.kind is INSTALLED:
        raise BadInput(
            str(install.via),
            f"an editable install of {p.label} from {install.package}, which is not laid out as its repository "
            f"({p.repo_path(p.name)}/): patchkit cannot patch it there",
        )
    return target._replace(install=install)

