"""Read what ``nvidia-smi`` prints for scripts, strictly: pure text in, values out.

- ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``: one line per
  GPU, ``0, NVIDIA H200, 9.0, 00000000:00:06.0``;
- ``topo -m``: the matrix of how each pair of devices is linked (``X`` on the diagonal,
  ``NV#`` for a bonded set of # NVLinks, ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` for
  PCIe paths), then its legend.  The header may carry terminal escapes (a real H200
  underlines it) and NIC columns; only GPU-to-GPU cells are read.

Anything else is a ValueError saying which line is unreadable: patchkit never guesses.  So is
more than MAX_GPUS GPUs, or a compute capability NVIDIA has never made (outside 1.0 to 15.x:
``9999.0`` is no GPU's, and no key 9999 is ever written for it).  The matrix is read in time
linear in its size (each cell once).
"""

from __future__ import annotations

import re
from functools import partial
from itertools import repeat

from patchkit.cc import CC
from patchkit.values import Record

QUERY = "index,name,compute_cap,pci.bus_id"
NO_DEVICES = "No devices were found"  # what nvidia-smi prints on a machine whose driver sees no GPU

PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # SOC: older drivers' name for SYS
_NVLINK = re.compile(r"NV([0-9]+)")
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_BUS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_CC = re.compile(r"([0-9]{1,2})\.([0-9])")
MAX_GPUS = 1024  # more than any one machine holds; the bound on what is read
CC_MAJORS = range(1, 16)  # NVIDIA's compute capabilities: 1.0 (Tesla) to 12.x (Blackwell) so far; room to 15.x
_DEVICE = re.compile(r"GPU([0-9]+)")


class GPU(Record):
    index: int  # type: ignore[assignment]  # nvidia-smi's index, first so GPUs sort by it; tuple.index is never called on a GPU
    name: str
    cc: CC  # CC(12, 0)
    bus_id: str

    def cc_text(self) -> str:
        return self.cc.smi_text()

    def sm(self) -> str:
        return f"SM{self.cc.sm()}"


class Link(Record):
    a: int
    b: int
    kind: str  # as topo -m writes it: NV18, PIX, NODE, SYS, ...

    @property
    def nvlink(self) -> bool:
        return _NVLINK.fullmatch(self.kind) is not None

    def words(self) -> str:
        if self.nvlink:
            return f"NVLink ({self.kind}: {self.kind[2:]} bonded NVLinks)"
        return f"PCIe ({self.kind})"


_link = partial(tuple.__new__, Link)  # Link((a, b, kind)) at C speed: a matrix of 1024 GPUs has 523776 pairs


def gpus(text: str) -> list[GPU]:
    """The GPUs of ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``."""
    found = []
    lines = text.splitlines()
    if sum(1 for line in lines if line.strip()) > MAX_GPUS:
        raise ValueError(f"it listed more than {MAX_GPUS} GPUs, more than any machine holds")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise ValueError(f"line {n} is not index, name, compute_cap, pci.bus_id: {line.strip()[:80]!r}")
        index, name, cc, bus = fields
        cc_match = _CC.fullmatch(cc)
        if not index.isdigit() or len(index) > 4 or not name or cc_match is None or _BUS.fullmatch(bus) is None:
            if index.isdigit() and name and _BUS.fullmatch(bus) and re.fullmatch(r"[0-9]+\.[0-9]+", cc):
                raise ValueError(f"line {n}: compute_cap {cc[:20]!r} is not one NVIDIA has (1.0 to 15.x)")
            raise ValueError(f"line {n} is not index, name, compute_cap, pci.bus_id: {line.strip()[:80]!r}")
        major, minor = int(cc_match.group(1)), int(cc_match.group(2))
        if major not in CC_MAJORS:
            raise ValueError(f"line {n}: compute_cap {cc!r} is not one NVIDIA has (1.0 to 15.x)")
        found.append(GPU(int(index), name, CC(major, minor), bus))
    if not found:
        raise ValueError("it listed no GPU")
    if sorted(g.index for g in found) != list(range(len(found))):
        shown = ", ".join(str(g.index) for g in sorted(found)[:16]) + (", ..." if len(found) > 16 else "")
        raise ValueError(f"the GPU indices are not 0..{len(found) - 1}: {shown}")
    return sorted(found)


def links(text: str, count: int) -> list[Link]:
    """Each pair of the ``count`` GPUs (a < b) and how ``topo -m`` says they are linked."""
    lines = [_ESCAPE.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise ValueError("no header line starting with GPU0")
    header = lines[header_at].split()
    columns = header[: header.index("CPU")] if "CPU" in header else header
    gpu_columns = [c for c in columns if _DEVICE.fullmatch(c)]
    if gpu_columns != [f"GPU{i}" for i in range(count)]:
        shown = ", ".join(gpu_columns[:16]) + (", ..." if len(gpu_columns) > 16 else "")
        raise ValueError(f"the header names {shown or 'no GPU'}, not the {count} GPUs of --query-gpu")
    at = {int(c[3:]): i for i, c in enumerate(columns) if _DEVICE.fullmatch(c)}  # GPU b -> its column
    rows: dict[int, list[str]] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or line.strip() == "Legend:":
            break
        cells = line.split()
        device = _DEVICE.fullmatch(cells[0])
        if device is None:
            continue  # a NIC's row
        if len(cells) < len(columns) + 1:
            raise ValueError(f"row {cells[0]} has {len(cells) - 1} cells, the header {len(columns)} columns")
        row = cells[1 : len(columns) + 1]
        rows[int(device.group(1))] = [row[at[b]] for b in range(count)]
    if sorted(rows) != list(range(count)):
        named = sorted(rows)
        shown = ", ".join(f"GPU{i}" for i in named[:16]) + (", ..." if len(named) > 16 else "")
        raise ValueError(f"the matrix has rows for {shown or 'no GPU'}, not GPU0..GPU{count - 1}")
    matrix = [rows[a] for a in range(count)]
    known = {"X", *PCIE}  # the cells checked already (the same few repeat)
    found: list[Link] = []
    for a, (row, column) in enumerate(zip(matrix, zip(*matrix, strict=True), strict=True)):
        if row[a] != "X":
            raise ValueError(f"GPU{a} to itself is {row[a][:20]!r}, not X")
        for cell in set(row) - known:
            if _NVLINK.fullmatch(cell) is None:
                b = row.index(cell)
                raise ValueError(f"GPU{a} to GPU{b} is {cell[:20]!r}: not NV#, {', '.join(PCIE[:-1])}")
            known.add(cell)
        if "X" in row[:a] or "X" in row[a + 1:]:
            b = row.index("X") if row.index("X") != a else row.index("X", a + 1)
            raise ValueError(f"GPU{a} to GPU{b} is 'X': not NV#, {', '.join(PCIE[:-1])}")
        if list(column[a + 1:]) != row[a + 1:]:
            b = next(b for b in range(a + 1, count) if row[b] != column[b])
            raise ValueError(f"GPU{a} to GPU{b} is {row[b]} but GPU{b} to GPU{a} is {column[b][:20]}")
        found += map(_link, zip(repeat(a), range(a + 1, count), row[a + 1:]))
    return found
