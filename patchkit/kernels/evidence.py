"""Evidence for a verdict the fat binary headers leave open, read only when a GPU would otherwise get
no code from a file (``judge/kernels.py``), each bounded.

- ``fat_binaries_elsewhere``: a file without ``.nvFatBinSegment`` hands the CUDA runtime none of
  its fat binaries; the kernels it runs are loaded another way (``cuModuleLoadData``, ``cuLibraryLoadData``),
  from wherever it keeps them.  cuFFT 12.0 (``libcufft.so.12`` of nvidia-cufft 12.0.0.61, 286 MB)
  keeps 23,983 fat binaries in ``.ldata`` beside a 672-byte ``.nv_fatbin``: the first sits 6,060
  bytes into that section.  The first ``SCAN_WINDOW`` bytes of each allocated, non-executable data
  section are searched for a well-formed fat binary header.
- ``kernels_in``: whether the cubins of ``.nv_fatbin`` hold any function at all (a ``.text.<name>``
  section, read from each cubin's own section header table): an nvlink output with nothing left
  in it (cuFFT's, cuFFTW's ``sm_75`` cubin: ``.note.nv.tkinfo``, ``.note.nv.cuinfo``,
  ``.nv.callgraph``, ``.nv.rel.action`` and no ``.text``) is a module with no kernel, which no GPU
  can be missing.  A compressed cubin cannot be read so: then it is not known.
"""

from __future__ import annotations

import os
import struct

from patchkit.kernels.fatbin import (
    _CONTAINER,
    _ENTRY,
    CONTROL,
    ELF,
    ENTRY_HEADER,
    FATBIN_MAGIC,
    FATBIN_SECTIONS,
    NVVM_IR,
    PTX,
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHT_PROGBITS,
    FatbinEntry,
    Unreadable,
    elf_sections,
)
from patchkit.values import Record

SCAN_WINDOW = 1 << 20  # bytes read of each other data section
MAX_CUBINS = 64  # cubins whose section headers are read before giving up


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


class Elsewhere(Record):
    """A fat binary found outside the fat binary sections: code a library loads itself."""

    section: str  # ".ldata"
    offset: int  # of its header in the file
    kind: int  # its first entry's kind
    arch: int  # and architecture


def fat_binaries_elsewhere(path: str) -> Elsewhere | None:
    """The first fat binary in a data section other than the fat binary sections (allocated,
    not executable, with bytes in the file), looked for in the first ``SCAN_WINDOW`` bytes of
    each, at 8-byte aligned offsets, its container and first entry header checked; None when
    there is none there, or the file cannot be read."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        for s in elf_sections(fd, size):
            if s.kind != SHT_PROGBITS or not s.flags & SHF_ALLOC or s.flags & SHF_EXECINSTR or s.name in (*FATBIN_SECTIONS, CONTROL):
                continue
            end = min(s.offset + s.size, size)
            window = os.pread(fd, min(SCAN_WINDOW, max(0, end - s.offset)), s.offset)
            found = _first_fat_binary(window, s.offset, end)
            if found is not None:
                return Elsewhere(s.name, *found)
        return None
    except (Unreadable, OSError):
        return None
    finally:
        os.close(fd)


def _first_fat_binary(window: bytes, base: int, end: int) -> tuple[int, int, int] | None:
    """(file offset, first entry's kind, its arch) of the first well-formed fat binary in ``window``
    (which starts at file offset ``base``; the section ends at ``end``)."""
    magic = struct.pack("<I", FATBIN_MAGIC)
    at = window.find(magic)
    while at >= 0:
        head = window[at:at + 16 + _ENTRY.size]
        if (base + at) % 8 == 0 and len(head) == 16 + _ENTRY.size:
            _, version, header_size, fat_size = _CONTAINER.unpack_from(head)
            kind, _, size, padded, _, _, arch, _ = _ENTRY.unpack_from(head, 16)
            if (version == 1 and header_size == 16 and base + at + 16 + fat_size <= end and kind in (PTX, ELF, NVVM_IR)
                    and size >= ENTRY_HEADER and size + padded <= fat_size and 10 <= arch <= 999):
                return base + at, kind, arch
        at = window.find(magic, at + 1)
    return None


def kernels_in(path: str, entries: tuple[FatbinEntry, ...]) -> bool | None:
    """Whether the cubins of ``.nv_fatbin`` hold a function (True at the first one found), hold none
    (False: every one read, none compressed), or cannot be told (None: a compressed cubin first, a
    cubin that is no ELF, more than ``MAX_CUBINS``)."""
    cubins = [e for e in entries if e.loads and e.kind == ELF]
    if not cubins or len(cubins) > MAX_CUBINS:
        return None
    fd = _open(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        for e in cubins:
            if e.compressed:
                return None
            names = _cubin_section_names(fd, e.payload, size)
            if names is None:
                return None
            if any(n.startswith(".text.") for n in names):
                return True
        return False
    except OSError:
        return None
    finally:
        os.close(fd)


def _cubin_section_names(fd: int, at: int, size: int) -> list[str] | None:
    """The section names of the ELF64 cubin at file offset ``at``; None when it is not one or lies."""
    head = os.pread(fd, 64, at)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shentsize < 64 or not 0 < shnum <= 4096 or shstrndx >= shnum or at + shoff + shnum * shentsize > size:
        return None
    table = os.pread(fd, shnum * shentsize, at + shoff)
    headers = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    if names_size > 1 << 20 or at + names_at + names_size > size:
        return None
    names = os.pread(fd, names_size, at + names_at)
    return [names[h[0]:names.find(b"\0", h[0])].decode("ascii", "replace") for h in headers if h[0] < len(names)]
