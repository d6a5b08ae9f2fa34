"""Whether the compiled CUDA code of shared objects runs on a machine's GPUs.

Each file's fat binaries are read from their headers (``patchkit.kernels.fatbin``) and judged
by NVIDIA's rules (``kernels.compat``) for each GPU's compute capability: runs (SASS for it),
runs after a JIT (PTX only), or no code for it.  ``installed_code`` does that for every
installed distribution whose RECORD lists a shared object with CUDA code
(``kernels.installed``), with ``known-kernels.toml`` (when each file is loaded).  Values only:
``render/kernels.py`` says them (for ``kernels``, ``doctor`` and ``diagnose``).  Nothing is
loaded or run.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from patchkit.fixes.kernels import KnownDistribution, KnownFile, known_kernels
from patchkit.kernels.compat import NONE, Fit, fit, worst
from patchkit.kernels.fatbin import Binary, read_binary
from patchkit.kernels.installed import Distribution, distributions


class FileHere(NamedTuple):
    """One shared object, read and judged for the GPUs ``ccs``."""

    shown: str  # relative to site-packages for an installed file, else as given
    binary: Binary
    known: KnownFile | None
    fits: tuple[Fit, ...]  # one per GPU compute capability, lowest first

    @property
    def loaded(self) -> bool:
        """Whether it is loaded on any of these GPUs (``only_on`` / ``not_on``)."""
        return self.known is None or not self.fits or any(self.known.loaded_on(f.cc) for f in self.fits)

    @property
    def missing(self) -> tuple[Fit, ...]:
        """The GPUs it is loaded on and has no code for."""
        if self.binary.problem or not self.binary.cuda:
            return ()
        return tuple(f for f in self.fits if f.runs == NONE and (self.known is None or self.known.loaded_on(f.cc)))

    def to_json(self, dist: Distribution | None) -> dict:
        b = self.binary
        return {"path": self.shown, "file": b.path, "distribution": dist.name if dist else None,
                "version": dist.version if dist else None, "sass": b.sass(), "ptx": b.ptx(), "compressed": b.compressed(),
                "entries": len(b.entries), "cuda": b.cuda, "problem": b.problem,
                "what": self.known.what if self.known else None, "loaded": self.loaded if self.fits else None,
                "verdict": (None if b.problem or not b.cuda or not self.fits else worst(self.fits)),
                "gpus": [f.to_json() for f in self.fits]}


def judge(path: str, shown: str, ccs: list[tuple[int, int]], known: KnownFile | None = None) -> FileHere:
    binary = read_binary(path)
    return FileHere(shown, binary, known, tuple(fit(binary.entries, cc) for cc in ccs))


class DistributionHere(NamedTuple):
    """An installed distribution whose shared objects carry CUDA code, judged."""

    dist: Distribution
    known: KnownDistribution
    files: tuple[FileHere, ...]  # those with CUDA code, or unreadable
    without: int  # its shared objects without CUDA code

    @property
    def label(self) -> str:
        return f"{self.dist.name} {self.dist.version}"

    def failing(self) -> list[FileHere]:
        return [f for f in self.files if f.missing or f.binary.problem]


def installed_code(sites: list[Path], ccs: list[tuple[int, int]], only: str | None = None) -> list[DistributionHere]:
    """Every distribution in ``sites`` (or the one that installed the package folder ``only``)
    with CUDA code in its shared objects, or bare cubins, each file judged for ``ccs``."""
    kernels = known_kernels()
    found = []
    for dist in distributions(sites):
        if only is not None and not any(p.startswith(f"{only}/") for p in dist.shared):
            continue
        known = kernels.of(dist.name)
        files, without = [], 0
        for rel in dist.shared:
            here = judge(str(dist.site / rel), rel, ccs, known.file(rel))
            if here.binary.cuda or here.binary.problem and here.binary.elf:
                files.append(here)
            else:
                without += 1
        if files or dist.cubins or dist.problem:
            found.append(DistributionHere(dist, known, tuple(files), without))
    return found
