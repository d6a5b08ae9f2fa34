"""patchkit.targets.safety: every path a patch, manifest, journal or state names stays inside
the target tree, through no symlink, to a regular file; checked before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.errors import UnsafePath
from patchkit.targets import safety
from patchkit.targets.safety import check_relative, resolve_inside

NOT_PLAIN = "refused: not a plain relative path"
NOT_NORMAL = "refused: path is not normalised (contains '..', '.' or '//')"


@pytest.mark.parametrize(
    "path, shown, reason",
    [
        ("", "''", NOT_PLAIN),
        ("a\\b.py", "a\\b.py", NOT_PLAIN),
        ("/etc/passwd", "/etc/passwd", "refused: absolute path"),
        ("//etc/passwd", "//etc/passwd", "refused: absolute path"),
        ("../outside.py", "../outside.py", NOT_NORMAL),
        ("python/../../outside.py", "python/../../outside.py", NOT_NORMAL),
        ("./python/x.py", "./python/x.py", NOT_NORMAL),
        ("python/./x.py", "python/./x.py", NOT_NORMAL),
        ("python//x.py", "python//x.py", NOT_NORMAL),
        ("python/x.py/", "python/x.py/", NOT_NORMAL),
        ("..", "..", NOT_NORMAL),
    ],
)
def test_paths_that_are_not_plain_relative_paths_are_refused(path: str, shown: str, reason: str) -> None:
    with pytest.raises(UnsafePath) as raised:
        check_relative(path)
    assert (raised.value.path, raised.value.reason, raised.value.exit_code) == (shown, reason, 3)


def test_a_nul_byte_is_refused_and_shown_printable() -> None:
    with pytest.raises(UnsafePath) as raised:
        check_relative("python/x\0.py")
    assert raised.value.reason == NOT_PLAIN
    assert "\0" not in str(raised.value)


@pytest.mark.parametrize("path", ["x.py", "python/sglang/srt/x.py", "a.b/c-d_e.py"])
def test_plain_relative_paths_pass(path: str) -> None:
    assert str(check_relative(path)) == path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/python/sglang/x.py, a file and a folder outside root, and links of each kind."""
    root = tmp_path / "root"
    (root / "python/sglang").mkdir(parents=True)
    (root / "python/sglang/x.py").write_bytes(b"X = 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/x.py").write_bytes(b"X = 2\n")
    (root / "python/out").symlink_to(tmp_path / "outside")  # a folder leading out
    (root / "python/inside").symlink_to("sglang")  # a folder leading back in: still refused
    (root / "python/sglang/link.py").symlink_to("x.py")  # a target that is a symlink
    (root / "python/sglang/dir.py").mkdir()  # not a regular file
    return root


def test_a_path_inside_resolves_to_the_file(tree: Path) -> None:
    assert resolve_inside(tree, "python/sglang/x.py") == tree / "python/sglang/x.py"


@pytest.mark.parametrize(
    "path, where, reason",
    [
        ("python/out/x.py", "python/out", "refused: path goes through a symlinked folder"),
        ("python/inside/x.py", "python/inside", "refused: path goes through a symlinked folder"),
        ("python/sglang/link.py", "python/sglang/link.py", "refused: target is a symlink"),
        ("python/sglang/x.py/y.py", "python/sglang/x.py", "refused: not a folder"),
        ("python/sglang/dir.py", "python/sglang/dir.py", "refused: not a regular file"),
        ("python/sglang/missing.py", "python/sglang/missing.py", "refused: does not exist"),
        ("python/missing/x.py", "python/missing", "refused: does not exist"),
    ],
)
def test_unsafe_places_are_refused_naming_where(tree: Path, path: str, where: str, reason: str) -> None:
    with pytest.raises(UnsafePath) as raised:
        resolve_inside(tree, path)
    assert (raised.value.path, raised.value.reason) == (str(tree / where), reason)


def test_a_missing_file_may_be_allowed_but_never_through_a_link(tree: Path) -> None:
    assert resolve_inside(tree, "python/sglang/new.py", must_exist=False) == tree / "python/sglang/new.py"
    assert resolve_inside(tree, "python/new/deeper/x.py", must_exist=False) == tree / "python/new/deeper/x.py"
    with pytest.raises(UnsafePath, match="symlinked folder"):
        resolve_inside(tree, "python/out/new.py", must_exist=False)


def test_the_tree_itself_may_be_reached_through_a_link(tree: Path, tmp_path: Path) -> None:
    """A root given through a symlink (/home -> /data/home) is the tree; only links below it count."""
    (tmp_path / "alias").symlink_to(tree)
    assert resolve_inside(tmp_path / "alias", "python/sglang/x.py") == tmp_path / "alias/python/sglang/x.py"
    assert os.path.samefile(tmp_path / "alias/python/sglang/x.py", tree / "python/sglang/x.py")


def test_a_folder_swapped_for_a_link_after_the_walk_is_refused(tree: Path, tmp_path: Path, monkeypatch) -> None:
    """A component that becomes a link between the walk and the end of the check (a race) leads to
    another file than the one checked: refused, naming the path."""
    real_lstat = os.lstat

    def swap_after_walk(path, *args, **kwargs):
        info = real_lstat(path, *args, **kwargs)
        if str(path).endswith("python/sglang/x.py"):  # the walk's last step: now swap the folder for a link
            (tree / "python/sglang").rename(tmp_path / "moved")
            (tmp_path / "elsewhere").mkdir()
            (tmp_path / "elsewhere/x.py").write_bytes(b"X = 3\n")
            (tree / "python/sglang").symlink_to(tmp_path / "elsewhere")
        return info

    monkeypatch.setattr(safety, "_plain_file", lambda root, path: False)  # the walk, as for a file the kernel did not tell
    monkeypatch.setattr(os, "lstat", swap_after_walk)
    with pytest.raises(UnsafePath) as raised:
        resolve_inside(tree, "python/sglang/x.py")
    assert (raised.value.path, raised.value.reason) == (str(tree / "python/sglang/x.py"), "refused: resolves outside the target tree")


def test_a_folder_swapped_for_a_link_while_the_kernel_looks_is_refused(tree: Path, tmp_path: Path, monkeypatch) -> None:
    """The same race in the few system calls of the common case (after the file is opened, before
    its path is read back): the file is no longer where it was asked for, so the walk looks, and
    finds the link."""
    real_fstat, swapped = os.fstat, []

    def swap_after_open(fd):
        info = real_fstat(fd)
        if swapped:
            return info
        swapped.append(fd)
        (tree / "python/sglang").rename(tmp_path / "moved")
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere/x.py").write_bytes(b"X = 3\n")
        (tree / "python/sglang").symlink_to(tmp_path / "elsewhere")
        return info

    monkeypatch.setattr(os, "fstat", swap_after_open)
    with pytest.raises(UnsafePath) as raised:
        resolve_inside(tree, "python/sglang/x.py")
    assert (raised.value.path, raised.value.reason) == (str(tree / "python/sglang"), "refused: path goes through a symlinked folder")


def test_the_kernel_tells_a_plain_file_and_nothing_else(tree: Path) -> None:
    assert safety._plain_file(str(tree), "python/sglang/x.py")
    assert not safety._plain_file(str(tree), "python/sglang/link.py")  # the last component a link
    assert not safety._plain_file(str(tree), "python/inside/x.py")  # a folder on the way a link, back inside
    assert not safety._plain_file(str(tree), "python/out/x.py")  # and one leading out
    assert not safety._plain_file(str(tree), "python/sglang/dir.py")  # a folder
    assert not safety._plain_file(str(tree), "python/sglang/missing.py")
    assert resolve_inside(tree, "python/sglang/x.py") == tree / "python/sglang/x.py"


def test_a_plain_file_is_read_through_the_descriptor_that_checked_it(tree: Path, tmp_path: Path) -> None:
    """``read_plain``: a plain file's bytes; None (the slow way says why) for every other place, a FIFO
    without waiting for a writer, a file over the cap, and a root reached through a link (read there)."""
    assert safety.read_plain(tree, "python/sglang/x.py", 64) == b"X = 1\n"
    assert safety.read_plain(tree, "python/sglang/x.py", 5) is None  # 6 bytes, over the cap
    os.mkfifo(tree / "python/sglang/pipe.py")
    for path in ("python/sglang/link.py", "python/inside/x.py", "python/out/x.py", "python/sglang/dir.py",
                 "python/sglang/missing.py", "python/sglang/pipe.py", "../outside/x.py", "python//sglang/x.py"):
        assert safety.read_plain(tree, path, 64) is None, path
    (tmp_path / "alias").symlink_to(tree)
    assert safety.read_plain(tmp_path / "alias", "python/sglang/x.py", 64) == b"X = 1\n"


def test_a_folder_swapped_for_a_link_while_read_plain_looks_is_no_plain_file(tree: Path, tmp_path: Path, monkeypatch) -> None:
    """The race of the common case, as for ``_plain_file``: a folder on the way swapped for a link after the
    open and before the path is read back; the file opened is no longer where it was asked for: None."""
    real_fstat, swapped = os.fstat, []

    def swap_after_open(fd):
        if not swapped:
            swapped.append(fd)
            (tree / "python/sglang").rename(tmp_path / "moved")
            (tmp_path / "elsewhere").mkdir()
            (tmp_path / "elsewhere/x.py").write_bytes(b"X = 3\n")
            (tree / "python/sglang").symlink_to(tmp_path / "elsewhere")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", swap_after_open)
    assert safety.read_plain(tree, "python/sglang/x.py", 64) is None
    with pytest.raises(UnsafePath) as raised:
        resolve_inside(tree, "python/sglang/x.py")
    assert (raised.value.path, raised.value.reason) == (str(tree / "python/sglang"), "refused: path goes through a symlinked folder")


def test_a_file_is_read_to_its_end_within_its_cap(tmp_path: Path) -> None:
    """``bounded.read_open``, the read loop of ``read_file`` and ``read_plain``: to the end whatever size
    was seen before (a file that grew after its fstat), None past the cap (it grew while read)."""
    from patchkit.bounded import read_open

    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_open(fd, 10, 64) == b"x" * 10
        os.lseek(fd, 0, os.SEEK_SET)
        assert read_open(fd, 3, 64) == b"x" * 10  # seen at 3 bytes, read whole
        os.lseek(fd, 0, os.SEEK_SET)
        assert read_open(fd, 10, 10) == b"x" * 10  # exactly the cap
        os.lseek(fd, 0, os.SEEK_SET)
        assert read_open(fd, 3, 9) is None  # past the cap
    finally:
        os.close(fd)
    assert safety.read_plain(tmp_path, "f", 9) is None and safety.read_plain(tmp_path, "f", 10) == b"x" * 10
