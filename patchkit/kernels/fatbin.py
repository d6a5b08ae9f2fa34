"""Read the CUDA fat binaries of an ELF shared object from their headers alone.

Where they are.  NVIDIA's ``fatbinary_section.h`` (CUDA 13.0, ``include/`` of the
``nvidia-cuda-nvcc`` wheel) names the sections: ``.nv_fatbin`` holds the fat binaries
themselves, ``__nv_relfatbin`` the pre-linked relocatable ones (``nvcc -rdc``), and
``.nvFatBinSegment`` the ``__fatBinC_Wrapper_t`` structures (magic ``0x466243B1``) that the
runtime is handed at start-up (``__cudaRegisterFatBinary(&__fatDeviceText)``,
``crt/host_runtime.h`` and ``bin/crt/link.stub``).  Both data sections are read, found by
name in the section header table, and every entry keeps the section it came from: only the
entries of ``.nv_fatbin`` are code the runtime loads (``cuobjdump`` calls it the "executable
fatbin"); ``__nv_relfatbin`` holds relocatable device code, input for a device link
(``cuobjdump -all`` lists it), and an NVVM IR entry (``lto_90``) is input for a link-time
optimisation, which nvlink refuses to JIT ("Link target of 'lto_80' is virtual target that is
not JIT-able").  Whether ``.nvFatBinSegment`` is there is kept too: a file without it hands the
runtime no fat binary at all, and loads whatever kernels it runs another way
(``kernels/evidence.py`` looks for them, bounded: cuFFT keeps thousands in ``.ldata``).

What a section holds: fat binaries one after the other.  Each starts with NVIDIA's
``fatBinaryHeader`` (``fatbinary.h``, shipped with earlier toolkits: magic ``0xBA55ED50``,
version 1, ``headerSize``, ``fatSize``: the bytes after the header), followed by its entries.
The entry header is not documented by NVIDIA; its fields below are as ZLUDA's
``FatbinFileHeader`` (zluda_dump) and nvopen-tools' ``fatbin/FORMAT_SPECIFICATION.md`` read
it, each checked against ``cuobjdump`` 13.4 on the fixtures and on sglang-kernel 0.4.10's
``.so`` files (tests/kernels):

====== ==== ==============================================================================
offset size field
====== ==== ==============================================================================
0x00   u16  kind: 1 PTX, 2 ELF (a cubin: SASS); ``fatbinary.h`` also names 8, NVVM IR
0x04   u32  size of this header (64, 80, 96 or 112 seen); the payload follows it
0x08   u64  size of the payload, padded; the next entry starts after it
0x18   u16  code version, minor (observed: cuobjdump's ``code version = [major,minor]``)
0x1a   u16  code version, major (ELF ABI version for a cubin, PTX ISA version for PTX)
0x1c   u32  architecture: 120 for sm_120 / compute_120
0x28   u64  flags: 0x1 64-bit, 0x10 Linux, 0x2000 LZ4- and 0x8000 zstd-compressed payload
            (ZLUDA's names); 0x100000 arch-specific ("a") and 0x200000 family-specific
            ("f") code (observed: cuobjdump prints ``arch = sm_120a`` / ``sm_120f``)
====== ==== ==============================================================================

Only headers are read (a few hundred bytes each, by ``os.pread``); a payload is skipped by its
size, so a 1 GB library costs a few thousand small reads.  A file that is no ELF, is cut
short, or whose headers point past their section gets a ``problem``, never an exception.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable

from patchkit.values import Record

# fatbinary_section.h: FATBIN_DATA_SECTION_NAME, FATBIN_PRELINK_DATA_SECTION_NAME, FATBIN_CONTROL_SECTION_NAME
EXECUTABLE, RELOCATABLE, CONTROL = ".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment"
FATBIN_SECTIONS = (EXECUTABLE, RELOCATABLE)
FATBIN_MAGIC = 0xBA55ED50
PTX, ELF, NVVM_IR = 1, 2, 8
ARCH_SPECIFIC, FAMILY = 0x100000, 0x200000
COMPRESSED = 0x2000 | 0x8000
MAX_ENTRIES = 1_000_000  # libcublasLt.so.13 holds about 5,400; more is a file that lies
MAX_SECTIONS = 200_000
MAX_PADDING = 4096  # zero bytes allowed between two fat binaries of a section
_ENTRY = struct.Struct("<HHIQ8xHHI8xQ")  # kind, version, header size, padded size, minor, major, arch, flags
ENTRY_HEADER = 64  # the smallest entry header (ZLUDA's FatbinFileHeader)
_CONTAINER = struct.Struct("<IHHQ")
SHT_PROGBITS, SHT_NOBITS = 1, 8
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4


class Unreadable(ValueError):
    """What is wrong with a file, in words (its verdict)."""


class FatbinEntry(Record):
    kind: int  # PTX, ELF, NVVM_IR, or another kind (listed, never counted)
    arch: int  # 120
    suffix: str  # "", "a" (arch-specific) or "f" (family-specific)
    version: tuple[int, int]  # (major, minor) as cuobjdump's "code version"
    compressed: bool
    offset: int  # of its header in the file
    section: str = EXECUTABLE  # the section it was found in
    payload: int = 0  # where its code starts in the file (after its header)

    @property
    def loads(self) -> bool:
        """Code the CUDA runtime loads: SASS or PTX of the executable fat binary (``.nv_fatbin``)."""
        return self.section == EXECUTABLE and self.kind in (PTX, ELF)

    @property
    def name(self) -> str:
        """As nvcc spells the target: ``sm_90a`` (SASS), ``compute_120`` (PTX), ``lto_90`` (NVVM IR)."""
        prefix = {ELF: "sm_", PTX: "compute_", NVVM_IR: "lto_"}.get(self.kind, f"kind-{self.kind}-")
        return f"{prefix}{self.arch}{self.suffix}"

    @property
    def listed(self) -> str | None:
        """As ``cuobjdump --list-elf`` / ``--list-ptx`` name its file (``x.sm_120.cubin`` for an
        sm_120f cubin, ``x.sm_120.ptx`` for compute_120 PTX): the ``f`` dropped, the ``a`` kept.
        None for a kind those options do not list (NVVM IR)."""
        return f"sm_{self.arch}{'a' if self.suffix == 'a' else ''}" if self.kind in (PTX, ELF) else None


class Binary(Record):
    """What a file holds: its fat binaries' entries, or why it cannot be read."""

    path: str
    size: int
    elf: bool  # an ELF file at all
    sections: tuple[str, ...]  # the fat binary sections found
    entries: tuple[FatbinEntry, ...]
    problem: str | None  # None: read to the end
    control: bool = False  # a .nvFatBinSegment: the runtime is handed its fat binary at start-up

    @property
    def cuda(self) -> bool:
        """Device code of any kind, loaded or not."""
        return any(e.kind in (PTX, ELF, NVVM_IR) for e in self.entries)

    @property
    def loads(self) -> bool:
        """Code the runtime loads (SASS or PTX in ``.nv_fatbin``)."""
        return any(e.loads for e in self.entries)

    def sass(self) -> list[str]:
        """The SASS the runtime loads, as ``cuobjdump FILE`` (the executable fat binary) lists it."""
        return _names(e for e in self.entries if e.loads and e.kind == ELF)

    def ptx(self) -> list[str]:
        return _names(e for e in self.entries if e.loads and e.kind == PTX)

    def relocatable(self) -> list[str]:
        """SASS and PTX of ``__nv_relfatbin``: input for a device link, never loaded as it is."""
        return _names(e for e in self.entries if e.section == RELOCATABLE and e.kind in (PTX, ELF))

    def lto(self) -> list[str]:
        """NVVM IR for a link-time optimisation (``lto_90``), in either section."""
        return _names(e for e in self.entries if e.kind == NVVM_IR)

    def other(self) -> list[str]:
        """Entries of a kind patchkit does not know (listed, never counted)."""
        return _names(e for e in self.entries if e.kind not in (PTX, ELF, NVVM_IR))

    def compressed(self) -> bool:
        return any(e.compressed for e in self.entries if e.loads)


def _names(entries: Iterable[FatbinEntry]) -> list[str]:
    """Distinct targets, SASS before PTX before the rest, lowest first (sm_90 before sm_90a)."""
    order = {ELF: 0, PTX: 1, NVVM_IR: 2}
    found = {(order.get(e.kind, 3), e.kind, e.arch, e.suffix): e.name for e in entries}
    return [found[k] for k in sorted(found)]


def read_binary(path: str) -> Binary:
    """The fat binary entries of the file at ``path`` (headers only), or its problem."""
    try:  # O_NONBLOCK: a FIFO named like a library must not hang the reader
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return Binary(path, 0, False, (), (), f"cannot open it ({exc.strerror or exc})")
    entries: list[FatbinEntry] = []
    found: list[str] = []
    size, elf, control = 0, False, False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Binary(path, 0, False, (), (), "not a regular file")
        size = st.st_size
        sections = elf_sections(fd, size)
        elf = True
        control = any(s.name == CONTROL for s in sections)
        for s in sections:
            if s.name in FATBIN_SECTIONS:
                found.append(s.name)
                _walk(fd, s.name, s.offset, s.offset + s.size, entries)
        return Binary(path, size, True, tuple(found), tuple(entries), None, control)
    except NotElf as exc:
        return Binary(path, size, False, (), (), str(exc))
    except Unreadable as exc:  # an ELF file (it starts with \x7fELF) that cannot be read to its end
        return Binary(path, size, True, tuple(found), tuple(entries), str(exc), control)
    except OSError as exc:
        return Binary(path, size, elf, tuple(found), tuple(entries), f"cannot read it ({exc.strerror or exc})", control)
    finally:
        os.close(fd)


class NotElf(Unreadable):
    """Not an ELF file at all."""


class Section(Record):
    name: str
    kind: int  # sh_type: SHT_PROGBITS, SHT_NOBITS, ...
    flags: int  # sh_flags: SHF_ALLOC, SHF_EXECINSTR, ...
    offset: int  # in the file
    size: int


def _read(fd: int, offset: int, length: int, what: str) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) < length:
        raise Unreadable(f"truncated: {what} at byte {offset} needs {length} bytes, the file ends at byte {offset + len(data)}")
    return data


def elf_sections(fd: int, size: int) -> list[Section]:
    """Each section, from the ELF header and the section header table (ELF32 and ELF64, either
    byte order)."""
    ident = os.pread(fd, 64, 0)
    if ident[:4] != b"\x7fELF":
        raise NotElf("not an ELF file (no \\x7fELF at its start)")
    if len(ident) < 6:
        raise Unreadable(f"truncated: the ELF header needs 52 bytes or more, the file has {len(ident)}")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise Unreadable(f"an ELF file of unknown class {ident[4]} or byte order {ident[5]}")
    is64, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    if len(ident) < (64 if is64 else 52):
        raise Unreadable(f"truncated: the ELF header needs {64 if is64 else 52} bytes, the file has {len(ident)}")
    shoff, = struct.unpack_from(order + ("Q" if is64 else "I"), ident, 0x28 if is64 else 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x3A if is64 else 0x2E)
    entry = struct.Struct(order + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
    if shoff == 0:
        raise Unreadable("an ELF file without section headers: its fat binaries cannot be found")
    if shentsize < entry.size:
        raise Unreadable(f"section headers of {shentsize} bytes, fewer than the {entry.size} of an ELF{64 if is64 else 32} one")
    if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: the counts sit in section 0
        first = entry.unpack(_read(fd, shoff, entry.size, "section header 0"))
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx
    if shnum == 0:
        raise Unreadable("an ELF file that counts no sections (e_shnum 0, and section 0 holds no count either)")
    if shnum > MAX_SECTIONS:
        raise Unreadable(f"{shnum} sections claimed (more than {MAX_SECTIONS}): not read")
    if shoff + shnum * shentsize > size:
        raise Unreadable(f"truncated: {shnum} section headers at byte {shoff} end past the end of the file (byte {size})")
    table = _read(fd, shoff, shnum * shentsize, "the section header table")
    headers = [entry.unpack_from(table, i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        raise Unreadable(f"the section name table is section {shstrndx} of {shnum}")
    _, _, _, _, names_at, names_size, *_ = headers[shstrndx]
    if names_at + names_size > size or names_size > 1 << 24:
        raise Unreadable(f"truncated: the section name table ({names_size} bytes at byte {names_at}) ends past the end of the file")
    names = _read(fd, names_at, names_size, "the section name table")
    found = []
    for name_at, kind, flags, _, offset, length, *_ in headers:
        end = names.find(b"\0", name_at)
        name = names[name_at:end if end >= 0 else len(names)].decode("ascii", "replace")
        if name in FATBIN_SECTIONS:
            if kind == SHT_NOBITS:  # no bytes in the file
                raise Unreadable(f"section {name} has no bytes in the file (SHT_NOBITS)")
            if offset + length > size:
                raise Unreadable(f"truncated: section {name} ({length} bytes at byte {offset}) ends past the end of the file (byte {size})")
        found.append(Section(name, kind, flags, offset, length))
    return found


def _walk(fd: int, section: str, start: int, end: int, entries: list[FatbinEntry]) -> None:
    """Append the entries of every fat binary in ``[start, end)``, headers only."""
    offset = start
    while offset < end:
        head = _read(fd, offset, min(16, end - offset), f"the fat binary header in {section}")
        if len(head) < 16 or struct.unpack_from("<I", head)[0] != FATBIN_MAGIC:
            offset = _padding(fd, section, offset, end)
            continue
        magic, version, header_size, fat_size = _CONTAINER.unpack(head)
        if version != 1 or header_size < 16:
            raise Unreadable(f"{section}: the fat binary at byte {offset} has version {version} and a {header_size}-byte header, not 1 and 16 or more")
        body, stop = offset + header_size, offset + header_size + fat_size
        if stop > end:
            raise Unreadable(f"{section}: the fat binary at byte {offset} claims {fat_size} bytes, past the end of the section (byte {end})")
        at = body
        while at < stop:
            if stop - at < ENTRY_HEADER:
                raise Unreadable(f"{section}: an entry header at byte {at} is cut short by the end of its fat binary (byte {stop})")
            kind, _, size, padded, minor, major, arch, flags = _ENTRY.unpack(_read(fd, at, _ENTRY.size, "an entry header"))
            if size < ENTRY_HEADER or at + size + padded > stop:
                raise Unreadable(f"{section}: the entry at byte {at} claims a {size}-byte header and {padded} bytes, "
                                 f"past the end of its fat binary (byte {stop})")
            if kind in (PTX, ELF, NVVM_IR) and not 10 <= arch <= 999:
                raise Unreadable(f"{section}: the entry at byte {at} names architecture {arch}")
            if flags & ARCH_SPECIFIC and flags & FAMILY:
                raise Unreadable(f"{section}: the entry at byte {at} is flagged both arch-specific and family-specific")
            suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY else ""
            entries.append(FatbinEntry(kind, arch, suffix, (major, minor), bool(flags & COMPRESSED), at, section, at + size))
            if len(entries) > MAX_ENTRIES:
                raise Unreadable(f"more than {MAX_ENTRIES} entries: not read further")
            at += size + padded
        offset = stop


def _padding(fd: int, section: str, offset: int, end: int) -> int:
    """Where the next fat binary starts after zero padding at ``offset``; Unreadable if the bytes
    there are neither padding nor a fat binary."""
    run = os.pread(fd, min(MAX_PADDING, end - offset), offset)
    stripped = len(run) - len(run.lstrip(b"\0"))
    if stripped == 0 or stripped == len(run) and offset + stripped < end:
        magic = struct.unpack_from("<I", run + b"\0" * 4)[0]
        raise Unreadable(f"{section}: no fat binary header at byte {offset} (magic {magic:#010x}, not {FATBIN_MAGIC:#010x})")
    return offset + stripped
