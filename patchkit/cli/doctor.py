"""``patchkit doctor``: what the fixes do on this machine's GPUs; what is missing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO
from patchkit.cli import cli
from patchkit.cli.boundary import Command
from patchkit.cli.options import (
    JSON_OPT,
    PATH_ARG,
    PROJECT_OPT,
    CCType,
    python_opt,
)
from patchkit.errors import BadInput

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.cc import CC, AutoCC
    from patchkit.commands.doctor import DoctorMarkdown, DoctorResult, NoProjectHere
    from patchkit.commands.settings import SettingsToSet


class _Launch(Command):
    """A command whose words after ``--`` are the server's command line (``doctor --python PY -- CMD``),
    kept whole, as written: click parses the words before it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            args, ctx.meta["launch"] = args[:at], tuple(args[at + 1:])
        return super().parse_args(ctx, args)


@cli.command(cls=_Launch, short_help="What the fixes do on this machine's GPUs; what is missing.")
@PATH_ARG
@python_opt("Judge the fixes for")
@PROJECT_OPT
@click.option("--to-cc", type=CCType(auto=True), default=AUTO.value, show_default=True, metavar="CC|auto",
              help="The GPUs to judge for: auto (those nvidia-smi shows), or a compute capability (12, 12.0, 12.1) "
                   "judged as given, with no GPU needed (an image build has none).")
@click.option("--format", "fmt", type=click.Choice(["text", "env", "markdown"]), default="text", show_default=True,
              help="env: only the shell lines `export NAME=VALUE` of the variables this machine needs (with --python), "
                   "for a launch script to eval; markdown: the report to paste into an upstream issue (home folders "
                   "and the launch line's secrets redacted).")
@JSON_OPT
@click.pass_context
def doctor(ctx: click.Context, path: Path | None, python: str | None, project: str | None, to_cc: CC | AutoCC, fmt: str,
           as_json: bool) -> DoctorResult | NoProjectHere | DoctorMarkdown | SettingsToSet:
    """The GPUs (nvidia-smi), how they are linked, the projects at PATH (default: here) or
    installed for --python, each fix: needed here or not, applied or not, and what it does
    on this machine; with --python, the failure modes the installed releases are exposed to.
    After `--`, the server's command line narrows the modes to the conditions it states
    (`patchkit doctor --python PY -- python3 -m sglang.launch_server --tp 8 ...`).  Read only.  Exit 1 when something this machine needs is missing; with
    no GPU seen and no --to-cc, the projects and fixes are still shown, and the exit is 2.
    With --format env: the export lines alone; exit 1 when a variable needed has no value
    here, 2 with no GPU seen and no --to-cc."""
    from patchkit.commands.doctor import apply_target
    from patchkit.commands.doctor import doctor as command
    from patchkit.commands.given import find

    if fmt == "env":
        if python is None:
            raise BadInput(None, "--format env judges the settings from what an environment has installed: "
                                 "give --python EXE (the Python the server runs with)")
        if as_json:
            raise BadInput(None, "--format env prints shell lines: give --json or --format env, not both")
        from patchkit.commands.doctor import doctor_env

        env = find(path, python, project, none=project is None).env
        assert env is not None  # --python given: its environment read
        return doctor_env(env, to_cc=None if to_cc is AUTO else to_cc)
    launch = ctx.meta.get("launch")
    if launch is not None and python is None:
        raise BadInput(None, "a server's command line after -- is judged with the environment it runs in: give --python EXE")
    if fmt == "markdown" and as_json:
        raise BadInput(None, "--format markdown prints markdown: give --json or --format markdown, not both")
    given = find(path, python, project, none=project is None)
    result = command(given.found, apply_target(path, python), given.env, to_cc=None if to_cc is AUTO else to_cc,
                     here=path is None and python is None, launch=launch)
    if fmt == "markdown":
        from patchkit.commands.doctor import DoctorResult, doctor_markdown

        return doctor_markdown(result, given.env) if isinstance(result, DoctorResult) else result
    return result
