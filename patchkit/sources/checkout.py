"""A target on disk: an SGLang checkout, its files, its version and its state dir."""

from __future__ import annotations

import re
from typing import NamedTuple
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.registry import Project
from patchkit.safety import resolve_inside
from patchkit.sources.git_refs import git_dir, release_tags_at_head
from patchkit.versions import tag_to_version

_DECLARED = (
    # (file, pattern): the version a checkout declares, read as text, never imported.
    ("python/sglang/version.py", r"""^__version__\s*(?::[^=]*)?=\s*["']([^"']+)["']"""),
    ("python/sglang/_version.py", r"""^__version__\s*(?::[^=]*)?=\s*(?:version\s*=\s*)?["']([^"']+)["']"""),
    ("python/pyproject.toml", r"""^version\s*=\s*["']([^"']+)["']"""),
)


class Target(NamedTuple):
    root: Path
    kind: str  # "git checkout" or "directory"
    state_dir: Path

    def path(self, repo_path: str, must_exist: bool = True) -> Path:
        """Where a repository path of the patch lives here (checked: inside, no symlinks)."""
        return resolve_inside(self.root, repo_path, must_exist=must_exist)

    def candidates(self, project: Project) -> list[str]:
        """Repository paths of the project's candidate files present here, sorted."""
        found = set()
        for pattern in project.files:
            for path in self.root.glob(pattern):
                if path.is_file():
                    found.add(path.relative_to(self.root).as_posix())
        return sorted(found)

    def version(self, override: str | None = None) -> tuple[str | None, str]:
        """(version, how it was found)."""
        if override:
            return override, "given with --version"
        if self.kind == "git checkout":
            tags = release_tags_at_head(self.root)
            if tags:
                return tag_to_version(tags[0]), f"tag {tags[0]} at HEAD"
        for rel, pattern in _DECLARED:
            file = self.root / rel
            if file.is_file() and not file.is_symlink():
                match = re.search(pattern, file.read_text(errors="replace"), re.MULTILINE)
                if match:
                    return match.group(1), f"declared in {rel}"
        return None, "unknown (no release tag at HEAD, no declared version)"


def open_checkout(path: Path) -> Target:
    """The SGLang checkout at ``path``, or BadInput saying why it is not one."""
    if not path.exists():
        raise BadInput(str(path), "no such file or directory")
    if not path.is_dir():
        raise BadInput(str(path), "not a directory")
    root = path.resolve()
    if not (root / "python" / "sglang").is_dir():
        raise BadInput(str(path), "not an SGLang checkout (no python/sglang/ folder)")
    gdir = git_dir(root)
    if gdir is not None:
        return Target(root, "git checkout", gdir / "patchkit")
    return Target(root, "directory", root / ".patchkit")
