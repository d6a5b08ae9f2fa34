"""Files of released wheels, read without downloading the wheels: ``member(distribution, version, path)``
gives the bytes of one file of a release's wheel, ``names(distribution, version)`` the wheel's names.

Where each comes from, the cheapest first:

1. ``<cache>/members/<distribution>/<version>/files/<path>``: every member read is kept there, so a
   run reads each once and later runs read nothing from the index;
2. the whole wheel, where ``support.mirror.fetch_wheel`` cached it (``<cache>/wheels/...``);
3. the wheel on the indexes pip is configured with (``support.index``: pip's settings, the simple
   API), read in parts with HTTP Range requests: the end of the zip (its end record and central
   directory, kept in ``<cache>/members/<distribution>/<version>/central-directory``), then each
   member's own bytes.  ``zipfile.ZipFile`` reads a ``RangeFile``, a seekable file whose bytes are
   fetched as zipfile asks for them.  A ``file://`` index's wheel is read as the local file it is.

The wheel taken: a pure one (``py3-none-any``), else CPython 3.11's for manylinux x86_64, else any
manylinux x86_64 one, else any; with ``machine`` (``"aarch64"``: what a GB10 installs), a pure one, else
CPython 3.11's manylinux one for that machine, else any manylinux one for it, kept apart (``<version>/<machine>``).  ``<cache>`` is ``$PATCHKIT_CACHE`` or ``~/.cache/patchkit``.  What a
process opened (central directories, index pages) is kept until ``forget()``.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from patchkit.errors import MirrorError
from support import index
from support.mirror import default_cache

MEMBER_LIMIT = 64 << 20  # the largest member read (its size and its compressed size)
FETCH_LIMIT = MEMBER_LIMIT + (1 << 20)  # the most one Range request may bring: a member with its header
TAIL = 256 << 10  # the first request: the zip's last bytes (its end record, most central directories)
READ_AHEAD = 64 << 10  # the least fetched when zipfile reads past what is there
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class MissingMember(MirrorError):
    """The wheel has no such file."""


class RangeFile:
    """A read-only, seekable file over HTTP Range requests: the parts read are fetched once and kept
    (``spans``); ``fetched`` and ``requests`` count what came over the wire."""

    def __init__(self, url: str | None, opener, name: str, size: int, spans=(), locate=None) -> None:
        self.url, self._opener, self.name, self.size = url, opener, name, size
        self._locate = locate  # gives (url, opener) when the first fetch needs them
        self.spans: list[tuple[int, bytes]] = sorted(spans)
        self.pos = self.fetched = self.requests = 0

    @classmethod
    def open(cls, url: str, opener, name: str, tail: int = TAIL) -> RangeFile:
        """The file at ``url``, its last ``tail`` bytes fetched (and its size learnt) in one request."""
        rf = cls(url, opener, name, 0)
        start, data, rf.size = rf._get(f"bytes=-{tail}")
        rf.spans = [(start, data)]
        return rf

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        if self.pos < 0:
            raise OSError(f"{self.name}: seek to {self.pos}")
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.span(self.pos, end, ahead=READ_AHEAD)
        self.pos = end
        return data

    def close(self) -> None:
        pass

    def span(self, start: int, end: int, ahead: int = 0) -> bytes:
        """Bytes ``start`` to ``end``, fetched where they are not here yet."""
        self.ensure(start, end, ahead)
        for first, data in self.spans:
            if first <= start and end <= first + len(data):
                return data[start - first:end - first]
        raise AssertionError(f"{self.name}: {start}-{end} not held after fetching it")

    def ensure(self, start: int, end: int, ahead: int = 0) -> None:
        """Fetch what of ``start`` to ``end`` is not here: each gap between the spans held, and the
        end with at least ``ahead`` bytes (zipfile's reads of its own are small pieces)."""
        pos = start
        for first, data in list(self.spans):
            if first + len(data) <= pos:
                continue
            if first >= end:
                break
            if first > pos:
                self._fetch(pos, first)
            pos = max(pos, first + len(data))
        if pos < end:
            self._fetch(pos, min(self.size, max(end, pos + ahead)))

    def _fetch(self, start: int, end: int) -> None:
        if end - start > FETCH_LIMIT:
            raise MirrorError(f"{self.name}: {end - start} bytes in one read, more than {FETCH_LIMIT >> 20} MiB")
        got, data, _ = self._get(f"bytes={start}-{end - 1}")
        if got != start or len(data) != end - start:
            raise MirrorError(f"{self.name}: asked for bytes {start}-{end - 1}, got {len(data)} from {got}")
        merged = sorted([*self.spans, (start, data)])
        self.spans = [merged[0]]
        for first, data in merged[1:]:
            last, held = self.spans[-1]
            if first <= last + len(held):  # touching or overlapping: one span
                self.spans[-1] = (last, held + data[last + len(held) - first:])
            else:
                self.spans.append((first, data))

    def _get(self, byte_range: str) -> tuple[int, bytes, int]:
        """(first byte, bytes, the file's size) of one Range request."""
        if self.url is None:
            self.url, self._opener = self._locate()
        request = urllib.request.Request(self.url.partition("#")[0], headers={"Range": byte_range, "Accept-Encoding": "identity"})
        try:
            with self._opener.open(request, timeout=120) as response:
                if response.status != 206:
                    raise MirrorError(f"{self.name}: the server answered {response.status} to a Range request"
                                      " (it does not serve parts of files)")
                match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
                if match is None:
                    raise MirrorError(f"{self.name}: a Range answer without a Content-Range")
                first, last, size = map(int, match.groups())
                if last - first + 1 > FETCH_LIMIT:
                    raise MirrorError(f"{self.name}: {last - first + 1} bytes in one answer, more than {FETCH_LIMIT >> 20} MiB")
                data = response.read(last - first + 2)
        except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
            raise MirrorError(f"cannot read {self.name}: {exc}") from None
        if len(data) != last - first + 1:
            raise MirrorError(f"{self.name}: {len(data)} bytes for the range {first}-{last}")
        self.requests += 1
        self.fetched += len(data)
        return first, data, size


class _Wheel:
    """An opened wheel: its zip (a local file or a RangeFile) and its members by name."""

    def __init__(self, name: str, zf: zipfile.ZipFile, source: RangeFile | None = None) -> None:
        self.name, self.zf, self.source = name, zf, source
        self.infos = {i.filename: i for i in zf.infolist()}
        self.names = tuple(self.infos)
        self._starts = sorted({i.header_offset for i in self.infos.values()} | {zf.start_dir})

    def read(self, path: str) -> bytes:
        info = self.infos.get(path)
        if info is None or info.is_dir():
            raise MissingMember(f"{self.name} has no {path}")
        if max(info.file_size, info.compress_size) > MEMBER_LIMIT:
            raise MirrorError(f"{self.name}: {path} is {info.file_size} bytes, more than the {MEMBER_LIMIT >> 20} MiB read here")
        if self.source is not None:  # the member's local header and data, up to the next member: one request
            at = bisect.bisect_right(self._starts, info.header_offset)
            end = self._starts[at] if at < len(self._starts) else self.source.size
            self.source.ensure(info.header_offset, end)
        try:
            return self.zf.read(info)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise MirrorError(f"{self.name}: {path}: {exc}") from None


_opened: dict[tuple, _Wheel] = {}  # (cache, distribution, version) -> its wheel, for the process
_pages: dict[tuple, object] = {}  # pip's settings and opener, the index pages read, for the process


def forget() -> None:
    """Drop what this process opened and read from the indexes (the caches on disk stay)."""
    for wheel in _opened.values():
        wheel.zf.close()
    _opened.clear()
    _pages.clear()


def _members(cache: Path, distribution: str, version: str, machine: str = "") -> Path:
    for part in (distribution, version, *([machine] if machine else [])):
        if not _NAME.fullmatch(part):
            raise MirrorError(f"{part!r}: not a distribution, a version or a machine")
    return cache / "members" / distribution / version / machine if machine else cache / "members" / distribution / version


def _write(target: Path, data: bytes) -> None:
    """Write ``target`` whole or not at all: a temporary file beside it, then os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _member_path(cache: Path, distribution: str, version: str, archive: str, path: str, machine: str = "") -> Path:
    """Where a member read of ``archive`` ("files": the wheel's, "sdist": the source archive's) is kept."""
    if path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
        raise MirrorError(f"{path!r}: not a path inside a release's archive")
    return _members(cache, distribution, version, machine) / archive / path


def member(distribution: str, version: str, path: str, cache: Path | None = None, machine: str = "") -> bytes:
    """The bytes of ``path`` in the wheel of ``distribution`` ``version`` (MissingMember when it has none);
    ``machine``: of the wheel built for it."""
    cache = Path(cache) if cache else default_cache()
    kept = _member_path(cache, distribution, version, "files", path, machine)
    if kept.is_file():
        return kept.read_bytes()
    data = _wheel(cache, distribution, version, machine).read(path)
    _write(kept, data)
    return data


def source_member(project: str, version: str, path: str, cache: Path | None = None) -> bytes:
    """The bytes of ``path`` in ``project`` ``version``'s source archive (its top folder left out), for
    the files no wheel ships (vLLM's csrc/, flash-attn's setup.py).  A .tar.gz cannot be read by
    ranges: the archive is fetched whole once (``support.mirror.fetch_sdist``'s cache) and each member
    read is kept beside the wheels' members."""
    import tarfile

    from support.mirror import fetch_sdist

    cache = Path(cache) if cache else default_cache()
    kept = _member_path(cache, project, version, "sdist", path)
    if kept.is_file():
        return kept.read_bytes()
    archive = fetch_sdist(project, version, cache)
    with tarfile.open(archive) as tar:
        found = next((m for m in tar if m.isfile() and m.name.partition("/")[2] == path), None)
        if found is None:
            raise MissingMember(f"{archive.name} has no {path}")
        if found.size > MEMBER_LIMIT:
            raise MirrorError(f"{archive.name}: {path} is {found.size} bytes, more than {MEMBER_LIMIT}")
        data = tar.extractfile(found).read()
    _write(kept, data)
    return data


def names(distribution: str, version: str, cache: Path | None = None) -> tuple[str, ...]:
    """The names in the wheel of ``distribution`` ``version``, in the order of its central directory."""
    return _wheel(Path(cache) if cache else default_cache(), distribution, version).names


def wheel_name(distribution: str, version: str, cache: Path | None = None, machine: str = "") -> str:
    """The file name of the wheel read for ``distribution`` ``version`` (``machine``: built for it)."""
    return _wheel(Path(cache) if cache else default_cache(), distribution, version, machine).name


def _wheel(cache: Path, distribution: str, version: str, machine: str = "") -> _Wheel:
    key = (str(cache), distribution, version, machine)
    if key not in _opened:
        folder = _members(cache, distribution, version, machine)
        # The whole wheels support.mirror keeps (one per machine): the one this reader would take.
        ranked = sorted((rank, p.name) for p in (cache / "wheels" / distribution / version).glob("*.whl")
                        for rank in [_rank(p.name, distribution, version, machine)] if rank is not None)
        whole = cache / "wheels" / distribution / version / ranked[0][1] if ranked else None
        _opened[key] = _local(whole) if whole else _kept(folder, distribution, version, machine) or _remote(folder, distribution, version, machine)
    return _opened[key]


def _local(path: Path) -> _Wheel:
    try:
        return _Wheel(path.name, zipfile.ZipFile(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise MirrorError(f"{path}: not a readable wheel ({exc})") from None


def _kept(folder: Path, distribution: str, version: str, machine: str = "") -> _Wheel | None:
    """The wheel from its kept central directory: its members are fetched from the index when read."""
    try:
        head, _, tail = (folder / "central-directory").read_bytes().partition(b"\n")
        kept = json.loads(head)
        name, size, start = kept["wheel"], kept["size"], kept["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(tail) != size - start:
        return None

    def locate():
        found, url, opener = _locate(distribution, version, machine)
        if found != name:
            raise MirrorError(f"{distribution} {version}: the index's wheel is {found} now, the kept directory {name}'s")
        return url, opener

    source = RangeFile(None, None, name, size, [(start, tail)], locate)
    try:
        return _Wheel(name, zipfile.ZipFile(source), source)
    except (zipfile.BadZipFile, MirrorError):
        return None


def _remote(folder: Path, distribution: str, version: str, machine: str = "") -> _Wheel:
    name, url, opener = _locate(distribution, version, machine)
    if urllib.parse.urlsplit(url).scheme == "file":
        return _local(Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)))
    source = RangeFile.open(url, opener, name)
    try:
        zf = zipfile.ZipFile(source)
    except zipfile.BadZipFile as exc:
        raise MirrorError(f"{name}: not a readable wheel ({exc})") from None
    wheel = _Wheel(name, zf, source)
    head = json.dumps({"wheel": name, "size": source.size, "start": zf.start_dir}).encode()
    _write(folder / "central-directory", head + b"\n" + source.span(zf.start_dir, source.size))
    return wheel


def session():
    """pip's settings and an opener with them, for this process (again when a PIP_ variable changes)."""
    key = ("settings", tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))))
    if key not in _pages:
        settings = index.pip_settings()
        _pages[key] = (settings, index._opener(settings))
    return _pages[key]


def listings(project: str) -> list[tuple[str, list | None, str | None]]:
    """(index, the files it lists for ``project`` or None, the problem reading it or None) for each
    index of pip's, in pip's order; an index without the project lists no files."""
    settings, opener = session()
    found = []
    for address in settings.indexes:
        key = ("page", address, project)
        if key not in _pages:
            try:
                _pages[key] = (index.listing(opener, address, project), None)
            except FileNotFoundError:
                _pages[key] = ([], None)
            except (OSError, ValueError) as exc:
                _pages[key] = (None, str(exc))
        found.append((address, *_pages[key]))
    return found


def _rank(filename: str, distribution: str, version: str, machine: str = "") -> int | None:
    """0: a pure wheel, 1: CPython 3.11's for manylinux x86_64, 2: another manylinux x86_64 one, 3: any other
    wheel of the release; None: not a wheel of it.  ``machine`` ("aarch64"): its manylinux wheels in place of
    x86_64's, and no wheel for another machine."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    try:
        name, found, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if name != canonicalize_name(distribution) or found != Version(version):
        return None
    if any(t.abi == "none" and t.platform == "any" and t.interpreter.startswith("py3") for t in tags):
        return 0
    built = [t for t in tags if t.platform.startswith("manylinux") and t.platform.endswith(f"_{machine or 'x86_64'}")]
    return 1 if any(t.interpreter == "cp311" for t in built) else 2 if built else None if machine else 3


def _locate(distribution: str, version: str, machine: str = ""):
    """(file name, URL, opener) of the wheel taken for ``distribution`` ``version`` (``machine``: built for it)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        raise MirrorError(f"{distribution} {version!r}: not a release version") from None
    _, opener = session()
    found, problems = [], []
    for order, (address, files, problem) in enumerate(listings(distribution)):
        if problem is not None:
            problems.append(f"{address}: {problem}")
        for f in files or ():
            rank = _rank(f.name, distribution, version, machine)
            if rank is not None:
                found.append((rank, order, f.name, f.url))
    if not found:
        where = "; ".join(problems) or "no index has one"
        raise MirrorError(f"{distribution} {version}: no wheel on the package index ({where})")
    _, _, name, url = min(found)
    return name, url, opener
