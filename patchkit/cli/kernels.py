"""``patchkit kernels``: which GPUs the compiled CUDA code of shared objects can run on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO
from patchkit.cli import cli
from patchkit.cli.options import (
    JSON_OPT,
    CCType,
)
from patchkit.errors import BadInput

if TYPE_CHECKING:
    from patchkit.cc import CC, AutoCC
    from patchkit.commands.kernels import KernelsResult


@cli.command(short_help="Which GPUs the compiled CUDA code of shared objects can run on.")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path), metavar="[PATH]...")
@click.option("--python", "python", default=None, metavar="EXE",
              help="Every distribution installed for this interpreter whose shared objects carry CUDA code (instead of PATH).")
@click.option("--to-cc", "to_cc", type=CCType(auto=True), multiple=True,
              help="Judge for a GPU of this compute capability (repeatable); auto: this machine's GPUs (nvidia-smi) "
                   "[default: the GPUs of nvidia-smi when it is on PATH and answers, else no verdict].")
@JSON_OPT
def kernels(paths: tuple[Path, ...], python: str | None, to_cc: tuple[CC | AutoCC, ...], as_json: bool) -> KernelsResult:
    """List the SASS architectures and PTX versions of each shared object at PATH (files, or
    the *.so files below a folder) or installed for --python, read from the fat binary headers
    (never loaded); with GPUs, whether each runs there, runs after a JIT, or has no code for
    them (exit 1 then, or for a file that cannot be read)."""
    from patchkit.commands.kernels import kernels as command

    if python is not None and paths:
        raise BadInput(None, f"give PATH or --python, not both (PATH {paths[0]}, --python {python})")
    if AUTO in to_cc and len(to_cc) > 1:
        raise BadInput(None, "give --to-cc auto alone, or compute capabilities")
    return command(list(paths) or ([] if python else [Path(".")]), python, list(to_cc))
