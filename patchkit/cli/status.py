"""``patchkit status``: version, patch, files and bytecode."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    CC_HELP,
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


@cli.command(short_help="Show version, patch, files and bytecode.")
@PATH_ARG
@PATCHES_OPT
@click.option("--to-cc", type=CCType(), default=None,
              help=f"Also say whether what is applied adds this cc, as each project keys it ({CC_HELP}).")
@python_opt("Show")
@PROJECT_OPT
@JSON_OPT
def status(path: Path | None, patches: Path | None, to_cc: CC | None, python: str | None, project: str | None,
           as_json: bool) -> Result:
    """Version, applied patch, files, bytecode and pending work at PATH."""
    from patchkit.commands.given import find
    from patchkit.commands.status import status_targets

    return status_targets(find(path, python, project), patches, to_cc)
