"""``patchkit upstream``: a branch, mboxes and PR.md, one commit per fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    ALL_FIXES_OPT,
    FIX_OPT,
    FROM_CC_OPT,
    JSON_OPT,
    PATCHES_OPT,
    TEMPLATES_OPT,
    TO_CC_OPT,
    check_cc,
    check_out,
)
from patchkit.fixes.registry import choose_fixes

if TYPE_CHECKING:
    from patchkit.cc import CC
    from patchkit.commands.upstream import UpstreamResult


@cli.command(short_help="Make a branch, mboxes and PR.md, one commit per fix.")
@click.argument("path", type=click.Path(path_type=Path), default=".", required=False)
@click.option("--branch", default=None, help="Branch to create [default: patchkit/sm<to_cc>0-<the fixes>, made unique].")
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("upstream"), show_default=True,
    help="Folder to write the mboxes and PR.md into.",
)
@FROM_CC_OPT
@TO_CC_OPT
@click.option("--dry-run", is_flag=True, help="Print the commit message and PR.md; change nothing.")
@TEMPLATES_OPT
@PATCHES_OPT
@FIX_OPT
@ALL_FIXES_OPT
@JSON_OPT
def upstream(path: Path, branch: str | None, out: Path, from_cc: CC | None, to_cc: CC | None, dry_run: bool, templates: Path | None,
             patches: Path | None, fix_names: tuple[str, ...], all_fixes: bool, as_json: bool) -> UpstreamResult:
    """Make a branch with one commit per fix (default: the fixes on by default), an mbox per
    commit and PR.md, to send the fixes upstream."""
    from patchkit.commands.upstream import upstream as command

    check_cc(from_cc, to_cc, None)
    check_out(out)
    return command(path, branch, out, from_cc, to_cc, dry_run, templates, patches, choose_fixes(fix_names, all_fixes))
