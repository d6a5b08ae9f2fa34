"""Read what ``nvidia-smi`` prints for scripts, strictly: pure text in, values out.

- ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``: one line per
  GPU, ``0, NVIDIA H200, 9.0, 00000000:00:06.0``;
- ``topo -m``: the matrix of how each pair of devices is linked (``X`` on the diagonal,
  ``NV#`` for a bonded set of # NVLinks, ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` for
  PCIe paths), then its legend.  The header may carry terminal escapes (a real H200
  underlines it) and NIC columns; only GPU-to-GPU cells are read.

Anything else is a ValueError saying which line is unreadable: patchkit never guesses.
"""

from __future__ import annotations

import re
from typing import NamedTuple

QUERY = "index,name,compute_cap,pci.bus_id"
NO_DEVICES = "No devices were found"  # what nvidia-smi prints on a machine whose driver sees no GPU

PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # SOC: older drivers' name for SYS
_NVLINK = re.compile(r"NV([0-9]+)")
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_BUS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_CC = re.compile(r"([0-9]+)\.([0-9]+)")
_DEVICE = re.compile(r"GPU([0-9]+)")


class GPU(NamedTuple):
    index: int
    name: str
    cc: tuple[int, int]  # (12, 0)
    bus_id: str

    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"

    def sm(self) -> str:
        return f"SM{self.cc[0]}{self.cc[1]}"


class Link(NamedTuple):
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


def gpus(text: str) -> list[GPU]:
    """The GPUs of ``--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader``."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise ValueError(f"line {n} is not index, name, compute_cap, pci.bus_id: {line.strip()[:80]!r}")
        index, name, cc, bus = fields
        cc_match = _CC.fullmatch(cc)
        if not index.isdigit() or not name or cc_match is None or _BUS.fullmatch(bus) is None:
            raise ValueError(f"line {n} is not index, name, compute_cap, pci.bus_id: {line.strip()[:80]!r}")
        found.append(GPU(int(index), name, (int(cc_match.group(1)), int(cc_match.group(2))), bus))
    if not found:
        raise ValueError("it listed no GPU")
    if sorted(g.index for g in found) != list(range(len(found))):
        raise ValueError(f"the GPU indices are not 0..{len(found) - 1}: {', '.join(str(g.index) for g in found)}")
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
        raise ValueError(f"the header names {', '.join(gpu_columns) or 'no GPU'}, not the {count} GPUs of --query-gpu")
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
        rows[int(device.group(1))] = cells[1 : len(columns) + 1]
    if sorted(rows) != list(range(count)):
        raise ValueError(f"the matrix has rows for {', '.join(f'GPU{i}' for i in sorted(rows)) or 'no GPU'}, not GPU0..GPU{count - 1}")
    found = []
    for a in range(count):
        for b in range(count):
            cell = rows[a][columns.index(f"GPU{b}")]
            if a == b:
                if cell != "X":
                    raise ValueError(f"GPU{a} to itself is {cell!r}, not X")
            elif cell not in PCIE and _NVLINK.fullmatch(cell) is None:
                raise ValueError(f"GPU{a} to GPU{b} is {cell!r}: not NV#, {', '.join(PCIE[:-1])}")
            elif a < b:
                if rows[b][columns.index(f"GPU{a}")] != cell:
                    raise ValueError(f"GPU{a} to GPU{b} is {cell} but GPU{b} to GPU{a} is {rows[b][columns.index(f'GPU{a}')]}")
                found.append(Link(a, b, cell))
    return found
