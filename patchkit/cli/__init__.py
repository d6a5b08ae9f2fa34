"""The command line: parse, dispatch, print.  The work is in ``patchkit.commands``.

Every command's callback checks its inputs and returns the command's result, which
``boundary.Command`` prints through ``patchkit.render``; it is the one error boundary around
all of them (and ``boundary.last_resort`` around the whole command line): one line on stderr
and the documented exit code, and with ``--json`` also an error document on stdout; a click
usage error given with ``--json`` gets the same document.
Each command's options and callback are in its module (``apply.py``, ``verify.py``, ...),
imported when the command line names it; ``options.py`` holds the options several commands
share and the checks that need more than one option.
"""

from __future__ import annotations

from importlib import import_module

import click

from patchkit import __version__
from patchkit.cli.boundary import Group

# The module of each command, imported when the command line names it (``--help`` imports them
# all): a command builds its own options, not every command's (about 0.5 M instructions each).
COMMANDS = {name: f"patchkit.cli.{name}" for name in (
    "apply", "diagnose", "doctor", "fixes", "generate", "kernels", "revert", "scan", "status", "upstream", "verify", "watch")}


def show_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: the line click's ``version_option`` prints, then how far the failure modes' data reaches
    (read when asked: ``version_option`` takes its message when the option is made)."""
    if value and not ctx.resilient_parsing:
        from patchkit.fixes.modes import read_to

        click.echo(f"patchkit, version {__version__}", color=ctx.color)
        click.echo("failure modes read to: " + ", ".join(f"{p} {v}" for p, v in read_to().items()), color=ctx.color)
        ctx.exit()


@click.group(cls=Group, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=show_version,
              help="Show the version and exit.")
def cli() -> None:
    """The source patches SGLang, FlashInfer and vLLM need on Blackwell workstation and edge GPUs (RTX PRO
    6000: compute capability 12.0; GB10: 12.1): what this machine needs (doctor), a crash named from its log
    (diagnose, watch), the fixes applied, verified and reverted as one transaction, and sent upstream."""


def preload(args: list[str]) -> None:
    """Import the module of the command ``args`` name (their first word that is no option), if
    any: ``__main__`` imports it with the command line, before the collector runs again."""
    name = next((a for a in args if not a.startswith("-")), None)
    if name in COMMANDS:
        import_module(COMMANDS[name])


def main() -> None:
    from patchkit.cli.boundary import last_resort

    last_resort(lambda: cli(prog_name="patchkit"))
