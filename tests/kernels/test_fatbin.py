"""The fat binary reader against NVIDIA's cuobjdump (the oracle, from PyPI) on real files: the six
shared objects a real nvcc 13.0 built (shared/fixtures/fatbin/), one real .so of sglang-kernel
0.4.10 (its sm100/common_ops.abi3.so, unzipped from the wheel), and truncated and corrupted
copies of them, which get a verdict, never an exception."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import FIXTURE_NAMES, FIXTURES, extract, headers, lists, recorded_lists

from patchkit.kernels.fatbin import ELF, PTX, read_binary

FATBIN_AT = 0x2008  # where every fixture's .nv_fatbin starts (readelf -S)


def as_cuobjdump(entries) -> list[tuple[str, str, tuple[int, int], bool]]:
    """Our entries as ``cuobjdump FILE`` prints them: PTX for compute_120 is ``arch = sm_120``."""
    return [("elf" if e.kind == ELF else "ptx", f"sm_{e.arch}{e.suffix}", e.version, e.compressed)
            for e in entries if e.kind in (ELF, PTX)]


def listed(names: list[str]) -> set[str]:
    """Our names as --list-elf / --list-ptx spell them: sm_120f's file is x.sm_120.cubin, compute_120's x.sm_120.ptx."""
    return {n.replace("compute_", "sm_").rstrip("f") for n in names}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.network
def test_every_entry_as_cuobjdump_prints_it(name: str) -> None:
    b = read_binary(str(FIXTURES / f"{name}.so"))
    assert (b.problem, b.elf, b.sections) == (None, True, (".nv_fatbin",))
    assert as_cuobjdump(b.entries) == headers(FIXTURES / f"{name}.so")
    assert (listed(b.sass()), listed(b.ptx())) == lists(FIXTURES / f"{name}.so") == recorded_lists(name)


# What each fixture carries (fatbin/README.md: the gencodes it was built with), distinct, lowest first.
CARRIES = {
    "hopper-blackwell-dc": (["sm_90a", "sm_100a"], [], False),
    "sm120a-only": (["sm_120a"], [], False),
    "sm120-plus-ptx": (["sm_120"], ["compute_120"], True),  # nvcc 13.0 compresses PTX by default
    "sm120f": (["sm_120f"], [], False),
    "fat-compressed": (["sm_80", "sm_90", "sm_100", "sm_120", "sm_121a"], ["compute_120"], True),
    "ptx-only-80": ([], ["compute_80"], True),
}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_architectures_counted_not_entries(name: str) -> None:
    b = read_binary(str(FIXTURES / f"{name}.so"))
    assert (b.sass(), b.ptx(), b.compressed()) == CARRIES[name]
    assert len(b.entries) == 2 * len(b.sass()) + len(b.ptx())  # each cubin twice (host and device-link fat binaries)


@pytest.mark.network
def test_a_real_sglang_kernel_library_by_header_seeks(tmp_path: Path, monkeypatch) -> None:
    so = extract("sgl_kernel/sm100/common_ops.abi3.so", tmp_path)
    read = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real(fd, n, at))
    b = read_binary(str(so))
    monkeypatch.undo()
    assert b.problem is None
    assert b.sass() == ["sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"] and b.ptx() == []
    assert as_cuobjdump(b.entries) == headers(so)
    assert (listed(b.sass()), listed(b.ptx())) == lists(so)
    # 35 fat binaries of 6 entries: one read per header, a few for the ELF; 12 MB never read whole.
    assert len(b.entries) == 210 and len(read) == 3 + 35 + 210
    assert sum(read) < 16_000 < so.stat().st_size // 500


def copy(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def section_header(data: bytes, offset: int) -> int:
    """Where the ELF64 section header of the section at file ``offset`` is."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    return next(shoff + i * shentsize for i in range(shnum) if struct.unpack_from("<Q", data, shoff + i * shentsize + 0x18)[0] == offset)


SM120A = (FIXTURES / "sm120a-only.so").read_bytes()
ENTRY = FATBIN_AT + 16  # the first entry header
SECTION = section_header(SM120A, FATBIN_AT)
LYING = {
    "magic": (patched(SM120A, FATBIN_AT, "<I", 0x12345678),
              ".nv_fatbin: no fat binary header at byte 8200 (magic 0x12345678, not 0xba55ed50)"),
    "fat-size": (patched(SM120A, FATBIN_AT + 8, "<Q", 1 << 40),
                 ".nv_fatbin: the fat binary at byte 8200 claims 1099511627776 bytes, past the end of the section (byte 15664)"),
    "version": (patched(SM120A, FATBIN_AT + 4, "<H", 7),
                ".nv_fatbin: the fat binary at byte 8200 has version 7 and a 16-byte header, not 1 and 16 or more"),
    "entry-header": (patched(SM120A, ENTRY + 4, "<I", 0x7FFFFFFF),
                     ".nv_fatbin: the entry at byte 8216 claims a 2147483647-byte header and 1624 bytes, past the end of its fat binary (byte 9936)"),
    "entry-header-small": (patched(SM120A, ENTRY + 4, "<I", 8),
                           ".nv_fatbin: the entry at byte 8216 claims a 8-byte header and 1624 bytes, past the end of its fat binary (byte 9936)"),
    "payload": (patched(SM120A, ENTRY + 8, "<Q", 1 << 62),
                ".nv_fatbin: the entry at byte 8216 claims a 96-byte header and 4611686018427387904 bytes, past the end of its fat binary (byte 9936)"),
    "arch": (patched(SM120A, ENTRY + 0x1C, "<I", 0), ".nv_fatbin: the entry at byte 8216 names architecture 0"),
    "flags": (patched(SM120A, ENTRY + 0x28, "<Q", 0x1300011),
              ".nv_fatbin: the entry at byte 8216 is flagged both arch-specific and family-specific"),
    "section-size": (patched(SM120A, SECTION + 0x20, "<Q", 1 << 40),
                     "truncated: section .nv_fatbin (1099511627776 bytes at byte 8200) ends past the end of the file (byte 26840)"),
    "section-table": (patched(SM120A, 0x28, "<Q", 1 << 33),
                      "truncated: 34 section headers at byte 8589934592 end past the end of the file (byte 26840)"),
    "no-section-table": (patched(SM120A, 0x28, "<Q", 0), "an ELF file without section headers: its fat binaries cannot be found"),
    "section-count": (patched(SM120A, 0x3C, "<H", 0), "an ELF file that counts no sections (e_shnum 0, and section 0 holds no count either)"),
    "class": (patched(SM120A, 4, "<B", 9), "an ELF file of unknown class 9 or byte order 1"),
    "not-elf": (b"MZ" + SM120A[2:], "not an ELF file (no \\x7fELF at its start)"),
    "empty": (b"", "not an ELF file (no \\x7fELF at its start)"),
    "ident-only": (SM120A[:5], "truncated: the ELF header needs 52 bytes or more, the file has 5"),
    "header-cut": (SM120A[:40], "truncated: the ELF header needs 64 bytes, the file has 40"),
}


@pytest.mark.parametrize("case", sorted(LYING))
def test_lying_headers_get_a_verdict(tmp_path: Path, case: str) -> None:
    data, problem = LYING[case]
    b = read_binary(copy(tmp_path, f"{case}.so", data))
    assert b.problem == problem


def test_the_untouched_copy_reads_as_the_fixture(tmp_path: Path) -> None:  # the corruptions above change only what they say
    assert read_binary(copy(tmp_path, "same.so", SM120A)).entries == read_binary(str(FIXTURES / "sm120a-only.so")).entries


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_truncation_gets_a_verdict(tmp_path: Path, name: str) -> None:
    data = (FIXTURES / f"{name}.so").read_bytes()
    path = tmp_path / "cut.so"
    seen = set()
    for cut in [*range(0, len(data), 61), len(data) - 1]:
        path.write_bytes(data[:cut])
        b = read_binary(str(path))
        assert b.problem is not None and b.entries == () or b.problem.startswith(".nv_fatbin"), (cut, b)
        seen.add(b.problem.split(":")[0].split(" (")[0])
    # The section header table sits at the end: every cut loses it, or the ELF header before it.
    assert seen <= {"not an ELF file", "truncated"}


def test_a_fifo_is_no_library_and_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)
    assert read_binary(str(fifo)).problem == "not a regular file"
    assert read_binary(str(tmp_path)).problem == "not a regular file"
    assert read_binary(str(tmp_path / "gone.so")).problem == "cannot open it (No such file or directory)"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(SM120A) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_any_corruption_reads_or_gets_a_verdict(tmp_path: Path, flips) -> None:
    data = bytearray(SM120A)
    for at, value in flips:
        data[at] = value
    b = read_binary(copy(tmp_path, "fuzz.so", bytes(data)))
    assert b.problem is None or isinstance(b.problem, str) and b.problem
    assert all(e.kind != ELF or 10 <= e.arch <= 999 for e in b.entries)


def test_where_the_f_of_sm_120f_comes_from() -> None:
    """The three builds of one kernel for sm_120, sm_120a and sm_120f (nvcc 13.0) differ in their fat
    binary entry header's flags (bits 0x100000 and 0x200000), not in their cubins' ELF headers: the
    e_flags of each pair of cubins are 0x5007802 and 0x6007802 for all three, and only nvlink's note
    (.note.nv.tkinfo) repeats the -arch.  cuobjdump FILE prints arch = sm_120f from the same header;
    its --list-elf names the file x.sm_120.cubin (docs/KERNELS.md)."""
    seen = {}
    for name in ("sm120-plus-ptx", "sm120a-only", "sm120f"):
        data = (FIXTURES / f"{name}.so").read_bytes()
        for e in read_binary(str(FIXTURES / f"{name}.so")).entries:
            if e.kind == ELF:
                flags, = struct.unpack_from("<Q", data, e.offset + 0x28)
                e_flags, = struct.unpack_from("<I", data, e.payload + 0x30)
                tool = data[e.payload:e.payload + 4096].split(b"-arch ")[1].split(b" ")[0].decode()
                seen.setdefault(e.name, set()).add((hex(flags), hex(e_flags), tool))
    assert seen == {"sm_120": {("0x1000011", "0x5007802", "sm_120"), ("0x1000011", "0x6007802", "sm_120")},
                    "sm_120a": {("0x1100011", "0x5007802", "sm_120a"), ("0x1100011", "0x6007802", "sm_120a")},
                    "sm_120f": {("0x1200011", "0x5007802", "sm_120f"), ("0x1200011", "0x6007802", "sm_120f")}}
