"""Replace a file atomically: temp file in the same folder, fsync, rename, fsync the folder."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int | None = None, durable: bool = True) -> None:
    """Write through a temp file in the same folder: fsync, rename, fsync the folder.

    The temp name is fixed (``.<name>.patchkit-tmp``) so that recovery can find and
    remove one left by a kill.  ``durable=False`` skips the fsyncs (still atomic:
    readers see the old or the new file, never half of one) for output that can be
    regenerated, such as generate's patches.
    """
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if mode is None else mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if mode is not None:
            os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.patchkit-tmp")
