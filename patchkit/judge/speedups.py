"""What speeds up a collective on this machine with the releases found: the known speedups
(``fixes/known-speedups.toml``) whose machine this is, judged against the targets' versions.

``doctor`` reports it (``render/doctor.py`` says it).  A speedup shows only where its machine
matches (every GPU of its compute capability major, two or more linked through PCIe only) and
its server (the first project it requires) is among the targets: then it is there to turn on, or
some of the projects it requires are too old (or not among the targets).  A project the server
uses is not enough: a vLLM environment holds FlashInfer too, and SGLang's variable does nothing
there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.fixes.speedups import Speedup, read_speedups
from patchkit.gpus.smi import Machine
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.fixes.speedups import Requires


class SpeedupHere(Value):
    """A known speedup for this machine, with the targets' releases of the projects it requires."""

    speedup: Speedup
    installed: dict[str, str | None]  # project -> its version among the targets (None: not among them), per requirement
    short: tuple[Requires, ...]  # the requirements (fixes.speedups.Requires) the targets do not meet

    @property
    def available(self) -> bool:
        return not self.short


def for_machine(sp: Speedup, m: Machine) -> bool:
    """Whether ``m`` is the machine ``sp`` is for; a cc given without GPUs (``--to-cc 12.0``) is,
    where two or more GPUs of it can only meet over PCIe (``gpus.products``)."""
    if sp.links != "pcie":
        return False
    if not m.gpus and m.given:
        from patchkit.gpus.products import pcie_only

        return all(cc.major == sp.major for cc in m.given) and pcie_only(m.given) is not None
    return all(g.cc.major == sp.major for g in m.gpus) and m.pcie_only()


def speedups_here(m: Machine, versions: dict[str, str | None]) -> list[SpeedupHere]:
    """Every known speedup for this machine and these targets (``versions``: project -> version)."""
    return [SpeedupHere(sp, {r.project: versions.get(r.project) for r in sp.requires},
                        tuple(r for r in sp.requires if not r.met(versions.get(r.project))))
            for sp in read_speedups() if for_machine(sp, m) and sp.server in versions]
