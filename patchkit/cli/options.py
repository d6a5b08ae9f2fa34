"""The options several commands share, their parameter types, and the input checks that
need more than one option (the targets they name: ``commands.given``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO, CC, AutoCC, must_differ
from patchkit.errors import BadInput
from patchkit.fixes.registry import PROJECTS
from patchkit.versions import is_version

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    F = TypeVar("F", bound=Callable[..., object])


class CCType(click.ParamType[CC | AutoCC, object]):
    """A compute capability, parsed once here for every command (``patchkit.cc.CC.parse``): ``12``,
    ``12.0``, ``12.1``, ``sm_120a``; with ``auto``, also ``--to-cc auto`` (``patchkit.cc.AUTO``).
    A value that is none, or a cc no NVIDIA GPU has, is one line naming the option, in the same
    words everywhere: BadInput, raised while click parses (``boundary.Command`` says it, exit 2)."""

    def __init__(self, auto: bool = False) -> None:
        self.auto = auto
        self.name = "CC|auto" if auto else "CC"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> CC | AutoCC:
        if isinstance(value, (CC, AutoCC)):  # AutoCC's one member is AUTO
            return value
        text = str(value)
        if self.auto and text.strip() == AUTO.value:
            return AUTO
        try:
            return CC.parse(text)
        except ValueError as exc:
            raise BadInput(None, f"{param.opts[0] if param is not None else '--to-cc'} {exc}") from None


# --- input checks that need more than one option ---------------------------------------


def check_cc(from_cc: CC | None, to_cc: CC | None, project: str | None, to_opt: str = "--to-cc") -> None:
    """Refuse a pair that copies a cc onto itself, whatever the target.  A side not given is
    the default of ``project``; when the target decides the project, the pair is refused only
    if it is one cc with every registered project's defaults (each project refuses a pair it
    keys as one, ``Project.cc_pair``: 12.0 and 12.1 are both SGLang's 12)."""
    if from_cc is None and to_cc is None:  # the projects' own pairs (checked when the registry is built)
        return
    candidates = [PROJECTS[project]] if project else list(PROJECTS.values())
    pairs = [(CC.of(p.from_cc) if from_cc is None else from_cc, CC.of(p.to_cc) if to_cc is None else to_cc) for p in candidates]
    if all(a == b for a, b in pairs):
        raise BadInput(None, must_differ(*pairs[0], to_opt))


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


# --- options shared by several commands ---------------------------------------------------

PATH_ARG = click.argument("path", type=click.Path(path_type=Path), default=None, required=False)
def python_opt(verb: str) -> Callable[[F], F]:
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
CC_HELP = "12, 12.0, 12.1, sm_120a...: each project gets its own spelling (SGLang 12, vLLM 12.0)"
FROM_CC_OPT = click.option("--from-cc", type=CCType(), default=None,
                           help=f"The cc whose keys are copied ({CC_HELP}) [default: what the fixes copy from, 10.0].")
TO_CC_OPT = click.option("--to-cc", type=CCType(), default=None,
                         help=f"The cc to add ({CC_HELP}) [default: the fixes' own, 12.0].")
TO_CC_AUTO_OPT = click.option(
    "--to-cc", type=CCType(auto=True), default=None,
    help=f"The cc to add ({CC_HELP}); auto: the cc of this machine's GPUs (nvidia-smi) [default: the fixes' own, 12.0].",
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
