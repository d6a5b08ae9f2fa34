"""What apply, revert and status say of the running servers that started before the change
(``targets.processes.Process``): each with the evidence that it runs the target's files, or
that patchkit cannot tell."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.bounded import size_words

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.targets.evidence import Evidence
    from patchkit.targets.processes import Process


def because(why: Evidence) -> str:
    """Why a process is named, as a sentence from its evidence."""
    from patchkit.targets.evidence import Why  # a process is named: its evidence was read

    if why.reason == Why.SCRIPT:
        return f"because it runs {why.path}"
    if why.reason == Why.CWD:
        return f"because its current folder is {why.path}, the first place python -m and -c import from"
    if why.reason == Why.PYTHONPATH:
        return f"because its PYTHONPATH has {why.path}"
    if why.reason == Why.INTERPRETER:
        return f"because it runs {why.path}, a Python of the environment the package is installed in"
    if why.reason == Why.EDITABLE:
        return f"because its interpreter's site-packages hold the editable install of {why.path} ({why.detail})"
    if why.reason == Why.TOO_LARGE:
        return (f"patchkit cannot tell whether it runs these files: {why.path} is larger than the "
                f"{size_words(int(why.detail))} it reads")
    return f"patchkit cannot tell whether it runs these files: {why.path} cannot be read ({why.detail})"


def restart_lines(procs: Sequence[Process]) -> list[str]:
    """The report's lines about ``procs``: [] when there are none."""
    if not procs:
        return []
    noun, pronoun = ("process", "it") if len(procs) == 1 else ("processes", "them")
    head = (
        f"{len(procs)} running {noun} started before the change and may still run the old code;"
        f" restart {pronoun} to load the change:"
    )
    lines = [head]
    for p in procs:
        lines += [f"  pid {p.pid}: {p.cmdline}", f"    {because(p.why)}"]
    return lines


def restart_json(procs: Sequence[Process]) -> list[dict[str, object]]:
    """``procs`` in --json: each with its reason code, the path that shows it, and the sentence."""
    return [{"pid": p.pid, "cmdline": p.cmdline, "started_ns": p.started_ns, "reason": p.why.reason.value,
             "evidence": p.why.path, "detail": p.why.detail, "why": because(p.why)} for p in procs]
