"""Whether the compiled CUDA code of shared objects runs on a machine's GPUs.

Each file's fat binaries are read from their headers (``patchkit.kernels.fatbin``) and judged
by NVIDIA's rules (``kernels.compat``) for each GPU's compute capability: runs (SASS for it),
runs after a JIT (PTX, or relocatable code linked at the first start), no code for it, or
cannot tell.  Where the fat binaries leave a GPU with nothing, the verdict is "cannot tell"
when the file hands the runtime no fat binary at all (no ``.nvFatBinSegment``): its kernels
are loaded another way, as cuFFT loads those it keeps in ``.ldata``; or when its cubins hold no
function at all (``kernels.evidence``).  ``installed_code`` does that for every
installed distribution whose RECORD lists a shared object with CUDA code
(``kernels.installed``), with ``known-kernels.toml`` (when each file is loaded) and, where it names
the server's start, what the installed release imports there (``kernels.imports``): a file loaded
only for a feature is named with the files that import it and fails no start.  Values only:
``render/kernels.py`` says them (for ``kernels``, ``doctor`` and ``diagnose``).  Nothing is
loaded or run.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.cc import CC
from patchkit.fixes.kernels import KnownDistribution, KnownFile, known_kernels
from patchkit.kernels.compat import NO_KERNELS, NONE, NOT_REGISTERED, UNKNOWN, Fit, fit
from patchkit.kernels.evidence import Elsewhere, fat_binaries_elsewhere, kernels_in
from patchkit.kernels.fatbin import Binary, read_binary
from patchkit.kernels.imports import StartImports, importers, module_of, start_imports
from patchkit.kernels.installed import Distribution, distributions
from patchkit.values import Value


class FileHere(Value):
    """One shared object, read and judged for the GPUs ``ccs``."""

    shown: str  # relative to site-packages for an installed file, else as given
    binary: Binary
    known: KnownFile | None
    fits: tuple[Fit, ...]  # one per GPU compute capability, lowest first
    elsewhere: Elsewhere | None = None  # a fat binary outside the fat binary sections (NOT_REGISTERED's evidence)
    imported_by: tuple[str, ...] | None = None  # the release's files that import it (read where it fails no start)

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



def judge(path: str, shown: str, ccs: list[CC], known: KnownFile | None = None) -> FileHere:
    binary = read_binary(path)
    fits = tuple(fit(binary.entries, cc) for cc in ccs)
    if binary.problem or not binary.cuda or all(f.runs != NONE for f in fits):
        return FileHere(shown, binary, known, fits)
    # No code for a GPU in the fat binaries: known only when they are what the runtime is handed,
    # and when they hold a kernel at all.
    elsewhere = None
    if not binary.control:  # its kernels come from elsewhere
        why, elsewhere = NOT_REGISTERED, fat_binaries_elsewhere(path)
    elif kernels_in(path, binary.entries) is False:
        why = NO_KERNELS
    else:
        return FileHere(shown, binary, known, fits)
    return FileHere(shown, binary, known, tuple(Fit(f.cc, UNKNOWN, (), why) if f.runs == NONE else f for f in fits), elsewhere)


class DistributionHere(Value):
    """An installed distribution whose shared objects carry CUDA code, judged."""

    dist: Distribution
    known: KnownDistribution
    files: tuple[FileHere, ...]  # those with CUDA code, or unreadable
    without: int  # its shared objects without CUDA code
    start: StartImports | None = None  # what the release imports at every start (known.start), read

    @property
    def label(self) -> str:
        return f"{self.dist.name} {self.dist.version}"

    def failing(self) -> list[FileHere]:
        return [f for f in self.files if f.missing or f.binary.problem]

    def at_start(self, f: FileHere) -> bool:
        """Whether the server loads ``f`` at every start: as the release's start imports it (where
        those cannot be read, every file counts), else as ``known-kernels.toml`` says of the
        distribution (``always``) and of the file (``at_start = false``: a feature's module)."""
        if self.start is None:
            return self.known.always is not None and (f.known is None or f.known.at_start)
        return self.start.problem is not None or module_of(f.shown) in self.start.modules

    def start_files(self) -> list[str]:
        """The shared objects of the distribution its start imports, relative to site-packages."""
        if self.start is None or self.start.problem:
            return []
        return [rel for rel in self.dist.shared if module_of(rel) in self.start.modules]


def installed_code(sites: list[Path], ccs: list[CC], only: str | None = None) -> list[DistributionHere]:
    """Every distribution in ``sites`` (or the one that installed the package folder ``only``)
    with CUDA code in its shared objects, or bare cubins, each file judged for ``ccs``; where the
    data names the server's start, what the release imports there, and who imports each file that
    has no code for a GPU and is not loaded at start."""
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
            start = None if known.start is None else start_imports(dist.site, known.start.module, known.start.method)
            d = DistributionHere(dist, known, tuple(files), without, start)
            if start is not None and not start.problem:
                d = d._replace(files=tuple(f._replace(imported_by=importers(dist.site, module_of(f.shown)))
                                           if f.missing and not d.at_start(f) else f for f in files))
            found.append(d)
    return found
