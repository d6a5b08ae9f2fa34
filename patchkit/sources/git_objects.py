"""Read release files straight from git objects (GitPython): no checkout, no work tree.

All git plumbing of patchkit lives in this module.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
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
    blob: str  # git blob id; GitSource.read(blob) gives the bytes
    mode: str  # e.g. "100644"


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
        self._trees: dict[bytes, list[tuple[str, str, bytes]]] = {}
        self._tags: dict | None = None
        self._releases: dict[str, Release] = {}

    def _tag_refs(self) -> dict:
        if self._tags is None:  # listing refs is slow in GitPython: once per run
            self._tags = {t.name: t for t in self.repo.tags}
        return self._tags

    def release_tags(self) -> list[str]:
        """Every ``v<version>`` tag, oldest first."""
        return sorted((name for name in self._tag_refs() if is_release_tag(name)), key=version_key)

    def release(self, tag: str) -> Release:
        """The tag's commit and date (cached: generate asks for each tag twice)."""
        if tag not in self._releases:
            try:
                commit = self._tag_refs()[tag].commit
            except (KeyError, ValueError, self._git.BadName):
                raise BadInput(str(self.path), f"no tag {tag!r} in this repository") from None
            from email.utils import format_datetime  # costly to import; generate only

            when = commit.authored_datetime
            self._releases[tag] = Release(tag, commit.hexsha, format_datetime(when), when.date().isoformat())
        return self._releases[tag]

    def read(self, blob: str) -> bytes:
        """The bytes of a blob."""
        return self.repo.odb.stream(bytes.fromhex(blob)).read()

    def _tree(self, binsha: bytes) -> list[tuple[str, str, bytes]]:
        """(mode, name, id) of a tree's entries; each distinct tree is read once."""
        entries = self._trees.get(binsha)
        if entries is None:
            raw = self.repo.odb.stream(binsha).read()
            entries, i = [], 0
            while i < len(raw):
                space = raw.index(b" ", i)
                nul = raw.index(b"\0", space)
                entries.append((raw[i:space].decode(), raw[space + 1 : nul].decode("utf-8", "surrogateescape"), raw[nul + 1 : nul + 21]))
                i = nul + 21
            self._trees[binsha] = entries
        return entries

    def _walk(self, binsha: bytes, prefix: str, recursive: bool) -> Iterator[tuple[str, str, bytes]]:
        for mode, name, sha in self._tree(binsha):
            path = f"{prefix}{name}"
            if mode == "40000":
                if recursive:
                    yield from self._walk(sha, path + "/", True)
            elif mode in ("100644", "100755"):
                yield mode, path, sha

    def files(self, rev: str, globs: tuple[str, ...]) -> Iterator[SourceFile]:
        """The blobs under the tree of ``rev`` (a tag, HEAD, a commit) whose paths match any of ``globs``.

        Trees are read straight from the object database and cached by id, so the
        many tags that share a folder cost one read of it.
        """
        ref = self._tag_refs().get(rev)
        root = (ref.commit if ref is not None else self.repo.commit(rev)).tree.binsha
        seen: set[str] = set()
        for pattern in globs:
            static = []
            for part in pattern.split("/"):
                if any(c in part for c in "*?["):
                    break
                static.append(part)
            sha = root
            for part in static:
                sha = next((e[2] for e in self._tree(sha) if e[1] == part and e[0] == "40000"), None)
                if sha is None:
                    break
            if sha is None:
                continue
            folder = "/".join(static)
            recursive = "/" in pattern[len(folder) + 1 :]
            for mode, path, blob in self._walk(sha, f"{folder}/" if folder else "", recursive):
                if path not in seen and fnmatch.fnmatchcase(path, pattern):
                    seen.add(path)
                    yield SourceFile(path, blob.hex(), mode)

    # -- writing: the upstream commit, made without touching HEAD, index or work tree --

    def head(self) -> str:
        try:
            return self.repo.head.commit.hexsha
        except ValueError:
            raise BadInput(str(self.path), "the repository has no commit at HEAD") from None

    def identity(self) -> tuple[str, str]:
        """The user's git identity (user.name, user.email), as git itself would use it."""
        reader = self.repo.config_reader()
        name = os.environ.get("GIT_AUTHOR_NAME") or reader.get_value("user", "name", "")
        email = os.environ.get("GIT_AUTHOR_EMAIL") or reader.get_value("user", "email", "")
        if not name or not email:
            raise BadInput(
                str(self.path),
                "no git identity: set it with `git config user.name \"Your Name\"` and `git config user.email you@example.com`",
            )
        return str(name), str(email)

    def free_branch(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``, ... whichever does not exist yet."""
        try:
            self.repo.git.check_ref_format("--branch", base)
        except self._git.GitCommandError:
            raise BadInput(base, "not a valid branch name") from None
        existing = {h.name for h in self.repo.heads}
        name, n = base, 1
        while name in existing:
            n += 1
            name = f"{base}-{n}"
        return name

    def commit(self, parent: str, files: dict[str, bytes], message: str, scratch: Path) -> str:
        """A commit object: ``parent``'s tree with ``files`` replaced.  No ref, index or work tree changes.

        ``scratch`` is a private folder for a temporary index and the blobs' bytes;
        it is removed afterwards, whatever happens.
        """
        import shutil

        scratch.mkdir(parents=True, exist_ok=True)
        try:
            with self.repo.git.custom_environment(GIT_INDEX_FILE=str(scratch / "index")):
                self.repo.git.read_tree(parent)
                for i, (path, data) in enumerate(sorted(files.items())):
                    entry = self.repo.git.ls_tree(parent, "--", path).split()
                    mode = entry[0] if entry else "100644"
                    (scratch / f"blob{i}").write_bytes(data)
                    blob = self.repo.git.hash_object("-w", "--no-filters", str(scratch / f"blob{i}"))
                    self.repo.git.update_index("--cacheinfo", f"{mode},{blob},{path}")
                tree = self.repo.git.write_tree()
            (scratch / "message").write_bytes(message.encode())
            return self.repo.git.commit_tree(tree, "-p", parent, "-F", str(scratch / "message"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def create_branch(self, name: str, commit: str) -> None:
        """Create ``refs/heads/<name>`` at ``commit``; fails if it exists (no overwrite)."""
        self.repo.git.update_ref(f"refs/heads/{name}", commit, "0" * 40)

    def format_patch(self, commit: str) -> bytes:
        """``git format-patch -1 --stdout`` of the commit, as bytes."""
        return self.repo.git.format_patch("-1", "--stdout", commit, stdout_as_string=False)
