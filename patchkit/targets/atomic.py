"""Create and replace files without ever writing through a symlink.

Every file patchkit writes is first created under a fresh, unpredictable temp name
(``.<name>.<16 hex digits>.patchkit-tmp``) in the file's own folder with
``O_CREAT|O_EXCL|O_NOFOLLOW``: whatever a checkout or an image holds at any name, a link
is never followed and an existing file is never truncated.  The folder itself is opened
with ``O_DIRECTORY|O_NOFOLLOW``, and the temp file is renamed over the name relative to
that descriptor.  The state dir and what is in it are read the same way (``read_private``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from patchkit.errors import UnsafePath

TEMP_SUFFIX = ".patchkit-tmp"
_HEX = 16  # os.urandom(8).hex(): secrets.token_hex(8), without importing secrets (hashlib, random, hmac: a sixth of `import click`)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
STATE_LINK = "refused: is a symlink; patchkit never reads or writes its state through one (remove it)"


def open_dir(path: Path) -> int:
    """A descriptor of the folder ``path``; UnsafePath if it is a symlink or not a folder."""
    try:
        return os.open(path, _DIR)
    except OSError as exc:
        if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR and os.path.islink(path):
            raise UnsafePath(str(path), "refused: is a symlink; patchkit never writes through one") from None
        if exc.errno == errno.ENOTDIR:
            raise UnsafePath(str(path), "refused: not a folder") from None
        raise


def fsync_dir(path: Path) -> None:
    fd = open_dir(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folders(folders: set[Path]) -> None:
    """fsync each folder of a batch of ``write_atomic``s once: every rename in it is then durable
    (one fsync of a folder for all its new names, not one for each, as git's batched fsync)."""
    for folder in sorted(folders):
        fsync_dir(folder)


def make_dir(path: Path) -> None:
    """Make the folder ``path`` (its parent must exist), or accept a real folder there; a
    symlink or anything else at ``path`` is UnsafePath."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        os.close(open_dir(path))


def read_private(path: Path) -> bytes | None:
    """The bytes of the regular file ``path`` (in the state dir), None if there is none;
    UnsafePath for a symlink, a FIFO, a device or a folder: never read through."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(str(path), STATE_LINK) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(str(path), "refused: not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int | None = None, durable: bool = True,
                 folders: set[Path] | None = None) -> None:
    """Write through a new temp file in the same folder: fsync, rename, fsync the folder.

    ``durable=False`` skips the fsyncs (still atomic: readers see the old or the new file,
    never half of one) for output that can be regenerated, such as generate's patches.
    ``folders``: a batch of writes, whose folders the caller fsyncs once each when the batch is
    written (``sync_folders``): the file's own bytes are fsynced here, its folder is added.  An
    OSError names ``path`` (a full disk: the temp file is removed, ``path`` is as it was).
    """
    import fcntl  # here: the commands that only read never lock

    path = Path(path)
    folder = open_dir(path.parent)
    try:
        tmp, fd = _create(folder, path.name, 0o600 if mode is None else mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until the rename: remove_temps leaves a live write alone
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            _unlink_quietly(tmp, folder)
            raise
        finally:
            os.close(fd)
        if durable and folders is not None:
            folders.add(path.parent)
        elif durable:
            os.fsync(folder)
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        os.close(folder)


def _create(folder: int, name: str, mode: int) -> tuple[str, int]:
    for _ in range(100):
        tmp = f".{name}.{os.urandom(_HEX // 2).hex()}{TEMP_SUFFIX}"
        try:
            return tmp, os.open(tmp, _NEW, mode, dir_fd=folder)
        except FileExistsError:  # someone's file (or link) at that name: never touched, take another
            continue
    raise OSError(errno.EEXIST, "no free temp name", name)


def _unlink_quietly(name: str, folder: int) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        pass


def is_temp(name: str, of: str | None = None) -> bool:
    """Whether ``name`` is one of write_atomic's temp names (of the file named ``of``)."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return False
    stem = name[1 : -len(TEMP_SUFFIX)]
    base, _, token = stem.rpartition(".")
    return len(token) == _HEX and all(c in "0123456789abcdef" for c in token) and bool(base) and (of is None or base == of)


def remove_temps(path: Path) -> None:
    """Remove the temp files a killed write_atomic of ``path`` left: regular files of its name
    pattern that no live write holds locked (a link or a folder at such a name, and a temp
    file another run is writing, stay)."""
    import fcntl

    try:
        entries = [e for e in os.scandir(path.parent) if is_temp(e.name, path.name) and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            fd = os.open(entry.path, _READ)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino == os.lstat(entry.path).st_ino:
                os.unlink(entry.path)
        except OSError:  # locked: being written now; or gone meanwhile
            pass
        finally:
            os.close(fd)
