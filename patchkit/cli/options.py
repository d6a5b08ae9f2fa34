"""The options several commands share, their parameter types, and the input checks that
need more than one option; ``targets`` and ``run_each``: the targets of PATH or ``--python``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click

from patchkit.errors import BadInput
from patchkit.fixes.registry import PROJECTS
from patchkit.versions import is_version

if TYPE_CHECKING:
    from patchkit.targets.environment import Environment


class CC(click.ParamType):
    """A compute capability: ``10`` -> 10 (SGLang's int keys); ``10.0`` -> "10.0" (string keys)."""

    name = "CC"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            from patchkit.rewrite.capability import cap, parse_cc  # only when a cc is given

            try:
                cc = parse_cc(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            nvidia_cc(cap(cc), str(value).strip(), param.opts[0] if param is not None else "--to-cc")
            return cc
        return value


AUTO = "auto"  # --to-cc auto: this machine's GPUs (patchkit.judge.auto)


class CCOrAuto(CC):
    """A compute capability, or ``auto``: the cc of this machine's GPUs, from nvidia-smi."""

    name = "CC|auto"

    def convert(self, value, param, ctx):
        return AUTO if value == AUTO else super().convert(value, param, ctx)


def gpu_cc(text: str, option: str = "--to-cc") -> tuple[int, int]:
    """A GPU's compute capability as apply's --to-cc reads it (``12``, ``12.0``, ``12.1``:
    ``rewrite.capability``), and one NVIDIA has (1.0 to 15.x): ``(12, 0)``.  BadInput, in one
    line, otherwise."""
    from patchkit.rewrite.capability import cap

    try:
        c = cap(text)
    except ValueError:
        raise BadInput(None, f"{option} {_shown(text)!r} is not a compute capability such as 12, 12.0 or 12.1, nor auto") from None
    nvidia_cc(c, text, option)
    return c.major, c.minor


def nvidia_cc(c: tuple, text: str, option: str) -> None:
    """Refuse a cc (its ``(major, minor)`` first) that no NVIDIA GPU has, 1.0 to 15.x the
    range, in one line naming ``option`` and the value as written: every command's --to-cc,
    --from-cc and --cc (``CC``, doctor's ``gpu_cc``, kernels' ``GPUCC``).  A type raises it
    while click parses; ``boundary.Command`` makes it the line and exit 2."""
    from patchkit.gpus.parse import CC_MAJORS

    if c[0] not in CC_MAJORS or c[1] > 9:
        raise BadInput(None, f"{option} {_shown(text)!r} is not a compute capability NVIDIA has (1.0 to 15.x)")


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "..."


# --- input checks that need more than one option ---------------------------------------


def _pair_error(from_cc: int | str, to_cc: int | str, to_opt: str, alike: bool) -> str | None:
    given = f"(--from-cc {from_cc}, {to_opt} {to_cc})"
    from patchkit.rewrite.capability import same

    if same(from_cc, to_cc):
        return f"{to_opt} must differ from --from-cc {given}"
    if alike and type(from_cc) is not type(to_cc):
        return f"--from-cc and {to_opt} must be written alike, both like 12 or both like 12.0 {given}"
    return None


def check_cc(from_cc, to_cc, project: str | None, to_opt: str = "--to-cc", alike: bool = True) -> None:
    """Refuse a cc pair that is wrong whatever the target: one capability twice, or
    (with ``alike``, as table keys) 10 with 12.0.

    A side not given is the default of ``project``; when the target decides the project,
    the pair is refused only if it is wrong with every registered project's defaults
    (the command finds the rest once it knows the project).
    """
    if from_cc is None and to_cc is None:  # the projects' own pairs (checked when the registry is built)
        return
    candidates = [PROJECTS[project]] if project else list(PROJECTS.values())
    errors = [
        _pair_error(p.from_cc if from_cc is None else from_cc, p.to_cc if to_cc is None else to_cc, to_opt, alike)
        for p in candidates
    ]
    if all(errors):
        raise BadInput(None, errors[0])


def check_version(version: str | None) -> None:
    if version is not None and not is_version(version):
        raise BadInput(None, f"--version {version!r} is not a release version such as 0.5.9, 0.5.4.post2 or 0.5.0rc1")


def check_out(out: Path) -> None:
    """An --out folder, or one that can be made: checked before anything is written."""
    for folder in (out, *out.parents):
        if folder.is_dir():
            return
        if folder.exists() or folder.is_symlink():
            raise BadInput(str(out), "not a directory" if folder == out else f"{folder} is not a directory")


class Targets(NamedTuple):
    """What the command line names: each target's (folder, project, install), and the
    environment ``--python`` read (None for a PATH)."""

    found: list[tuple]
    env: Environment | None


def targets(path: Path | None, python: str | None, project: str | None) -> Targets:
    """The targets of PATH (default: here), or of every project patchkit knows (or
    ``project``) installed for ``--python``, wheels and editable installs alike
    (``targets.environment``)."""
    if python is None:
        return Targets([(Path(".") if path is None else path, project, None)], None)
    if path is not None:
        raise BadInput(None, f"give PATH or --python, not both (PATH {path}, --python {python})")
    from patchkit.targets.environment import read_environment

    env = read_environment(python, project)
    return Targets([(i.path, i.project, i) for i in env.installs], env)


def run_each(command: str, given: Targets, run, judged: bool = False):
    """``run(path, project, install)`` on each target of ``given``, one after the other; one
    result.  ``judged``: it starts with what ``--python`` found and which known projects it
    did not find, so that what was judged is never mistaken for the whole environment."""
    from patchkit.report import Each, combine

    results = [run(*each) for each in given.found]
    return Each(command, tuple(results), given.env) if judged and given.env is not None else combine(command, results)


# --- options shared by several commands ---------------------------------------------------

PATH_ARG = click.argument("path", type=click.Path(path_type=Path), default=None, required=False)
def python_opt(verb: str):
    """``--python EXE``, its help saying what the command does to what it finds there."""
    return click.option(
        "--python", "python", default=None, metavar="EXE",
        help=f"{verb} every project patchkit knows that is installed for this interpreter (instead of PATH).",
    )


PYTHON_OPT = python_opt("Patch")
PROJECT_OPT = click.option(
    "--project", type=click.Choice(sorted(PROJECTS)), default=None,
    help="The project the target holds [default: recognised from PATH; with --python, every project installed there].",
)
JSON_OPT = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
PATCHES_OPT = click.option(
    "--patches",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of <version>/ (SGLang) and <project>/<version>/ series [default: the patches shipped with patchkit].",
)
FROM_CC_OPT = click.option("--from-cc", type=CC(), default=None, help="Key to copy from [default: the project's, 10 for SGLang].")
TO_CC_OPT = click.option("--to-cc", type=CC(), default=None, help="Key to add [default: the project's, 12 for SGLang].")
TO_CC_AUTO_OPT = click.option(
    "--to-cc", type=CCOrAuto(), default=None,
    help="Key to add; auto: the cc of this machine's GPUs (nvidia-smi), as the project spells it [default: the project's, 12 for SGLang].",
)
DRY_RUN_OPT = click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
FIX_OPT = click.option(
    "--fix", "fix_names", multiple=True, metavar="NAME",
    help="A fix to work with (repeatable; `patchkit fixes` lists them) [default: the fixes on by default].",
)
ALL_FIXES_OPT = click.option("--all-fixes", is_flag=True, help="Every fix, the opt-in ones too.")
TEMPLATES_OPT = click.option(
    "--templates", type=click.Path(path_type=Path, file_okay=False), default=None,
    help="Folder of templates overriding the shipped ones.",
)
