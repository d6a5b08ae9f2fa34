"""What ``patchkit kernels`` says (``commands.kernels.KernelsResult``): what was read and for
which GPUs, then each file (or each distribution and its files) with its verdict.  The words
of one file (``verdict``) and of one distribution (``distribution_lines``) are doctor's and
diagnose's too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.kernels.compat import (
    EXACT,
    JIT,
    LINKED,
    LTO,
    NO_KERNELS,
    NONE,
    NOT_REGISTERED,
    SASS,
    UNKNOWN,
    near_misses,
    worst,
)
from patchkit.render import jit
from patchkit.text import plural

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TypedDict

    from patchkit.commands.kernels import KernelsResult
    from patchkit.judge.kernels import DistributionHere, FileHere
    from patchkit.kernels.compat import Fit, Miss
    from patchkit.kernels.fatbin import FatbinEntry
    from patchkit.kernels.installed import Distribution

    class _Name(TypedDict):
        """A target in ``names_json``."""

        name: str
        cuobjdump: str | None
        kind: str
        section: str
        loads: bool
        entries: int


def to_text(r: KernelsResult, terminal: bool) -> list[str]:
    for_gpus = f" for {', '.join(cc.smi_text() for cc in r.ccs)} ({r.source})" if r.ccs else ""
    if r.exe is not None:
        cuda = [d for d in r.found if d.files]
        lines = [f"{r.exe}: {plural(len(cuda), 'distribution')} with CUDA code{for_gpus}"]
        for d in r.found:
            lines += distribution_lines(d, list(r.ccs), listing=True)
        if r.jit:
            lines.append(jit.heading(r.jit))
            for j in r.jit:
                lines += jit.jit_lines(j)
    else:
        lines = [f"{plural(len(r.files), 'file')}{for_gpus}"] + [f"{f.shown}: {verdict(f)}" for f in r.files]
    return lines + list(r.note)


def to_json(r: KernelsResult) -> dict[str, object]:
    files = [file_json(f, d.dist) for d in r.found for f in d.files] if r.exe is not None else [file_json(f, None) for f in r.files]
    return {"command": "kernels", "ok": not r.failing, "exit_code": r.exit_code, "gpus": [cc.smi_text() for cc in r.ccs] or None,
            "gpus_from": r.source, "note": list(r.note) or None, "files": files, "jit": [jit.jit_json(j) for j in r.jit]}


def carries(f: FileHere) -> str:
    """The code a file carries (``judge.kernels.FileHere``): its SASS architectures and PTX versions
    (what the runtime loads), then what it does not load: relocatable code, LTO IR, other kinds."""
    b = f.binary
    sass, ptx = b.sass(), b.ptx()
    words = ", ".join(sass) if sass else "no SASS"
    words += f", PTX {', '.join(ptx)}" if ptx else ""
    words += f"; relocatable {', '.join(b.relocatable())}" if b.relocatable() else ""
    unlinked = [f"{label} {', '.join(names)}" for label, names in (("LTO IR", b.lto()), ("of unknown kinds", b.other())) if names]
    return words + (f" (never loaded: {'; '.join(unlinked)})" if unlinked else "")


def verdict(f: FileHere) -> str:
    """A file's code against the GPUs, in words (or why it was not judged)."""
    b = f.binary
    if b.problem:
        return f"unreadable: {b.problem}" if b.elf else b.problem
    if not b.cuda:
        return "no CUDA code"
    words = [fit_words(fit) + (f" ({'; '.join(map(miss_words, near_misses(b.entries, fit.cc)))})"
                               if fit.runs == NONE and near_misses(b.entries, fit.cc) else "")
             for fit in f.fits if fit.runs != UNKNOWN]
    unknown = [fit for fit in f.fits if fit.runs == UNKNOWN]
    if unknown:
        words.append(f"cannot tell for {', '.join(fit.cc_text() for fit in unknown)}: {why_unknown(f, unknown[0].why)}")
    return carries(f) + (": " + "; ".join(words) if words else "")


def fit_words(fit: Fit) -> str:
    """What one GPU gets from a file (``kernels.compat.Fit``), in words."""
    if fit.runs == SASS:
        return f"runs on {fit.cc_text()} ({', '.join(fit.by)})"
    if fit.runs == JIT and fit.why == LINKED:
        return (f"runs on {fit.cc_text()} after a JIT link (relocatable {', '.join(fit.by)}: the runtime links "
                "__nv_relfatbin's code at the first start)")
    if fit.runs == JIT:
        return f"runs on {fit.cc_text()} after a JIT ({', '.join(fit.by)}: the driver compiles it at the first start)"
    if fit.runs == UNKNOWN:
        return f"cannot tell for {fit.cc_text()}"
    return f"no code for {fit.cc_text()}"


def miss_words(miss: Miss) -> str:
    """Why code of a GPU's own major does not run on it (``kernels.compat.Miss``)."""
    cc = miss.cc.smi_text()
    if miss.why is LTO:
        return f"{miss.name} is LTO IR, which the runtime does not link"
    return f"{miss.name} runs on {cc} only" if miss.why is EXACT else f"{miss.name} needs {cc} or later"


def why_unknown(f: FileHere, why: str | None) -> str:
    """Why a file's verdict cannot be known (``kernels.compat``'s reasons), with its evidence."""
    if why == NOT_REGISTERED:
        where = f"; it keeps fat binaries in {f.elsewhere.section}" if f.elsewhere else ""
        return f"kernels loaded another way (no .nvFatBinSegment: the CUDA runtime is never handed its .nv_fatbin{where})"
    if why == NO_KERNELS:
        return ("its cubins hold no kernel (no .text section: an empty module), so it launches none of its own; "
                "any it runs are loaded another way")
    return "not known"


def distribution_lines(d: DistributionHere, ccs: list[CC], listing: bool) -> list[str]:
    """What kernels (``listing``: every file) and doctor (the files that cannot run on these GPUs or
    cannot be told, and what to do) say of one distribution (``judge.kernels.DistributionHere``):
    one statement, which doctor's last line repeats, never contradicts."""
    lines: list[str] = []
    counts = plural(len(d.files), "file") + " with CUDA code" + (f", {d.without} without" if d.without else "")
    cubins = f"; {plural(d.dist.cubins, 'bare .cubin file')}, not read (patchkit reads the fat binaries of shared objects)" if d.dist.cubins else ""
    gpus = ", ".join(cc.smi_text() for cc in ccs)
    failing = d.failing()
    unknown = [f for f in d.files if f not in failing and any(fit.runs == UNKNOWN for fit in f.fits)]
    if d.dist.problem:
        lines.append(f"  {d.label}: {d.dist.problem}")
    elif listing or not ccs:
        lines.append(f"  {d.label}: {counts}{cubins}")
    elif failing:
        of = (f"its {plural(len(d.files), 'file')} with CUDA code" if len(failing) == len(d.files)
              else f"{len(failing)} of its {plural(len(d.files), 'file')} with CUDA code")
        if any(d.at_start(f) for f in failing):
            lines.append(f"  {d.label}: {of} cannot run on {gpus}; {always(d)}{cubins}")
        elif always(d):
            none = "it is not" if len(failing) == 1 else "none of them is"
            lines.append(f"  {d.label}: {of} cannot run on {gpus}, and {none} loaded at every start: {always(d)}; "
                         f"a start fails only where a feature loads {'it' if len(failing) == 1 else 'one'} (below){cubins}")
        else:
            lines.append(f"  {d.label}: {of} cannot run on {gpus}: a start fails only if the server loads one "
                         f"(patchkit does not know when it does){cubins}")
    elif unknown and len(unknown) == len(d.files):
        lines.append(f"  {d.label}: cannot tell whether its {counts} run on {gpus} (below){cubins}")
    elif unknown:
        lines.append(f"  {d.label}: cannot tell whether {len(unknown)} of its {counts} "
                     f"{'runs' if len(unknown) == 1 else 'run'} on {gpus} (below); the others do{cubins}")
    else:
        lines.append(f"  {d.label}: every file with CUDA code runs on {gpus} ({counts}){cubins}")
    shown = d.files if listing else failing + unknown
    start = " and ".join(d.start_files()) or "files it loads at every start"
    dos: dict[str, bool] = {}  # what to do -> whether a file loaded at every start needs it
    for f in shown:
        lines.append(f"    {f.shown}: {verdict(f)}{_what(f)}" + ("" if f.loaded else " (not loaded on these GPUs)"))
        if not listing and f.missing:
            cc = f.missing[0].cc
            do = (f.known.do if f.known and f.known.do else d.known.do).format(cc=cc.smi_text(), sm=f"sm_{cc.sm()}", start=start)
            dos[do] = dos.get(do, False) or d.at_start(f)
    lines += [f"    do{'' if needed else ' (if the server loads them)'}: {do}" for do, needed in dos.items()]
    return lines


def always(d: DistributionHere) -> str | None:
    """Why the server loads files of a distribution at every start, in words: the data's sentence,
    or the one its ``start`` says with what was read from the release."""
    if d.start is None:
        return d.known.always
    if d.start.problem:
        return f"which files it loads at every start cannot be read ({d.start.problem}), so each counts"
    assert d.known.start is not None, d.label  # judge.kernels reads ``d.start`` only for a known start
    names = [r.rsplit("/", 1)[-1] for r in d.start_files()]
    modules = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else (names[0] if names else "none of its files")
    return d.known.start.says.format(modules=modules, files=", ".join(d.start.read))


def _what(f: FileHere) -> str:
    """What a file is and when it is loaded: the data's words, and the release's files that import it."""
    words = [f.known.what] if f.known else []
    if f.imported_by:
        words.append(f"imported by {' and '.join(f.imported_by)} only")
    elif f.imported_by is not None:
        words.append("no import of it found in the release's Python files")
    return f" ({'; '.join(words)})" if words else ""


def file_json(f: FileHere, dist: Distribution | None) -> dict[str, object]:
    """A file judged (``judge.kernels.FileHere``) in a --json document; ``dist``: its distribution, or None."""
    b = f.binary
    return {"path": f.shown, "file": b.path, "distribution": dist.name if dist else None,
            "version": dist.version if dist else None, "sass": b.sass(), "ptx": b.ptx(), "compressed": b.compressed(),
            "relocatable": b.relocatable(), "lto": b.lto(), "other": b.other(), "registered": b.control if b.elf else None,
            "names": names_json(b.entries), "entries": len(b.entries), "cuda": b.cuda, "problem": b.problem,
            "what": f.known.what if f.known else None, "loaded": f.loaded if f.fits else None,
            "verdict": (None if b.problem or not b.cuda or not f.fits else worst(f.fits)),
            "elsewhere": {"section": f.elsewhere.section, "offset": f.elsewhere.offset} if f.elsewhere else None,
            "imported_by": list(f.imported_by) if f.imported_by is not None else None, "gpus": [fit_json(x) for x in f.fits]}


def names_json(entries: Sequence[FatbinEntry]) -> list[_Name]:
    """Each distinct target once per section and kind, patchkit's name beside cuobjdump's
    (``--list-elf`` names an sm_120f cubin's file ``x.sm_120.cubin``): what ``--json`` lists."""
    kinds = {1: "ptx", 2: "sass", 8: "lto"}
    seen: dict[tuple[str, int, int, str], _Name] = {}
    for e in entries:
        key = (e.section, e.kind, e.arch, e.suffix)
        if key not in seen:
            seen[key] = {"name": e.name, "cuobjdump": e.listed, "kind": kinds.get(e.kind, f"kind-{e.kind}"),
                         "section": e.section, "loads": e.loads, "entries": 0}
        seen[key]["entries"] += 1
    return [seen[k] for k in sorted(seen, key=lambda k: (k[0] != ".nv_fatbin", k[1] != 2, k[1], k[2], k[3]))]


def fit_json(fit: Fit) -> dict[str, object]:
    """What one GPU gets from a file (``kernels.compat.Fit``) in a --json document."""
    return {"cc": fit.cc_text(), "runs": fit.runs, "by": list(fit.by), "why": fit.why}
