"""``patchkit watch``: follow a server's log until it is ready, crashes or times out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    JSON_OPT,
)

if TYPE_CHECKING:
    from patchkit.commands.watch import Progress, WatchResult


@cli.command(short_help="Follow a server's log until it is ready, crashes or times out.")
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--timeout", default=None, metavar="SECONDS",
              help="Give up after this long, a finite number of seconds above 0 (exit 124) [default: wait].")
@click.option("--python", "python", default=None, metavar="EXE",
              help="The server's Python: at the time-out, name only the hangs its installed releases are exposed to.")
@JSON_OPT
def watch(log: Path, timeout: str | None, python: str | None, as_json: bool) -> WatchResult:
    """Follow LOG as the server writes it (it may not exist yet, or start over; a FIFO is read
    without waiting): exit 0 at the ready line of the project the log is of, 1 with the
    diagnosis at a crash, 124 at the time-out, with the failure modes that hang where the start
    stopped (with --python, those its releases are exposed to).  Starts, signals and kills nothing."""
    from patchkit.commands.given import find
    from patchkit.commands.watch import seconds
    from patchkit.commands.watch import watch as command

    limit = seconds(timeout)  # checked before anything is read: nan, inf, 0 and -1 are one line, exit 2

    def progress(event: Progress) -> None:  # on a terminal only
        from patchkit.render.watch import progress_line

        click.echo(progress_line(event), err=True)

    env = find(None, python, None).env if python is not None else None
    return command(log, limit, progress if sys.stderr.isatty() and not as_json else None, env=env)
