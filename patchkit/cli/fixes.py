"""``patchkit fixes``: the fixes, their rules and the releases they patch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.cli import cli
from patchkit.cli.options import (
    JSON_OPT,
    PATCHES_OPT,
)

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.commands.fixes import FixesResult


@cli.command("fixes", short_help="List the fixes, their rules and the releases they patch.")
@PATCHES_OPT
@JSON_OPT
def list_fixes(patches: Path | None, as_json: bool) -> FixesResult:
    """Every fix: on by default or opt-in (--fix NAME), its rules, and the releases its shipped patches cover."""
    from patchkit.commands.fixes import fixes as command

    return command(patches)
