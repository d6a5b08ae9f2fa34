"""Read release files straight from git objects: no checkout, no work tree.

Every object is read through one ``git cat-file --batch`` process (``batch.py``); GitPython
runs the other git commands.  All git plumbing of patchkit lives in this package.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput, BranchError
from patchkit.git.batch import HASH_BYTES, CatFile, ObjectType, TreeEntry, tree_entries
from patchkit.git.refs import repo_format
from patchkit.values import Value
from patchkit.versions import is_release_tag, version_key

if TYPE_CHECKING:
    from patchkit.git.batch import Object


class Release(Value):
    tag: str
    commit: str
    date: str  # RFC 2822, the release commit's author date
    day: str  # YYYY-MM-DD of that date


class SourceFile(Value):
    path: str
    blob: str  # git blob id; GitSource.read(blob) gives the bytes
    mode: str  # e.g. "100644"


def _static(pattern: str) -> str:
    """The folder part of a glob before its first wildcard: ``a/b/*.py`` -> ``a/b``."""
    static = []
    for part in pattern.split("/")[:-1]:
        if any(c in part for c in "*?["):
            break
        static.append(part)
    return "/".join(static)


def _release(tag: str, commit: str, body: bytes) -> Release:
    """A Release from a raw commit object: its author line gives the date (RFC 2822, in the
    author's time zone, as ``git log --date=rfc`` writes it)."""
    from datetime import datetime, timedelta, timezone
    from email.utils import format_datetime

    author = next((line for line in body.split(b"\n") if line.startswith(b"author ")), b"")
    stamp, offset = author.rsplit(b" ", 2)[-2:] if author else (b"0", b"+0000")
    sign = -1 if offset.startswith(b"-") else 1
    when = datetime.fromtimestamp(int(stamp), timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5]))))
    return Release(tag, commit, format_datetime(when), when.date().isoformat())


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
        fmt, storage = repo_format(Path(self.repo.common_dir))
        if (fmt, storage) != ("sha1", "files"):
            raise BadInput(str(path), f"a repository with object format {fmt} and ref storage {storage}: patchkit reads "
                                      "release histories in git's default format (sha1, files), as its mirrors are built")
        self._git = git
        self._hash = HASH_BYTES[fmt]
        self._objects = CatFile(self.repo.git, str(path))
        self._trees: dict[str, list[TreeEntry]] = {}
        self._releases: dict[str, Release] = {}

    def release_tags(self) -> list[str]:
        """Every ``v<version>`` tag, oldest first."""
        listed = self.repo.git.for_each_ref("--format=%(refname)", "refs/tags/").splitlines()
        return sorted((name for name in (line[len("refs/tags/"):] for line in listed) if is_release_tag(name)), key=version_key)

    def release(self, tag: str) -> Release:
        """The tag's commit and author date."""
        return self.releases([tag])[tag]

    def releases(self, tags: list[str]) -> dict[str, Release]:
        """Commit and author date of many tags, read in one batch (and cached)."""
        wanted = [t for t in dict.fromkeys(tags) if t not in self._releases]
        for tag, found in zip(wanted, self._objects.get([f"refs/tags/{t}^{{commit}}" for t in wanted]), strict=True):
            if found is None or found.kind is not ObjectType.COMMIT:
                raise BadInput(str(self.path), f"no tag {tag!r} in this repository")
            self._releases[tag] = _release(tag, found.oid, found.data)
        return {t: self._releases[t] for t in tags}

    def read(self, blob: str) -> bytes:
        """The bytes of a blob."""
        return self.read_many([blob])[blob]

    def read_many(self, blobs: list[str]) -> dict[str, bytes]:
        """The bytes of many objects, in one batch."""
        objects = {}
        for blob, found in zip(blobs, self._objects.get(blobs), strict=True):
            if found is None:
                raise BadInput(str(self.path), f"cannot read object {blob}: {blob} missing")
            objects[blob] = found.data
        return objects

    def _parsed(self, found: Object) -> list[TreeEntry]:
        """The entries of a tree object read; each distinct tree is parsed once."""
        entries = self._trees.get(found.oid)
        if entries is None:
            entries = self._trees[found.oid] = tree_entries(found.data, self._hash)
        return entries

    def _tree(self, oid: str) -> list[TreeEntry]:
        """The entries of the tree ``oid``; each distinct tree is read once."""
        entries = self._trees.get(oid)
        if entries is None:
            (found,) = self._objects.get([oid])
            if found is None or found.kind is not ObjectType.TREE:
                raise BadInput(str(self.path), f"cannot read tree {oid}: {oid} missing")
            entries = self._parsed(found)
        return entries

    def release_files(self, tags: list[str], globs: tuple[str, ...]) -> dict[str, list[SourceFile]]:
        """``files`` for many tags at once: the folders of all tags are read in one batch,
        and each distinct folder tree is parsed once."""
        simple = all("/" not in g[len(_static(g)) + 1 :] for g in globs)
        if not simple:
            return {tag: list(self.files(tag, globs)) for tag in tags}
        folders = [_static(g) for g in globs]
        trees = iter(self._objects.get([f"refs/tags/{tag}:{folder}" for tag in tags for folder in folders]))
        result: dict[str, list[SourceFile]] = {}
        for tag in tags:
            found, seen = [], set()
            for pattern, folder in zip(globs, folders, strict=True):
                tree = next(trees)
                if tree is None or tree.kind is not ObjectType.TREE:
                    continue
                for mode, name, blob in self._parsed(tree):
                    path = f"{folder}/{name}" if folder else name
                    if mode in ("100644", "100755") and path not in seen and fnmatchcase(path, pattern):
                        seen.add(path)
                        found.append(SourceFile(path, blob, mode))
            result[tag] = found
        return result

    def _walk(self, oid: str, prefix: str, recursive: bool) -> Iterator[tuple[str, str, str]]:
        for mode, name, sha in self._tree(oid):
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
        (tree,) = self._objects.get([f"refs/tags/{rev}^{{tree}}"])  # a tag first: a branch of its name is no release
        if tree is None:
            (tree,) = self._objects.get([f"{rev}^{{tree}}"])
        if tree is None:
            raise BadInput(str(self.path), f"no tag or commit {rev!r} in this repository")
        self._parsed(tree)
        root = tree.oid
        seen: set[str] = set()
        for pattern in globs:
            folder = _static(pattern)
            static = folder.split("/") if folder else []
            sha = self._folder(root, static)
            if sha is None:
                continue
            recursive = "/" in pattern[len(folder) + 1 :]
            for mode, path, blob in self._walk(sha, f"{folder}/" if folder else "", recursive):
                if path not in seen and fnmatchcase(path, pattern):
                    seen.add(path)
                    yield SourceFile(path, blob, mode)

    def _folder(self, sha: str, parts: list[str]) -> str | None:
        """The tree of the folder ``parts`` below the tree ``sha``; None where there is none."""
        for part in parts:
            found = next((e[2] for e in self._tree(sha) if e[1] == part and e[0] == "40000"), None)
            if found is None:
                return None
            sha = found
        return sha

    def read_path(self, rev: str, path: str) -> bytes | None:
        """The bytes of the file at ``path`` in ``rev``, or None if there is none."""
        found = next(self.files(rev, (path,)), None)
        return self.read(found.blob) if found else None

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
            commit: str = self.repo.git.commit_tree(tree, "-p", parent, "-F", str(scratch / "message"))
            return commit
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def create_branch(self, name: str, commit: str) -> str:
        """Create a branch at ``commit`` named ``name`` or, if that exists by now, the next
        free ``name-N``; never overwrites one.  Returns the name used."""
        base = re.sub(r"-\d+$", "", name) if name not in {h.name for h in self.repo.heads} else name
        for _ in range(20):
            try:
                self.repo.git.update_ref(f"refs/heads/{name}", commit, "0" * (2 * self._hash))  # none yet
                return name
            except self._git.GitCommandError as exc:
                if name not in {h.name for h in self.repo.heads}:  # not a clash: a lock file, a bad ref
                    detail = (exc.stderr or "").strip().splitlines()
                    raise BranchError(name, f"git could not create the branch: {detail[-1] if detail else exc}") from None
                name = self.free_branch(base)
        raise BranchError(name, "git could not create the branch: every name is taken")

    def format_patch(self, commit: str) -> bytes:
        """``git format-patch -1 --stdout`` of the commit, as bytes."""
        patch: bytes = self.repo.git.format_patch("-1", "--stdout", commit, stdout_as_string=False)
        return patch
