"""Path safety: every path a patch or manifest names must stay inside the target tree.

Checked before anything is written.  Refused: absolute paths, ``..`` components,
any symlink on the way (a symlinked folder could lead out of the tree), and a
target file that is itself a symlink.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

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


def resolve_inside(root: Path, path: str, *, must_exist: bool = True) -> Path:
    """``root/path`` after checking that no component is a symlink or leaves ``root``."""
    pure = check_relative(path)
    current = root
    for i, part in enumerate(pure.parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if must_exist:
                raise UnsafePath(str(current), "refused: does not exist") from None
            return root.joinpath(*pure.parts)
        last = i == len(pure.parts) - 1
        if stat.S_ISLNK(info.st_mode):
            what = "target is a symlink" if last else "path goes through a symlinked folder"
            raise UnsafePath(str(current), f"refused: {what}")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise UnsafePath(str(current), "refused: not a folder")
        if last and not stat.S_ISREG(info.st_mode):
            raise UnsafePath(str(current), "refused: not a regular file")
    real_root = root.resolve()
    if real_root not in current.resolve().parents:
        raise UnsafePath(str(current), "refused: resolves outside the target tree")
    return current
