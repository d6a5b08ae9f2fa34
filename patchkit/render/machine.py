"""A machine as doctor and --to-cc auto say it (``gpus.smi.Machine``): how its GPUs are linked,
what no GPU of a cc has (``gpus.products``), and its part of a --json document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.gpus.products import without_multicast

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.cc import CC
    from patchkit.gpus.smi import Machine


def no_multicast_said(ccs: Sequence[CC]) -> str | None:
    """``no multicast on any GPU of cc 12.0 or 12.1 (...; ...)``: the ccs (pairs, lowest first) and
    why each lacks it, as doctor's links line and every verdict that rests on it say it; None when
    one of them may have multicast."""
    why = without_multicast(ccs)
    named = " or ".join(cc.smi_text() for cc in ccs)
    return f"no multicast on any GPU of cc {named} ({'; '.join(why)})" if why else None


def link_summary(m: Machine) -> str:
    """How the GPUs of ``m`` (``gpus.smi.Machine``) are linked, in one line."""
    if m.links is None:
        ccs = m.no_multicast_known()
        return f"not known: no GPU measured; {no_multicast_said(ccs)}" if ccs else "not known: no GPU measured"
    if not m.links:
        return "one GPU: no peer to link to, no multicast"
    kinds: dict[str, int] = {}
    for link in m.links:
        kinds[link.kind] = kinds.get(link.kind, 0) + 1
    counted = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    if m.pcie_only():
        return f"every pair through PCIe ({counted}): no NVLink, so no multicast between these GPUs"
    if all(link.nvlink for link in m.links):
        return (f"every pair through NVLink ({counted}): multicast needs NVSwitch (or the NVLink fabric) as well; "
                "topo -m does not say whether this machine has it")
    return (f"NVLink and PCIe pairs ({counted}): no multicast across the PCIe pairs; across NVLink it needs "
            "NVSwitch as well, which topo -m does not show")


def machine_json(m: Machine) -> dict[str, object]:
    """A machine (``gpus.smi.Machine``) in a --json document."""
    return {
        "nvidia_smi": m.nvidia_smi,
        "gpus": [{"index": g.index, "name": g.name, "cc": g.cc_text(), "bus_id": g.bus_id} for g in m.gpus],
        "links": None if m.links is None else [{"a": l.a, "b": l.b, "kind": l.kind, "nvlink": l.nvlink} for l in m.links],
        "nvlink": None if m.links is None else m.nvlink(),
        "pcie_only": None if m.links is None else m.pcie_only(),
        "links_summary": link_summary(m),
    }
