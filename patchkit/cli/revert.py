"""``patchkit revert``: restore the exact original bytes."""

from __future__ import annotations

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
    run_each,
    targets,
)
from patchkit.errors import Refused


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
def revert(path, force, dry_run, patches, to_cc, python, project, as_json):
    """Restore the exact original bytes at PATH."""
    from patchkit.commands.revert import ForceRefused, applied_for, revert_environment
    from patchkit.commands.revert import revert as command
    from patchkit.report import combine

    given = targets(path, python, project)
    try:
        if to_cc is not None:  # every target checked before the first is written
            for p, name, i in given.found:
                applied_for(p, to_cc, name, i)
        if given.env is not None:  # an environment: one transaction for every project in it
            return combine("revert", revert_environment(given.found, force, dry_run, patches, to_cc))
        return run_each("revert", given, lambda p, name, i: command(p, force, dry_run, patches, name, i, to_cc=to_cc))
    except ForceRefused as exc:  # its line starts with how the state is another release's
        from patchkit.render.reasons import said

        raise Refused(exc.path, f"{said(exc.changed)}: {exc.reason}") from None
