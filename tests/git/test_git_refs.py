"""Release tags at HEAD, read from the git directory, agree with `git tag --points-at HEAD`."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.git.refs import git_dir, release_tags_at_head
from support.repos import git


def _git_says(repo: Path) -> list[str]:
    tags = git(repo, "tag", "--points-at", "HEAD", "--list", "v*").split()
    from patchkit.versions import is_release_tag, version_key

    return sorted((t for t in tags if is_release_tag(t)), key=version_key, reverse=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(3):
        (repo / "f").write_text(str(i))
        git(repo, "add", "f")
        git(repo, "commit", "-qm", f"c{i}")
    git(repo, "tag", "v0.1.0", "HEAD~2")
    git(repo, "tag", "v0.2.0")  # lightweight at HEAD
    git(repo, "tag", "-a", "-m", "annotated", "v0.2.0.post1")  # annotated at HEAD
    git(repo, "tag", "-a", "-m", "annotated", "v0.0.9", "HEAD~1")
    git(repo, "tag", "not-a-release")
    return repo


@pytest.mark.parametrize(
    "arrange",
    [
        pytest.param([], id="loose refs, loose tag objects"),
        pytest.param([["pack-refs", "--all"]], id="packed refs with peeled lines"),
        pytest.param([["gc", "-q", "--aggressive"]], id="everything packed (gc)"),
        pytest.param([["checkout", "-q", "--detach", "HEAD"]], id="detached HEAD"),
        pytest.param([["checkout", "-q", "v0.0.9"]], id="HEAD at an older annotated tag"),
        pytest.param([["checkout", "-q", "HEAD~2"]], id="HEAD at a lightweight tag"),
    ],
)
def test_agrees_with_git(repo: Path, arrange: list[list[str]]) -> None:
    for args in arrange:
        git(repo, *args)
    assert release_tags_at_head(repo) == _git_says(repo)
    assert release_tags_at_head(repo)  # every arrangement has at least one


def test_packed_refs_without_the_peeled_trait(repo: Path) -> None:
    # An old git's packed-refs: no header, no "^" lines; the tag objects are packed.
    git(repo, "gc", "-q")
    packed = repo / ".git/packed-refs"
    packed.write_text("".join(line for line in packed.read_text().splitlines(True) if not line.startswith(("^", "#"))))
    assert release_tags_at_head(repo) == ["v0.2.0.post1", "v0.2.0"] == _git_says(repo)


def test_worktree_git_file(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(wt), "v0.0.9")
    assert git_dir(wt) == (repo / ".git/worktrees/wt")
    assert release_tags_at_head(wt) == ["v0.0.9"] == _git_says(wt)


def test_no_git_and_no_tags(tmp_path: Path) -> None:
    assert release_tags_at_head(tmp_path) == [] and git_dir(tmp_path) is None
    git(tmp_path, "init", "-q")
    assert release_tags_at_head(tmp_path) == []  # unborn HEAD


def test_a_sha256_repository_is_asked_with_git(tmp_path: Path) -> None:
    """Object ids of 32 bytes: the tags at HEAD still come right (from git itself), and a
    release history in that format is refused in one line, not read as if its ids were SHA-1."""
    from patchkit.errors import BadInput
    from patchkit.git.objects import GitSource
    from patchkit.git.refs import repo_format

    repo = tmp_path / "s"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main", "--object-format=sha256")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "c")
    git(repo, "tag", "-a", "v0.5.9", "-m", "release")
    git(repo, "pack-refs", "--all")  # no loose tag file to read either
    assert repo_format(repo / ".git") == ("sha256", "files")
    assert release_tags_at_head(repo) == ["v0.5.9"] == _git_says(repo)
    with pytest.raises(BadInput) as caught:
        GitSource(repo)
    assert str(caught.value) == (f"{repo}: a repository with object format sha256 and ref storage files: patchkit reads "
                                 "release histories in git's default format (sha1, files), as its mirrors are built")


def test_reftable_storage_is_detected(tmp_path: Path) -> None:
    """git 2.39 cannot make a reftable repository; its config line is what tells one, and then
    the ref files are not read (git is asked, and answers none it cannot read)."""
    from patchkit.git.refs import repo_format

    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + "[extensions]\n\trefStorage = reftable ; a comment\n")
    assert repo_format(repo / ".git") == ("sha1", "reftable")


def test_a_repository_whose_tags_git_cannot_list_is_said(tmp_path: Path) -> None:
    """A reftable repository (format version 1, ``extensions.refStorage``) and a git that does not
    know reftable: its refs are no files to read and git refuses it, so which release is checked
    out cannot be told; one line says so, naming git's own words, never "no tag at HEAD"."""
    import subprocess

    from patchkit.errors import BadInput

    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "c")
    git(repo, "tag", "v0.5.9")
    git(repo, "config", "core.repositoryformatversion", "1")
    git(repo, "config", "extensions.refStorage", "reftable")
    asked = subprocess.run(["git", "-C", str(repo), "tag", "--points-at", "HEAD"], capture_output=True)
    if asked.returncode == 0:
        pytest.skip("this git reads reftable repositories")  # git 2.45 and later
    assert asked.stderr.startswith(b"fatal: unknown repository extension found:")
    with pytest.raises(BadInput) as caught:
        release_tags_at_head(repo)
    said = " ".join(asked.stderr.decode().split())
    assert str(caught.value) == (f"{repo}: a repository with object format sha1 and ref storage reftable, whose tags git "
                                 f"cannot list ({said}): patchkit cannot tell its release; give --version")
