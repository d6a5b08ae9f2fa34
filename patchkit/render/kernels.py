"""What ``patchkit kernels`` says (``commands.kernels.KernelsResult``): what was read and for
which GPUs, then each file (or each distribution and its files) with its verdict.  The words
of one file (``verdict``) and of one distribution (``distribution_lines``) are doctor's and
diagnose's too."""

from __future__ import annotations

from patchkit.kernels.compat import NONE, near_misses
from patchkit.text import plural


def to_text(r, terminal: bool) -> list[str]:
    for_gpus = f" for {', '.join(f'{a}.{b}' for a, b in r.ccs)} ({r.source})" if r.ccs else ""
    if r.exe is not None:
        cuda = [d for d in r.found if d.files]
        lines = [f"{r.exe}: {plural(len(cuda), 'distribution')} with CUDA code{for_gpus}"]
        for d in r.found:
            lines += distribution_lines(d, list(r.ccs), listing=True)
    else:
        lines = [f"{plural(len(r.files), 'file')}{for_gpus}"] + [f"{f.shown}: {verdict(f)}" for f in r.files]
    return lines + list(r.note)


def to_json(r) -> dict:
    files = [f.to_json(d.dist) for d in r.found for f in d.files] if r.exe is not None else [f.to_json(None) for f in r.files]
    return {"command": "kernels", "ok": not r.failing, "exit_code": r.exit_code, "gpus": [f"{a}.{b}" for a, b in r.ccs] or None,
            "gpus_from": r.source, "note": list(r.note) or None, "files": files}


def carries(f) -> str:
    """The code a file carries (``judge.kernels.FileHere``): its SASS architectures and PTX versions."""
    b = f.binary
    sass, ptx = b.sass(), b.ptx()
    words = ", ".join(sass) if sass else "no SASS"
    return words + (f", PTX {', '.join(ptx)}" if ptx else "")


def verdict(f) -> str:
    """A file's code against the GPUs, in words (or why it was not judged)."""
    b = f.binary
    if b.problem:
        return f"unreadable: {b.problem}" if b.elf else b.problem
    if not b.cuda:
        return "no CUDA code"
    words = [fit.words() + (f" ({'; '.join(near_misses(b.entries, fit.cc))})" if fit.runs == NONE and near_misses(b.entries, fit.cc) else "")
             for fit in f.fits]
    return carries(f) + (": " + "; ".join(words) if words else "")


def distribution_lines(d, ccs: list[tuple[int, int]], listing: bool) -> list[str]:
    """What kernels (``listing``: every file) and doctor (the files with no code for these GPUs,
    and what to do) say of one distribution (``judge.kernels.DistributionHere``)."""
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
        lines.append(f"    {f.shown}: {verdict(f)}{what}" + ("" if f.loaded else " (not loaded on these GPUs)"))
        if not listing and f.missing:
            cc = f.missing[0].cc
            do = (f.known.do if f.known and f.known.do else d.known.do).format(cc=f"{cc[0]}.{cc[1]}", sm=f"sm_{cc[0]}{cc[1]}")
            if do not in dos:
                dos.append(do)
    lines += [f"    do: {do}" for do in dos]
    return lines
