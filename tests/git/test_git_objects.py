"""Git objects read through the one ``git cat-file --batch`` reader (``patchkit.git.batch``):
trees parsed with the repository's hash length, checked against ``git ls-tree``; names
written in chunks and answered in order; release dates in RFC 2822 as ``git log`` writes them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.git.batch import CHUNK, CatFile, TreeEntry, tree_entries
from patchkit.git.objects import GitSource
from support.repos import GIT_ENV, git


def _repo(path: Path, *init: str) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main", *init)
    (path / "pkg").mkdir()
    (path / "pkg" / "a.py").write_text("a = 1\n")
    (path / "pkg" / "b c.py").write_text("b = 2\n")  # a space in a name
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "run.sh").chmod(0o755)
    (path / "link").symlink_to("run.sh")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "c")
    return path


def _ls_tree(repo: Path, rev: str) -> list[TreeEntry]:
    """git's own listing of a tree: ``<mode> <type> <id>\\t<name>`` per entry."""
    entries = []
    for line in git(repo, "ls-tree", "-z", rev).split("\0"):
        if line:
            meta, name = line.split("\t", 1)
            mode, _, oid = meta.split(" ")
            entries.append(TreeEntry(mode.lstrip("0") if mode == "040000" else mode, name, oid))
    return entries


def _catfile(repo: Path) -> CatFile:
    import git as gitpython

    return CatFile(gitpython.Repo(repo).git, str(repo))


@pytest.mark.parametrize("fmt, hash_bytes", [("sha1", 20), ("sha256", 32)])
def test_a_tree_is_parsed_with_the_hash_length_of_its_repository(tmp_path: Path, fmt: str, hash_bytes: int) -> None:
    """A SHA-256 repository's tree holds 32-byte ids: parsed with that length, its entries are
    git's; parsed as if they were SHA-1 ids, they would not be."""
    repo = _repo(tmp_path / fmt, f"--object-format={fmt}")
    (tree,) = _catfile(repo).get(["HEAD^{tree}"])
    assert tree.kind == "tree" and len(tree.oid) == 2 * hash_bytes
    assert tree_entries(tree.data, hash_bytes) == _ls_tree(repo, "HEAD") == [
        TreeEntry("120000", "link", git(repo, "rev-parse", "HEAD:link").strip()),
        TreeEntry("40000", "pkg", git(repo, "rev-parse", "HEAD:pkg").strip()),
        TreeEntry("100755", "run.sh", git(repo, "rev-parse", "HEAD:run.sh").strip()),
    ]
    (sub,) = _catfile(repo).get(["HEAD:pkg"])
    assert tree_entries(sub.data, hash_bytes) == _ls_tree(repo, "HEAD:pkg")
    if hash_bytes == 32:  # read as 20-byte ids, the entries run into one another
        try:
            wrong = tree_entries(tree.data, 20)
        except ValueError:  # a mode or a name that is no text
            wrong = None
        assert wrong != _ls_tree(repo, "HEAD")


def test_a_tree_cut_short_is_no_entry(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    (tree,) = _catfile(repo).get(["HEAD:pkg"])
    with pytest.raises(ValueError, match=r"^a tree entry cut short: 19 of 20 bytes of its object id$"):
        tree_entries(tree.data[:-1])


def test_many_names_come_back_in_order_chunk_after_chunk(tmp_path: Path) -> None:
    """More names than two chunks hold (each id 41 bytes with its newline), a missing one and
    names with a path (one with a space) among them: every answer is the one asked for, in order."""
    repo = _repo(tmp_path / "r")
    blobs = [_write_blob(repo, f"blob {i}\n".encode()) for i in range(300)]
    assert 300 * 41 > 2 * CHUNK
    missing = "0" * 40
    names = blobs[:150] + [missing, "HEAD:pkg/a.py", "HEAD:pkg/b c.py"] + blobs[150:]
    found = _catfile(repo).get(names)
    assert [f.data if f else None for f in found] == (
        [f"blob {i}\n".encode() for i in range(150)] + [None, b"a = 1\n", b"b = 2\n"]
        + [f"blob {i}\n".encode() for i in range(150, 300)])
    assert [f.oid for f in found if f][:150] == blobs[:150]


def _write_blob(repo: Path, data: bytes) -> str:
    done = subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=data,
                          env={**os.environ, **GIT_ENV}, check=True, capture_output=True)
    return done.stdout.decode().strip()


def test_a_name_with_a_line_feed_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    with pytest.raises(BadInput) as caught:
        _catfile(repo).get(["HEAD\nHEAD"])
    assert str(caught.value) == f"{repo}: an object name with a line feed in it: 'HEAD\\nHEAD'"


def test_a_revision_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    source = GitSource(repo)
    with pytest.raises(BadInput) as caught:
        list(source.files("v9.9.9", ("pkg/*.py",)))
    assert str(caught.value) == f"{repo}: no tag or commit 'v9.9.9' in this repository"
    assert [(f.path, source.read(f.blob)) for f in source.files("HEAD", ("pkg/*.py",))] == [
        ("pkg/a.py", b"a = 1\n"), ("pkg/b c.py", b"b = 2\n")]


def test_a_tag_wins_over_a_branch_of_its_name(tmp_path: Path) -> None:
    """``files`` and ``release_files`` of a tag read the tag's tree, not a branch named like it."""
    repo = _repo(tmp_path / "r")
    git(repo, "tag", "v1.0")
    (repo / "pkg" / "a.py").write_text("a = 2\n")
    git(repo, "commit", "-qam", "later")
    git(repo, "branch", "v1.0")
    source = GitSource(repo)
    (one,) = [f for f in source.files("v1.0", ("pkg/a.py",))]
    assert source.read(one.blob) == b"a = 1\n"
    (many,) = source.release_files(["v1.0"], ("pkg/a.py",))["v1.0"]
    assert many == one


@pytest.mark.parametrize("date", ["2026-01-02T03:04:05+00:00", "2024-02-29T23:59:59+05:30", "2025-07-01T00:00:00-01:30",
                                  "2001-09-09T01:46:40+14:00", "1999-12-31T20:00:00-12:00"])
def test_a_release_date_is_what_git_log_writes(tmp_path: Path, date: str) -> None:
    """RFC 2822 in the author's time zone (``email.utils.format_datetime``), as ``git log --format=%aD``
    writes it but for the day of the month, always two digits (``02 Jan``, where git writes ``2 Jan``):
    the shipped patches' ``Date:`` lines are written so."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "c", date=date)
    git(repo, "tag", "v0.1.0")
    release = GitSource(repo).release("v0.1.0")
    said = git(repo, "log", "-1", "--format=%aD", "v0.1.0").strip()
    assert release.date == re.sub(r"^(\w{3}), (\d) ", r"\1, 0\2 ", said)
    assert release.day == git(repo, "log", "-1", "--format=%ad", "--date=short", "v0.1.0").strip() == date[:10]
