"""``patchkit apply``: patch a checkout or package, all or nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO
from patchkit.cli import cli
from patchkit.cli.options import (
    ALL_FIXES_OPT,
    DRY_RUN_OPT,
    FIX_OPT,
    FROM_CC_OPT,
    JSON_OPT,
    PATCHES_OPT,
    PATH_ARG,
    PROJECT_OPT,
    PYTHON_OPT,
    TO_CC_AUTO_OPT,
    check_cc,
    check_version,
)
from patchkit.fixes.registry import choose_fixes

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.cc import CC, AutoCC
    from patchkit.report import Result


@cli.command(short_help="Patch a checkout or package, all or nothing.")
@PATH_ARG
@PATCHES_OPT
@click.option("--no-generate", is_flag=True, help="Only a shipped patch whose pre-image matches; never generate.")
@FROM_CC_OPT
@TO_CC_AUTO_OPT
@DRY_RUN_OPT
@click.option("--version", "version", default=None, help="Treat the target as this release version (such as 0.5.9).")
@PYTHON_OPT
@PROJECT_OPT
@FIX_OPT
@ALL_FIXES_OPT
@JSON_OPT
def apply(path: Path | None, patches: Path | None, no_generate: bool, from_cc: CC | None, to_cc: CC | AutoCC | None, dry_run: bool,
          version: str | None, python: str | None, project: str | None, fix_names: tuple[str, ...], all_fixes: bool,
          as_json: bool) -> Result:
    """Patch the checkout or installed package at PATH (default: here), all or nothing;
    with --python, every project patchkit knows that is installed for EXE."""
    from patchkit.commands.apply import apply as command
    from patchkit.commands.given import find
    from patchkit.plan.apply import ApplyRequest

    check_version(version)
    fixes = choose_fixes(fix_names, all_fixes)
    check_cc(from_cc, None if to_cc is AUTO else to_cc, project)
    # --all-fixes names no fix: one a release cannot take whole is left out there, and said.
    named = tuple(fix_names) if fix_names else (() if all_fixes else None)
    request = ApplyRequest(fixes=fixes, named=named, from_cc=from_cc, to_cc=to_cc, patches=patches, no_generate=no_generate,
                           dry_run=dry_run)
    return command(find(path, python, project), request, version)
