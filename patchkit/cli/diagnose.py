"""``patchkit diagnose``: the failures patchkit knows in a server's log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    JSON_OPT,
)

if TYPE_CHECKING:
    from patchkit.commands.diagnose import DiagnoseResult


@cli.command(short_help="Find the failures patchkit knows in a server's log.")
@click.argument("logs", nargs=-1, metavar="[LOG]...")
@click.option("--python", "python", default=None, metavar="EXE",
              help="The interpreter the server ran: a missing kernel image names its shared objects without code for the GPUs "
                   "[default: the site-packages folder of the traceback's frames].")
@JSON_OPT
def diagnose(logs: tuple[str, ...], python: str | None, as_json: bool) -> DiagnoseResult:
    """Read each LOG (- or none: standard input) in one pass and name every failure patchkit
    knows in it: where, what failed, the fix and the `patchkit apply` that applies it
    (exit 1 if one was found, 0 if none)."""
    from patchkit.commands.diagnose import diagnose as command

    return command(list(logs), python=python)
