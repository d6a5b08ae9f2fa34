"""``patchkit revert``: restore the exact original bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    CC_HELP,
    DRY_RUN_OPT,
    JSON_OPT,
    PATCHES_OPT,
    PATH_ARG,
    PROJECT_OPT,
    CCType,
    python_opt,
)

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.cc import CC
    from patchkit.report import Result


@cli.command(short_help="Restore the exact original bytes.")
@PATH_ARG
@click.option("--force", is_flag=True, help="Restore the originals even over files edited after apply (keeping a copy).")
@DRY_RUN_OPT
@PATCHES_OPT
@click.option("--to-cc", type=CCType(), default=None,
              help=f"Revert only if what is applied adds this cc ({CC_HELP}); else refuse, nothing written "
                   "[default: whatever is applied].")
@python_opt("Revert")
@PROJECT_OPT
@JSON_OPT
def revert(path: Path | None, force: bool, dry_run: bool, patches: Path | None, to_cc: CC | None, python: str | None,
           project: str | None, as_json: bool) -> Result:
    """Restore the exact original bytes at PATH."""
    from patchkit.commands.given import find
    from patchkit.commands.revert import ForceRefused, RevertRequest, revert_targets

    given = find(path, python, project)
    try:
        return revert_targets(given, RevertRequest(force=force, dry_run=dry_run, patches=patches, to_cc=to_cc))
    except ForceRefused as exc:  # its line starts with how the state is another release's
        from patchkit.render.revert import refused

        raise refused(exc) from None
