"""What speeds up a collective on this machine with the releases found: the known speedups
(``fixes/known-speedups.toml``) whose machine this is, judged against the targets' versions.

``doctor`` prints it.  A speedup shows only where its machine matches (every GPU of its
compute capability major, two or more linked through PCIe only) and one of the projects it
requires is among the targets: then either what to set, or which projects to upgrade.
"""

from __future__ import annotations

from patchkit.fixes.registry import PROJECTS
from patchkit.fixes.speedups import Speedup, read_speedups
from patchkit.gpus.smi import Machine


def for_machine(sp: Speedup, m: Machine) -> bool:
    """Whether ``m`` is the machine ``sp`` is for."""
    return all(g.cc[0] == sp.major for g in m.gpus) and sp.links == "pcie" and m.pcie_only()


def _gpus(m: Machine) -> str:
    return " and ".join(f"{sum(g.sm() == sm for g in m.gpus)} x {sm}" for sm in dict.fromkeys(g.sm() for g in m.gpus))


def _action(project: str, versions: dict[str, str | None]) -> str:
    dist, version = PROJECTS[project].distribution, versions.get(project)
    return f"upgrade {dist} ({version} here)" if version else f"install {dist} (not among the targets; `--python` finds every one installed)"


def speedup_lines(sp: Speedup, m: Machine, versions: dict[str, str | None]) -> tuple[list[str], dict]:
    """What doctor says of ``sp`` on ``m`` with the targets' ``versions`` (project -> version),
    and its --json object."""
    lines = [f"all-reduce on these GPUs ({_gpus(m)}, linked through PCIe only: no NVLink, no multicast): {sp.what}"]
    short = [r for r in sp.requires if not r.met(versions.get(r.project))]
    have = " and ".join(f"{PROJECTS[r.project].label} {versions.get(r.project)}" for r in sp.requires)
    needs = " and ".join(f"{PROJECTS[r.project].label} {r.since} or later" for r in sp.requires)
    if not short:
        lines.append(f"  {have} have it: start the server with {sp.turn_on}")
    else:
        lines.append(f"  it needs {needs} ({sp.turn_on}): {', '.join(_action(r.project, versions) for r in short)}")
        if len(short) == 1 and short[0].otherwise and versions.get(short[0].project):
            r = short[0]
            lines.append(f"  with {PROJECTS[r.project].label} {versions[r.project]}, {sp.turn_on} only logs \"{r.otherwise}\"")
    lines.append(f"  it serves {sp.serves}")
    lines.append(f"  measured by {sp.measured_by} (the module docstring of {sp.source}):")
    lines += [f"    {line}" for line in sp.measured]
    doc = dict(sp.to_json(), available=not short, upgrade=[PROJECTS[r.project].distribution for r in short],
               installed={r.project: versions.get(r.project) for r in sp.requires})
    return lines, doc


def speedups_here(m: Machine, versions: dict[str, str | None]) -> tuple[list[str], list[dict]]:
    """The lines and --json objects of every known speedup for this machine and these targets."""
    lines: list[str] = []
    docs: list[dict] = []
    for sp in read_speedups():
        if for_machine(sp, m) and any(r.project in versions for r in sp.requires):
            more, doc = speedup_lines(sp, m, versions)
            lines += ["", *more]
            docs.append(doc)
    return lines, docs
