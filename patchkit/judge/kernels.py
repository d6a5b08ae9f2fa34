"""Whether the compiled CUDA code of shared objects runs on a machine's GPUs.

Each file's fat binaries are read from their headers (``patchkit.kernels.fatbin``) and judged
by NVIDIA's rules (``kernels.compat``) for each GPU's compute capability: runs (SASS for it),
runs after a JIT (PTX only), or no code for it.  ``installed_code`` does that for every
installed distribution whose RECORD lists a shared object with CUDA code
(``kernels.installed``), with ``known-kernels.toml`` (when each file is loaded);
``distribution_lines`` is what ``kernels`` and ``doctor`` say of one.  Nothing is loaded or run.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from patchkit.fixes.kernels import KnownDistribution, KnownFile, known_kernels
from patchkit.kernels.compat import NONE, Fit, fit, near_misses, worst
from patchkit.kernels.fatbin import Binary, read_binary
from patchkit.kernels.installed import Distribution, distributions
from patchkit.text import plural


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

    def carries(self) -> str:
        b = self.binary
        sass, ptx = b.sass(), b.ptx()
        words = ", ".join(sass) if sass else "no SASS"
        return words + (f", PTX {', '.join(ptx)}" if ptx else "")

    def verdict(self) -> str:
        """The file's code against the GPUs, in words (or why it was not judged)."""
        b = self.binary
        if b.problem:
            return f"unreadable: {b.problem}" if b.elf else b.problem
        if not b.cuda:
            return "no CUDA code"
        words = [f.words() + (f" ({'; '.join(near_misses(b.entries, f.cc))})" if f.runs == NONE and near_misses(b.entries, f.cc) else "")
                 for f in self.fits]
        return self.carries() + (": " + "; ".join(words) if words else "")

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


def distribution_lines(d: DistributionHere, ccs: list[tuple[int, int]], listing: bool) -> list[str]:
    """What kernels (``listing``: every file) and doctor (the files with no code for these GPUs,
    and what to do) say of one distribution."""
    lines = []
    counts = plural(len(d.files), "file") + " with CUDA code" + (f", {d.without} without" if d.without else "")
    cubins = f"; {plural(d.dist.cubins, 'bare .cubin file')}, not read (patchkit reads the fat binaries of shared objects)" if d.dist.cubins else ""
    failing = d.failing()
    if d.dist.problem:
        lines.append(f"  {d.label}: {d.dist.problem}")
    elif listing or not ccs:
        lines.append(f"  {d.label}: {counts}{cubins}")
    elif failing:
        lines.append(f"  {d.label}: {len(failing)} of {counts} cannot run here" + (f"; {d.known.always}" if d.known.always else "") + cubins)
    else:
        lines.append(f"  {d.label}: every file with CUDA code runs on {', '.join(f'{a}.{b}' for a, b in ccs)} ({counts}){cubins}")
    shown = d.files if listing else failing
    dos: list[str] = []
    for f in shown:
        what = f" ({f.known.what})" if f.known else ""
        lines.append(f"    {f.shown}: {f.verdict()}{what}" + ("" if f.loaded else " (not loaded on these GPUs)"))
        if not listing and f.missing:
            cc = f.missing[0].cc
            do = (f.known.do if f.known and f.known.do else d.known.do).format(cc=f"{cc[0]}.{cc[1]}", sm=f"sm_{cc[0]}{cc[1]}")
            if do not in dos:
                dos.append(do)
    lines += [f"    do: {do}" for do in dos]
    return lines
