"""A failure mode (``fixes/modes.py``) and its judgement here (``judge/modes.py``) in words: the
one place doctor, diagnose, watch and the generated docs/FAILURE-MODES.md take them from."""

from __future__ import annotations

from patchkit.fixes.modes import Cost, Exposure, Mode, Proven, WayKind, WayOut, modes
from patchkit.judge.modes import Exposed, ModeHere

COST = {Cost.SILENT_WRONG: "silent wrong output", Cost.CRASH: "crash", Cost.HANG: "hang", Cost.SLOWDOWN: "slowdown"}
VERDICT = {Exposed.EXPOSED: "exposed", Exposed.IF: "exposed if", Exposed.AVERTED: "averted",
           Exposed.UNREAD: "not judged"}


def by_name(name: str) -> Mode | None:
    return next((m for m in modes() if m.name == name), None)


def releases(e: Exposure) -> str:
    """``flashinfer-python 0.5.0 to before 0.6.17 (read to 0.7.4)``."""
    span = (f"{e.since} to before {e.fixed_in}" if e.since else f"before {e.fixed_in}") if e.fixed_in else \
        (f"{e.since} and later" if e.since else "every release")
    how = "proven from the released files" if e.proven == Proven.FILES else f"quoted: {e.quoted}"
    on = f" on {' and '.join(g.smi_text() for g in e.gpus)}" if e.gpus else ""
    code = f", where {' or '.join(e.code_in)} as installed has no code for the GPU" if e.code_in else ""
    return f"{e.project} {span}{on}{code} (read to {e.read_to}; {how})"


def way(w: WayOut) -> str:
    """One way out, as a user acts on it."""
    if w.since is None and w.before is None:
        span = f" (any {w.project} release)"
    else:
        span = f" ({w.project} {w.since or 'any'}" + (f" to before {w.before})" if w.before else " and later)")
    if w.kind == WayKind.PATCH:
        text = f"patch: patchkit apply --fix {w.what}: {w.says}"
    elif w.kind == WayKind.UPGRADE:
        text = f"upgrade: {w.project} {w.what} or later: {w.says}"
    elif w.kind == WayKind.SETTING:
        text = f"setting: {w.what}: {w.says} (`patchkit doctor --python EXE` prints it for the release installed)"
    else:
        text = f"backend: {w.what}: {w.says}"
    return text + span + (f"; caveat: {w.caveat}" if w.caveat else "")


def headline(m: Mode) -> str:
    gpus = " and ".join(f"{g.major}.{g.minor}" for g in m.gpus)
    return f"{m.name}: {m.title} ({COST[m.cost]}; {gpus})"


def mode_lines(m: Mode, ways: tuple[WayOut, ...] | None = None) -> list[str]:
    """What a finding of mode ``m`` says under its headline: the mode, and each way out
    (``ways``: those that fit the releases that ran, where they are known)."""
    out = [f"mode: {headline(m)}"]
    out += [f"way out: {way(w)}" for w in (m.ways_out if ways is None else ways)]
    if ways is not None and not ways:
        out.append("way out: none known for the releases installed")
    out += [f"caveat: {c}" for c in m.caveats]
    return out


def here_lines(h: ModeHere) -> list[str]:
    """A mode judged at this install (doctor)."""
    gpus = " and ".join(f"{g.major}.{g.minor}" for g in h.gpus)
    verdict = VERDICT[h.verdict] + (" " + ", ".join(c.value for c in h.unstated) if h.verdict == Exposed.IF else "")
    head = f"{h.mode.name}: {verdict}: {h.mode.title} ({COST[h.mode.cost]}; {h.exposure.project} {h.version}; {gpus})"
    out = [head]
    if h.verdict == Exposed.UNREAD:
        out.append(f"  {h.exposure.project} {h.version} is newer than patchkit has read ({h.exposure.read_to}), "
                   "and its files do not show the upstream fix")
    if h.averted_by is not None:
        out.append(f"  in effect here: {h.averted_by.what}")
        return out
    out += [f"  way out: {way(w)}" for w in h.ways]
    if not h.ways:
        out.append("  way out: none known for the releases installed")
    return out


def here_json(h: ModeHere) -> dict[str, object]:
    return {"mode": h.mode.name, "survey": h.mode.survey, "title": h.mode.title, "cost": h.mode.cost.value,
            "verdict": h.verdict.value, "unstated": [c.value for c in h.unstated], "project": h.exposure.project,
            "version": h.version, "gpus": [f"{g.major}.{g.minor}" for g in h.gpus],
            "averted_by": h.averted_by.what if h.averted_by else None,
            "ways_out": [{"kind": w.kind.value, "project": w.project, "what": w.what, "says": w.says,
                          "caveat": w.caveat or None} for w in h.ways]}


def atlas() -> list[str]:
    """docs/FAILURE-MODES.md, generated from the modes' files (``make failure-modes`` writes it; a test
    holds it to the data)."""
    out = ["# Failure modes on SM12x", "",
           "Generated from `patchkit/fixes/modes/*.toml` by `make failure-modes`: do not edit by hand.", "",
           "Each mode: what users see, what it costs, the GPUs and conditions it needs, the releases exposed (each bound",
           "proven from the released files or quoted from a thread), and the ways out in the order patchkit offers them.",
           "`patchkit doctor --python EXE` judges them for an install; `patchkit diagnose LOG` names them in a log.", "",
           "| # | mode | costs | GPUs | conditions | reports |", "|---|---|---|---|---|---|"]
    for m in modes():
        gpus = ", ".join(f"{g.major}.{g.minor}" for g in m.gpus)
        out.append(f"| {m.survey} | [{m.name}](#{m.survey}-{m.name}) | {', '.join(COST[c] for c in m.costs)} | {gpus} | "
                   f"{', '.join(c.value for c in m.when) or 'any server'} | {m.reports} |")
    for m in modes():
        out += ["", f"## {m.survey}. {m.name}", "", f"{m.title}.", ""]
        out += ["What users see:", ""] + [f"- `{s.text}` ({s.project}; {s.thread})" for s in m.signs] if m.signs else \
            ["What users see: nothing (no text: a hang or wrong output)."]
        out += ["", "Releases exposed:", ""] + [f"- {releases(e)}" for e in m.exposed] if m.exposed else \
            ["", "Releases exposed: not tied to a release."]
        out += ["", "Ways out, in order:", ""] + [f"{i}. {way(w)}" for i, w in enumerate(m.ways_out, 1)]
        out += ["", "Caveats:", ""] + [f"- {c}" for c in m.caveats] if m.caveats else []
        out += ["", "Sources: " + ", ".join(m.sources)]
    return out
