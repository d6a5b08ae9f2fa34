"""What every GPU of a compute capability lacks, known from NVIDIA's product specifications, so a
cc given without GPUs (``--to-cc 12.1``, an image build) is judged as the machine it can only be.

Multicast (NVLink SHARP through NVSwitch, which torch symmetric memory needs) is had by no
SM12x product:

- 12.0: RTX PRO 6000 Blackwell (Workstation, Max-Q and Server Editions) and the GeForce RTX 50
  series have no NVLink connector (NVIDIA's RTX PRO 6000 Blackwell data sheets: "NVLink: No";
  the RTX 50 series specifications list none); the GPUs meet over PCIe only.
- 12.1: GB10 is the one GPU of a DGX Spark (NVIDIA's DGX Spark hardware specifications: one GB10
  Grace Blackwell Superchip); its ConnectX-7 joins two Sparks over the network, not NVLink.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

from patchkit.cc import CC

# cc -> why no GPU of it has multicast, with the source above.
NO_MULTICAST: dict[CC, str] = {
    CC(12, 0): "RTX PRO 6000 and RTX 50 have no NVLink",
    CC(12, 1): "GB10 is one GPU",
}


# cc -> why two or more GPUs of it meet over PCIe only (no NVLink), with the source above.  A GB10
# is one GPU: nothing to all-reduce with inside a Spark.
PCIE_ONLY: dict[CC, str] = {CC(12, 0): "RTX PRO 6000 and RTX 50 have no NVLink"}


def _every(table: dict[CC, str], ccs: Iterable[CC]) -> tuple[str, ...] | None:
    """``table``'s reason for each of ``ccs``, or None when one has none (or none is given)."""
    why = []
    for cc in ccs:
        reason = table.get(cc)
        if not reason:
            return None
        why.append(reason)
    return tuple(why) or None


def pcie_only(ccs: Iterable[CC]) -> tuple[str, ...] | None:
    """Why two or more GPUs of every one of ``ccs`` meet over PCIe only (one reason each), or None."""
    return _every(PCIE_ONLY, ccs)


def without_multicast(ccs: Iterable[CC]) -> tuple[str, ...] | None:
    """Why GPUs of every one of ``ccs`` lack multicast (one reason each), or None when one of them
    may have it (or none is given)."""
    return _every(NO_MULTICAST, ccs)
