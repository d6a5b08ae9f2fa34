"""Read release files straight from git objects (GitPython): no checkout, no work tree.

All git plumbing of patchkit lives in this module.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from email.utils import format_datetime
from pathlib import Path
from typing import Iterator

from patchkit.errors import BadInput
from patchkit.versions import is_release_tag, version_key


@dataclass(frozen=True)
class Release:
    tag: str
    commit: str
    date: str  # RFC 2822, the release commit's author date
    day: str  # YYYY-MM-DD of that date


@dataclass(frozen=True)
class SourceFile:
    path: str
    blob: str  # git blob id
    mode: str  # e.g. "100644"
    data: bytes


def default_repo() -> Path:
    return Path(os.environ.get("PATCHKIT_SGLANG_REPO") or Path.home() / "sglang")


class GitSource:
    """Releases of one repository, read from its object database."""

    def __init__(self, path: Path) -> None:
        import git  # GitPython: imported here so commands that never read git stay fast

        if not path.exists():
            raise BadInput(str(path), "no such repository (set --repo or $PATCHKIT_SGLANG_REPO)")
        try:
            self.repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BadInput(str(path), "not a git repository") from None
        self.path = path
        self._git = git

    def release_tags(self) -> list[str]:
        """Every ``v<version>`` tag, oldest first."""
        tags = [t.name for t in self.repo.tags if is_release_tag(t.name)]
        return sorted(tags, key=version_key)

    def release(self, tag: str) -> Release:
        try:
            commit = self.repo.tags[tag].commit
        except (IndexError, ValueError, self._git.BadName):
            raise BadInput(str(self.path), f"no tag {tag!r} in this repository") from None
        when = commit.authored_datetime
        return Release(tag, commit.hexsha, format_datetime(when), when.date().isoformat())

    def files(self, tag: str, globs: tuple[str, ...]) -> Iterator[SourceFile]:
        """The blobs under the tag's tree whose paths match any of ``globs``."""
        tree = self.repo.tags[tag].commit.tree
        seen: set[str] = set()
        for pattern in globs:
            static = []
            for part in pattern.split("/"):
                if any(c in part for c in "*?["):
                    break
                static.append(part)
            folder = "/".join(static)
            try:
                root = tree / folder if folder else tree
            except KeyError:
                continue
            items = root.traverse() if "/" in pattern[len(folder) + 1 :] else root.blobs
            for item in items:
                if item.type != "blob" or item.path in seen:
                    continue
                if not fnmatch.fnmatchcase(item.path, pattern):
                    continue
                seen.add(item.path)
                yield SourceFile(item.path, item.hexsha, f"{item.mode:o}", item.data_stream.read())


def release_tags_at_head(root: Path) -> list[str]:
    """The ``v*`` release tags pointing at HEAD of the checkout at ``root``, newest first.

    Plain ``git`` (no GitPython): cheap enough for apply/verify start-up.  Reads refs
    only; runs no hook and no filter of the checkout.
    """
    import subprocess

    try:
        done = subprocess.run(
            ["git", "-C", str(root), "-c", "core.fsmonitor=false", "tag", "--points-at", "HEAD", "--list", "v*"],
            capture_output=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    tags = [t for t in done.stdout.decode(errors="replace").split() if is_release_tag(t)]
    return sorted(tags, key=version_key, reverse=True)


def git_dir(root: Path) -> Path | None:
    """The git directory of a checkout at ``root`` (``.git``, or where a ``.git`` file points)."""
    dot = root / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            target = Path(text[len("gitdir:") :].strip())
            target = target if target.is_absolute() else root / target
            return target if target.is_dir() else None
    return None
