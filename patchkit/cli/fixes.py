"""``patchkit fixes``: the fixes, their rules and the releases they patch."""

from __future__ import annotations

from patchkit.cli import cli
from patchkit.cli.options import (
    JSON_OPT,
    PATCHES_OPT,
)


@cli.command("fixes", short_help="List the fixes, their rules and the releases they patch.")
@PATCHES_OPT
@JSON_OPT
def list_fixes(patches, as_json):
    """Every fix: on by default or opt-in (--fix NAME), its rules, and the releases its shipped patches cover."""
    from patchkit.commands.fixes import fixes as command

    return command(patches)
