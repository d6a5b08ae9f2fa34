"""``patchkit verify``: exit 0 only if the patch is in effect."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO
from patchkit.cli import cli
from patchkit.cli.options import (
    ALL_FIXES_OPT,
    CC_HELP,
    JSON_OPT,
    PATH_ARG,
    PROJECT_OPT,
    CCType,
    check_cc,
    python_opt,
)
from patchkit.errors import BadInput
from patchkit.fixes.registry import choose_fixes

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.cc import CC, AutoCC
    from patchkit.report import Result


@cli.command(short_help="Exit 0 only if the patch is in effect.")
@PATH_ARG
@click.option("--from-cc", type=CCType(), default=None,
              help=f"The cc whose keys the new ones must equal ({CC_HELP}) [default: what was applied, else what the fixes copy from].")
@click.option("--to-cc", type=CCType(auto=True), default=None,
              help=f"The cc whose keys must be there ({CC_HELP}); auto: the cc of this machine's GPUs "
                   "[default: auto where nvidia-smi shows SM12x GPUs, else what was applied, else the fixes' own].")
@python_opt("Verify")
@PROJECT_OPT
@click.option("--fix", "fix_names", multiple=True, metavar="NAME",
              help="A fix that must be in effect (repeatable) [default: the default fixes and those applied].")
@ALL_FIXES_OPT
@JSON_OPT
def verify(path: Path | None, from_cc: CC | None, to_cc: CC | AutoCC | None, python: str | None, project: str | None,
           fix_names: tuple[str, ...], all_fixes: bool, as_json: bool) -> Result:
    """Exit 0 only if the patch is in effect at PATH; else 1, a line per problem."""
    from patchkit.commands.given import find
    from patchkit.commands.verify import VerifyRequest, verify_targets

    fixes = choose_fixes(fix_names, all_fixes) if fix_names or all_fixes else None
    if to_cc is AUTO and from_cc is not None:
        raise BadInput(None, "--to-cc auto checks each GPU's key against the project's own --from-cc: give no --from-cc")
    if to_cc is not AUTO:
        check_cc(from_cc, to_cc, project)
    named = tuple(fix_names) if fix_names else (() if all_fixes else None)
    return verify_targets(find(path, python, project), VerifyRequest(from_cc=from_cc, to_cc=to_cc, fixes=fixes, named=named))
