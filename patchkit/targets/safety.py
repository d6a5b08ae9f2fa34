"""Path safety: every path a patch or manifest names must stay inside the target tree.

Checked before anything is written.  Refused: absolute paths, ``..`` components,
any symlink on the way (a symlinked folder could lead out of the tree), and a
target file that is itself a symlink.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from patchkit.bounded import read_open
from patchkit.errors import UnsafePath


def check_relative(path: str) -> PurePosixPath:
    """A clean relative POSIX path, or UnsafePath."""
    pure = PurePosixPath(path)
    if not path or "\\" in path or "\0" in path:
        raise UnsafePath(path or "''", "refused: not a plain relative path")
    if pure.is_absolute():
        raise UnsafePath(path, "refused: absolute path")
    if any(part in ("..", ".") for part in pure.parts) or str(pure) != path:
        raise UnsafePath(path, "refused: path is not normalised (contains '..', '.' or '//')")
    return pure


def _parts(path: str) -> tuple[str, ...]:
    """The components of a path ``check_relative`` admits (a plain one is told by its text,
    without building a PurePosixPath), or its UnsafePath."""
    parts = tuple(path.split("/"))
    if path and "\\" not in path and "\0" not in path and path[0] != "/" and all(p not in ("", ".", "..") for p in parts):
        return parts
    return check_relative(path).parts


def real_path(path: str) -> str:
    """``os.path.realpath(path)`` of a path that exists, as the kernel resolved it: opened with
    O_PATH (nothing is read) and named by ``/proc/self/fd`` (three system calls where realpath
    makes one ``lstat`` per component); realpath itself where there is no /proc."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (AttributeError, OSError):
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def _found_at(fd: int, root: str, path: str) -> bool:
    """Whether the kernel found the file open as ``fd`` at exactly the real root and ``path``: a
    symlink on the way would have taken it elsewhere (a resolved path holds no symlink).  One readlink,
    and the root's real path only where the root is not one already.  OSError where /proc cannot tell."""
    found = os.readlink(f"/proc/self/fd/{fd}")
    return found == os.path.join(root, path) or found == os.path.join(real_path(root), path)


def _plain_file(root: str, path: str) -> bool:
    """Whether ``root/path`` is a regular file that the kernel finds there (``_found_at``), its last
    component opened without following it.  One open, one fstat, one readlink; where that does not tell
    (no /proc, a file missing, a link), the walk does."""
    try:
        fd = os.open(os.path.join(root, path), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (AttributeError, OSError):
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and _found_at(fd, root, path)
    except OSError:
        return False
    finally:
        os.close(fd)


def read_plain(root: Path, path: str, cap: int) -> bytes | None:
    """The bytes of ``root/path`` where it is a plain file (``_plain_file``'s test) of at most ``cap``
    bytes, read through the descriptor the test opened: nothing can be swapped in between the look and
    the read, in one open, one fstat, one readlink and the reads.  None where that does not tell (a path
    to refuse, a file missing, a link, no regular file, over ``cap``, no /proc): ``resolve_inside`` and
    ``bounded.read_file`` then say why, or read it."""
    try:
        _parts(path)
        fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (UnsafePath, OSError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > cap or not _found_at(fd, os.fspath(root), path):
            return None
        return read_open(fd, info.st_size, cap)  # None where it grew while read: the slow way says so
    except OSError:
        return None
    finally:
        os.close(fd)


def resolve_inside(root: Path, path: str, *, must_exist: bool = True) -> Path:
    """``root/path`` after checking that no component is a symlink or leaves ``root``.

    A regular file where the kernel finds it (``_plain_file``) is the common case, told in a few
    system calls; anything else is walked as strings (``os.lstat`` of each component, then
    ``real_path`` of the root and of the file), which says what is wrong: the commands check every
    candidate file this way, more than once, before reading it."""
    parts = _parts(path)
    if _plain_file(os.fspath(root), path):
        return root / path
    current = os.fspath(root)
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if must_exist:
                raise UnsafePath(str(root.joinpath(*parts[: i + 1])), "refused: does not exist") from None
            return root.joinpath(*parts)
        last = i == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            what = "target is a symlink" if last else "path goes through a symlinked folder"
            raise UnsafePath(str(root.joinpath(*parts[: i + 1])), f"refused: {what}")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise UnsafePath(str(root.joinpath(*parts[: i + 1])), "refused: not a folder")
        if last and not stat.S_ISREG(info.st_mode):
            raise UnsafePath(str(root.joinpath(*parts)), "refused: not a regular file")
    # A folder swapped for a link since the walk (a race) is caught here: the file's real path leaves the tree.
    inside = os.path.join(real_path(os.fspath(root)), "")  # the real root and a separator: what the real path starts with
    if not real_path(current).startswith(inside):
        raise UnsafePath(str(root.joinpath(*parts)), "refused: resolves outside the target tree")
    return root.joinpath(*parts)
