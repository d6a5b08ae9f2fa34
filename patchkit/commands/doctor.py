"""``patchkit doctor``: what the fixes do on this machine, on one screen.

Read only.  The GPUs and how they are linked come from ``nvidia-smi`` (``patchkit.gpus``),
the projects from the targets the command line found (a PATH, or every project installed
for ``--python``), each fix's state from the target's files (``here.py``), and what the
fix does from its ``[effect]`` data (``fixes/effects.py``).  Neither torch nor the
target's code is imported or run.

A fix whose keys are missing is "not needed here" when these GPUs lack what it needs to
take effect and the release turns the feature off cleanly without it (``here.unneeded``).
On SM12x GPUs linked by PCIe only, doctor also names the all-reduce that does help there
(``speedups.py``), or which project to upgrade for it.

With ``--python``, the compiled CUDA code of that environment is judged for these GPUs too
(``kernels.py``): each distribution's files with no code for them, and what to do.

With ``--to-cc 12`` (or 12.0, 12.1) the fixes are judged for GPUs of that compute capability,
given and not measured (an image build has no GPU): nvidia-smi's GPUs, if it shows any, are
listed and not judged, and how the GPUs are linked is not known, so no fix is "not needed" for
want of multicast.  With no GPU seen (no nvidia-smi, "No devices were found", a hang) and no
``--to-cc``, the projects and their fixes are still reported, judged for the cc the fixes are
for (12.0), and doctor says it cannot say what this machine needs (exit 2).

Exit 0 when nothing the GPUs judged for need is missing, 1 when something is (the one command
that applies it is printed) or when a distribution the server loads at every start has a file
with no code for them, 2 for bad input (a target that is none) or when no GPU was seen and
no ``--to-cc`` given: the report is printed, and one line on stderr says why (``render.failure``).

Returns a ``DoctorResult``: what was seen and judged, as values; ``render/doctor.py`` says it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.errors import BAD_INPUT, OK, PROBLEMS, SETTINGS, BadInput, NoProject
from patchkit.fixes.effects import Effect, read_effects
from patchkit.fixes.registry import FIXES, PROJECTS
from patchkit.gpus.smi import Machine, given, timeout
from patchkit.gpus.smi import machine as read_machine
from patchkit.judge.here import FixHere, clean_start_only, fixes_here, outcome, said_key, spelled, unneeded
from patchkit.judge.reasons import CleanStartOnly, TurnedOn, Unneeded, Unread
from patchkit.judge.settings import Need, missing
from patchkit.judge.speedups import speedups_here
from patchkit.kernels.jit import NvccAt, nvcc_at
from patchkit.report import Where
from patchkit.targets.locate import Layout
from patchkit.targets.session import Session
from patchkit.types import Status
from patchkit.values import Value
from patchkit.versions import at_least

if TYPE_CHECKING:
    from patchkit.commands.given import Given
    from patchkit.commands.settings import SettingsToSet
    from patchkit.fixes.effects import Fails
    from patchkit.judge.jit import JitHere
    from patchkit.judge.kernels import DistributionHere, FileHere
    from patchkit.judge.modes import FlagHere, ModeHere
    from patchkit.judge.settings import SettingHere
    from patchkit.judge.speedups import SpeedupHere
    from patchkit.targets.environment import Environment

NVIDIA_SMI, TO_CC, DEFAULT = "nvidia-smi", "--to-cc", "default"  # what the GPUs judged for come from


class FixJudged(Value):
    """One fix at one target, judged for the GPUs."""

    here: FixHere
    default: bool  # on by default (else opt-in)
    effect: Effect | None  # what it does (``[effect]``)
    needed: bool  # needed on the GPUs judged for: missing, on by default or turned on by the release, and not spare
    spare: Unneeded | Unread | None  # why it is not needed on this machine, or cannot be said to be (``here.unneeded``)
    because: tuple[TurnedOn, ...]  # why an opt-in fix is needed
    failing: tuple[Fails, ...] | None  # what the release does without it; None: its effect is not said here
    clean_only: CleanStartOnly | None  # what the fix does instead on a machine that lacks what it needs (``here.clean_start_only``)


class DoctorTarget(Value):
    where: Where
    project: str
    label: str
    kind: Layout  # how the target lies on disk, as --json says it (git checkout, directory, installed package)
    fixes: tuple[FixJudged, ...]


class CompiledCode(Value):
    """The compiled CUDA code installed for ``--python``, judged for the GPUs."""

    exe: Path
    found: tuple[DistributionHere, ...]
    jit: tuple[JitHere, ...] = ()  # FlashInfer, DeepGEMM, Triton, judged from their sources and compilers

    def no_code(self) -> list[tuple[DistributionHere, list[FileHere]]]:
        """(distribution, its files with no code for the GPUs that the server loads at every start)
        of each distribution that has such a file."""
        return [(d, missing) for d in self.found for missing in [[f for f in d.files if f.missing and d.at_start(f)]] if missing]

    def maybe_no_code(self) -> list[tuple[DistributionHere, list[FileHere]]]:
        """The same for the files not known to be loaded at every start: they fail a start only if
        the server loads them."""
        return [(d, missing) for d in self.found for missing in [[f for f in d.files if f.missing and not d.at_start(f)]] if missing]


class DoctorResult(Value):
    seen: Machine | None  # nvidia-smi's GPUs
    unseen: str | None  # why no GPU was seen
    to_cc: CC | None  # --to-cc, as it was written
    machine: Machine  # the GPUs judged for: those seen, or given (--to-cc, or the fixes' own cc)
    basis: str  # where those come from: NVIDIA_SMI, TO_CC or DEFAULT
    targets: tuple[DoctorTarget, ...]
    needed: tuple[str, ...]  # the fixes needed, in the order found
    apply: str | None  # the one command that applies them
    code: CompiledCode | None  # with --python
    speedups: tuple[SpeedupHere, ...]
    nvcc: NvccAt  # the nvcc FlashInfer would call, as the JIT section finds it
    settings: tuple[SettingHere, ...] = ()  # with --python, the settings judged for the GPUs
    modes: tuple[ModeHere, ...] = ()  # with --python, the failure modes the installed releases are exposed to
    launch: tuple[str, ...] | None = None  # the server's command line given after --
    read_to: tuple[tuple[str, str], ...] = ()  # (project, the newest release the modes were read to) of those installed
    flags: tuple[FlagHere, ...] = ()  # the launch line's flags that a way out names, against the releases

    @property
    def measured(self) -> bool:
        """Judged for the GPUs nvidia-smi shows."""
        return self.basis == NVIDIA_SMI

    @property
    def settings_missing(self) -> tuple[SettingHere, ...]:
        """The settings this environment lacks for the GPUs judged (variables and upgrades: the server's
        flags are not seen), as verify counts them: its exit 5."""
        return tuple(missing(list(self.settings)))

    @property
    def modes_failing(self) -> tuple[ModeHere, ...]:
        """The failure modes known to break this install as it is (every condition stated, no way out in
        effect), but those a fix or a setting doctor judges cures: that verdict counts for them."""
        from patchkit.fixes.modes import WayKind
        from patchkit.judge.modes import failing

        judged = {h.setting.name for h in self.settings} | {j.here.fix for t in self.targets for j in t.fixes}
        return tuple(h for h in failing(list(self.modes))
                     if not any(w.kind in (WayKind.PATCH, WayKind.SETTING) and w.what in judged for w in h.ways))

    @property
    def exit_code(self) -> int:
        if self.basis == DEFAULT:
            return BAD_INPUT
        if self.needed or (self.code is not None and self.code.no_code()) or self.modes_failing:
            return PROBLEMS
        return SETTINGS if self.settings_missing else OK


class DoctorMarkdown(Value):
    """``doctor --format markdown``: the report (``render/markdown.py`` says it), with the versions of the
    distributions installed that patchkit's data names."""

    result: DoctorResult
    versions: tuple[tuple[str, str], ...]

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


def doctor_markdown(result: DoctorResult, env: Environment | None) -> DoctorMarkdown:
    return DoctorMarkdown(result, known_installed(env) if env is not None else ())


def known_installed(env: Environment) -> tuple[tuple[str, str], ...]:
    """(distribution, version) of what ``env`` has installed that patchkit's data says something of: the
    projects it patches, the releases of the failure modes and their ways out, the settings' projects, torch."""
    from patchkit.fixes.modes import modes
    from patchkit.fixes.settings import read_settings
    from patchkit.targets.dist_info import installed_versions

    named = {e.project for m in modes() for e in m.exposed} | {w.project for m in modes() for w in m.ways_out}
    named |= {p.distribution for p in PROJECTS.values()} | {s.project for s in read_settings()} | {"torch"}
    return tuple(sorted((n, v) for n, v in installed_versions(list(env.sites)).items() if n in named))


def _something_known(env: Environment) -> None:
    """Nothing when ``env`` has installed something patchkit knows (a project it patches, or a release its
    data judges: Triton or torch alone); else the error of a --python that has none of its projects."""
    if not env.installs and not known_installed(env):
        from patchkit.targets.environment import none_installed

        raise none_installed(env)  # a wrong --python, most likely


class NoProjectHere(Value):
    """``patchkit doctor`` with no PATH and no --python, in a folder that holds no project: the GPUs
    seen (or why none was), and why the folder is no target; exit 2."""

    seen: Machine | None
    unseen: str | None
    why: NoProject

    @property
    def exit_code(self) -> int:
        return BAD_INPUT


def _turned_on(effect: Effect, s: Session, versions: dict[str, str | None], m: Machine, hs: list[FixHere]) -> tuple[TurnedOn, ...]:
    """Why an opt-in fix is needed here although nobody asked for it: the release turns the
    feature on by itself on these GPUs, with a version of the other project that fails.  Not
    where the fix that keeps the release from it (``prevented_by``) is in effect at the target."""
    if not any(cc.major == 12 for cc in m.ccs()):
        return ()
    kept = {h.fix for h in hs if h.status == Status.IN_EFFECT}
    return tuple(TurnedOn(s.project.name, s.version, d, other) for d in effect.turned_on(s.project.name, s.version)
                 if not d.prevented_by or d.prevented_by not in kept
                 for other in [versions.get(d.with_project)] if other and not at_least(other, d.fixed_in))


def _seen() -> tuple[Machine | None, str | None]:
    """This machine's GPUs from nvidia-smi, or why none was seen (not on PATH, no devices, hung,
    failing, unreadable).  A PATCHKIT_NVIDIA_SMI_TIMEOUT that is no time limit stays bad input."""
    limit = timeout()
    try:
        return read_machine(limit), None
    except BadInput as exc:
        return None, str(exc)


def _judged(h: FixHere, s: Session, effect: Effect | None, pulled: dict[str, tuple[TurnedOn, ...]], m: Machine) -> FixJudged:
    fix = FIXES[h.fix]
    # Not needed on this machine at all: it lacks what the fix needs, and the release turns off cleanly.
    # One applied by patchkit where it does not help is said so, with revert to take it off.
    missing, ours = h.status == Status.MISSING, h.status == Status.IN_EFFECT and h.by_patchkit
    spare = unneeded(effect, s.project, s.version, m, s.reader()) if missing or ours else None
    need = missing and (fix.default or h.fix in pulled) and spare is None
    because = pulled.get(h.fix, ()) if missing and spare is None else ()
    said = effect if h.status in (Status.MISSING, Status.IN_EFFECT) and spare is None else None  # the effect to say
    return FixJudged(h, fix.default, effect, need, spare, because,
                     tuple(outcome(said, s.project, s.version, said_key(s.project, m), s.reader())[0]) if said is not None else None,
                     clean_start_only(said, s.project, s.version, m, s.reader()) if said is not None else None)


def doctor(found: tuple[Given, ...], apply_target: str, env: Environment | None = None, to_cc: CC | None = None, here: bool = False,
           launch: tuple[str, ...] | None = None) -> DoctorResult | NoProjectHere:
    """``found``: each target (``commands.given.Given``); ``apply_target``: how the command line
    named them (``--python EXE`` or PATH), for the command to run; ``env``: the environment ``--python`` read
    (``targets.environment``), whose compiled CUDA code is judged for the GPUs (``kernels.installed_code``);
    ``to_cc``: --to-cc's cc, judged for instead of the GPUs nvidia-smi shows; ``here``: the target is the
    current folder, named by neither PATH nor --python (one with no project: ``NoProjectHere``)."""
    if env is not None:
        _something_known(env)
    seen, unseen = _seen()
    effects = read_effects()
    try:
        sessions = [g.open() for g in found]
    except NoProject as exc:
        if not here:
            raise
        return NoProjectHere(seen, unseen, exc)
    if to_cc is not None:
        m, basis = given(to_cc), TO_CC
    elif seen is None:  # the fixes' own cc: what each fix's state is, not what this machine needs
        projects = [s.project for s in sessions] or list(PROJECTS.values())  # none installed: every project's
        m, basis = given(max((CC.of(p.to_cc) for p in projects), key=CC.pair)), DEFAULT
    else:
        m, basis = seen, NVIDIA_SMI
    versions = {s.project.name: s.version for s in sessions}
    states = [(s, fixes_here(s, m)) for s in sessions]
    # An opt-in fix is needed here when one of the projects turns its feature on by itself.
    pulled = {h.fix: why for s, hs in states for h in hs if h.fix in effects and not FIXES[h.fix].default
              for why in [_turned_on(effects[h.fix], s, versions, m, hs)] if why}
    needed: list[str] = []
    needing: dict[str, object] = {}  # project -> its key for the GPUs judged, where a fix is needed
    targets = []
    for s, hs in states:
        fixes = tuple(_judged(h, s, effects.get(h.fix), pulled, m) for h in hs)
        for j in fixes:
            if j.needed and j.here.fix not in needed:
                needed.append(j.here.fix)
            if j.needed:
                needing[s.project.name] = spelled(s.project, m)[0]
        targets.append(DoctorTarget(Where.of(s), s.project.name, s.project.label, s.target.kind, fixes))
    code = _compiled_code(env, m)
    command = None
    if needed:
        # Keep what is in effect by patchkit too: apply replaces what it applied before.
        keep = [n for n in FIXES if n in needed or any(h.fix == n and h.by_patchkit for _, hs in states for h in hs)]
        # The fixes on by default that a plain apply writes: those kept, and those missing somewhere (one
        # the releases already have, or that has nothing to patch, needs no --fix to be left as it is).
        defaults = [n for n in FIXES if FIXES[n].default and (n in keep or any(
            h.fix == n and h.status == Status.MISSING for _, hs in states for h in hs))]
        options = "" if keep == defaults else " --all-fixes" if keep == list(FIXES) else "".join(f" --fix {n}" for n in keep)
        command = _apply_command(apply_target, options, None if m is seen else needing)
    settings = _settings(env, m)
    in_effect = frozenset({h.fix for _, hs in states for h in hs if h.status == Status.IN_EFFECT}
                          | {h.setting.name for h in settings if h.need == Need.SET})
    found_modes, flags, reached = _modes(env, m, launch, in_effect, code)
    return DoctorResult(seen, unseen, to_cc, m, basis, tuple(targets), tuple(needed), command, code,
                        tuple(speedups_here(m, versions)), nvcc_at(dict(os.environ)), settings,
                        found_modes, launch, reached, flags)


def _modes(env: Environment | None, m: Machine, launch: tuple[str, ...] | None, in_effect: frozenset[str],
           code: CompiledCode | None) -> tuple[tuple[ModeHere, ...], tuple[FlagHere, ...], tuple[tuple[str, str], ...]]:
    """The failure modes the releases ``--python`` has installed are exposed to on these GPUs, the
    launch line's flags that a way out names, against those releases, and how far the modes' data
    reaches for each project installed: the installed releases read once for all three, and each
    shared object the compiled-code section judged (``code``) not read again."""
    if env is None:
        return (), (), ()
    from patchkit.fixes.modes import read_to
    from patchkit.judge.launch import read_launch
    from patchkit.judge.modes import flags_here, modes_here
    from patchkit.targets.dist_info import installed_versions

    sites = list(env.sites)
    versions = installed_versions(sites)
    said = read_launch(launch, Path.cwd()) if launch is not None else None
    flags = tuple(flags_here(said, versions)) if said is not None else ()
    reached = tuple((p, v) for p, v in read_to().items() if p in versions)
    compiled = {d.dist.site / f.shown: f for d in code.found for f in d.files} if code is not None else {}
    return tuple(modes_here(versions, list(m.ccs()), sites, said, in_effect, compiled)), flags, reached


def doctor_env(env: Environment, to_cc: CC | None = None) -> SettingsToSet:
    """``doctor --python EXE --format env``: the variables these GPUs (``to_cc``'s, else nvidia-smi's)
    need, from the same judgement as doctor's settings (``commands.settings.SettingsToSet``)."""
    from patchkit.commands.settings import SettingsToSet, settings_to_set

    _something_known(env)
    m: Machine | None
    if to_cc is not None:
        m = given(to_cc)
    else:
        m, unseen = _seen()
        if m is None:
            return SettingsToSet(str(env.exe), (), (), (), unseen)
    return settings_to_set(env.exe, _settings(env, m), m.ccs())


def _settings(env: Environment | None, m: Machine) -> tuple[SettingHere, ...]:
    """The settings (a variable, a flag, an upgrade) judged from what ``--python`` has installed, with
    the variables of the shell doctor runs in (``judge/settings.py``); not counted in the exit code:
    ``verify --python`` checks the environment the server starts from."""
    if env is None:
        return ()
    from patchkit.judge.settings import settings_here

    return tuple(settings_here(list(env.sites), dict(os.environ), m))


def _apply_command(target: str, options: str, keys: dict[str, object] | None) -> str:
    """The one command that applies what is needed: ``--to-cc auto`` for the GPUs measured; for a
    cc given, its key as each project needing a fix spells it (one command per project when
    they spell it differently: SGLang 12, vLLM 12.0)."""
    if keys is None:
        return f"patchkit apply {target} --to-cc auto{options}"
    if len(set(map(str, keys.values()))) == 1:
        return f"patchkit apply {target} --to-cc {next(iter(keys.values()))}{options}"
    return "; ".join(f"patchkit apply {target} --project {name} --to-cc {key}{options}" for name, key in keys.items())


def _compiled_code(env: Environment | None, m: Machine) -> CompiledCode | None:
    """The compiled CUDA code installed for ``--python``, judged for these GPUs."""
    if env is None:
        return None
    from patchkit.judge.jit import jit_here
    from patchkit.judge.kernels import installed_code
    from patchkit.kernels.jit import jit_installs

    sites = list(env.sites)
    return CompiledCode(env.exe, tuple(installed_code(sites, m.ccs())), tuple(jit_here(jit_installs(sites, dict(os.environ)), m.ccs())))


def apply_target(path: Path | None, python: str | None) -> str:
    """How the command to run names the target, as the command line did."""
    return f"--python {shlex.quote(python)}" if python is not None else shlex.quote(str(path if path is not None else "."))
