"""One ``git cat-file --batch`` process per repository, the one reader of git objects: every
commit, tree and blob patchkit reads from a repository comes through it, many names at a time.

Names are written in chunks of at most ``CHUNK`` bytes, which every pipe holds, and a chunk's
answers are all read before the next chunk is written: git never waits on a full pipe while
patchkit waits on git.  Tree objects are parsed here too, with the repository's hash length
(20 bytes for SHA-1, 32 for SHA-256).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, NoReturn

from patchkit.errors import BadInput
from patchkit.types import StrEnum
from patchkit.values import Record

if TYPE_CHECKING:
    from git.cmd import Git

CHUNK = 4096  # bytes of names per write: a pipe holds one page at the least
HASH_BYTES = {"sha1": 20, "sha256": 32}


class ObjectType(StrEnum):
    """A git object's type, as ``git cat-file --batch`` names it."""

    BLOB = "blob"
    TREE = "tree"
    COMMIT = "commit"
    TAG = "tag"


_TYPES = {k.encode(): k for k in ObjectType}


class Object(Record):
    oid: str  # hex
    kind: ObjectType
    data: bytes


class TreeEntry(Record):
    """One entry of a tree object."""

    mode: str  # "100644", "100755", "40000", "120000", "160000"
    name: str
    oid: str  # hex


def tree_entries(raw: bytes, hash_bytes: int = 20) -> list[TreeEntry]:
    """The entries of a raw tree object (``<mode> <name>\\0<id>`` each, the id ``hash_bytes`` long)."""
    entries: list[TreeEntry] = []
    i = 0
    while i < len(raw):
        space = raw.index(b" ", i)
        nul = raw.index(b"\0", space)
        oid = raw[nul + 1 : nul + 1 + hash_bytes]
        if len(oid) != hash_bytes:
            raise ValueError(f"a tree entry cut short: {len(oid)} of {hash_bytes} bytes of its object id")
        entries.append(TreeEntry(raw[i:space].decode(), raw[space + 1 : nul].decode("utf-8", "surrogateescape"), oid.hex()))
        i = nul + 1 + hash_bytes
    return entries


def _chunks(names: Sequence[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for name in names:
        length = len(name.encode("utf-8", "surrogateescape")) + 1
        if chunk and size + length > CHUNK:
            yield chunk
            chunk, size = [], 0
        chunk.append(name)
        size += length
    if chunk:
        yield chunk


class CatFile:
    """``git cat-file --batch`` of the repository that ``git`` (GitPython's command runner) runs
    in, started on the first read and kept for the next; ``where`` names the repository in errors."""

    def __init__(self, git: Git, where: str) -> None:
        self._git = git
        self._where = where
        self._proc: Git.AutoInterrupt | None = None  # GitPython's: it ends the process when dropped
        self._pipes: tuple[IO[bytes], IO[bytes]] | None = None  # its standard input and output

    def get(self, names: Sequence[str]) -> list[Object | None]:
        """The object each name (an id, ``tag^{commit}``, ``rev:path``) names, None where there is
        none (git answers "missing" or "ambiguous"), in the order given."""
        for name in names:
            if "\n" in name:
                raise BadInput(self._where, f"an object name with a line feed in it: {name!r}")
        found: list[Object | None] = []
        for chunk in _chunks(names):
            stdin, stdout = self._pipes or self._start()
            try:
                stdin.write("".join(f"{n}\n" for n in chunk).encode("utf-8", "surrogateescape"))
                stdin.flush()
            except BrokenPipeError:
                self._died()
            for name in chunk:
                found.append(self._answer(stdout, name))
        return found

    def _start(self) -> tuple[IO[bytes], IO[bytes]]:
        import subprocess

        proc = self._git.cat_file("--batch", as_process=True, istream=subprocess.PIPE)
        self._proc, self._pipes = proc, (proc.proc.stdin, proc.proc.stdout)
        return self._pipes

    def _answer(self, stdout: IO[bytes], name: str) -> Object | None:
        header = stdout.readline()
        if not header.endswith(b"\n"):
            self._died()
        fields = header[:-1].split(b" ")
        if len(fields) == 3 and fields[1] in _TYPES and fields[2].isdigit():
            size = int(fields[2])
            data = stdout.read(size)
            if len(data) != size or stdout.read(1) != b"\n":
                self._died()
            return Object(fields[0].decode("ascii"), _TYPES[fields[1]], data)
        if header.endswith((b" missing\n", b" ambiguous\n")):
            return None
        raise BadInput(self._where, f"git cat-file answered {header[:200].decode('utf-8', 'replace').rstrip()!r} for {name!r}")

    def _died(self) -> NoReturn:
        auto, self._proc, self._pipes = self._proc, None, None
        proc = auto.proc if auto is not None else None  # set while the process runs, as here
        if proc is not None:
            proc.kill()
            proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace").strip().splitlines() if proc and proc.stderr else []
        raise BadInput(self._where, f"git cat-file stopped ({err[-1] if err else f'exit {proc and proc.returncode}'})")
