"""The command line: parse, dispatch, print.  The work is in ``patchkit.commands``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from patchkit import __version__
from patchkit.errors import OK, PROBLEMS, REFUSED, PatchkitError
from patchkit.registry import PROJECTS


def parse_cc(value: str) -> int | str:
    """``10`` -> 10 (SGLang's int keys); ``10.0`` -> "10.0" (string keys)."""
    value = value.strip()
    if value.isdigit():
        return int(value)
    if value.replace(".", "", 1).isdigit():
        return value
    raise click.BadParameter(f"{value!r} is not a compute capability such as 12 or 12.0")


class CC(click.ParamType):
    name = "CC"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            try:
                return parse_cc(str(value))
            except click.BadParameter as exc:
                self.fail(exc.message, param, ctx)
        return value


def fail(exc: PatchkitError) -> None:
    click.echo(f"patchkit: {exc}", err=True)
    sys.exit(exc.exit_code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Generate, apply and upstream patches that teach SGLang new GPU architectures."""


@cli.command()
@click.option("--from-cc", type=CC(), default=None, help="Key to copy from [default: the project's, 10 for SGLang].")
@click.option("--to-cc", type=CC(), default=None, help="Key to add [default: the project's, 12 for SGLang].")
@click.option("--project", type=click.Choice(sorted(PROJECTS)), default="sglang", show_default=True)
@click.option(
    "--repo",
    type=click.Path(path_type=Path),
    default=None,
    help="SGLang git repository [default: $PATCHKIT_SGLANG_REPO, else ~/sglang].",
)
@click.option("--tag", "tags", multiple=True, help="Release tag to generate for (repeatable) [default: every v* tag].")
@click.option("--out", type=click.Path(path_type=Path), default=Path("patches"), show_default=True)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if --out differs from what would be written.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
@click.option("--templates", type=click.Path(path_type=Path, file_okay=False), default=None, help="Folder of templates overriding the shipped ones.")
def generate(from_cc, to_cc, project, repo, tags, out, check, as_json, templates) -> None:
    """Write a version-pinned patch and manifest per release tag into OUT/<version>/."""
    from patchkit.commands import generate as command

    target = PROJECTS[project]
    from_cc = target.from_cc if from_cc is None else from_cc
    to_cc = target.to_cc if to_cc is None else to_cc
    from patchkit.sources.git_objects import default_repo

    repo = repo or default_repo()
    width = max((len(t) for t in tags), default=14)

    def progress(outcome) -> None:
        if as_json:
            return
        line = f"{outcome.tag:<{width}}  {outcome.status}"
        if outcome.status == command.STATUS_PATCHED:
            patch = next(n for n in outcome.outputs if n.endswith(".patch"))
            files = {t["path"] for t in outcome.tables}
            line += f": {len(outcome.tables)} table{'s' if len(outcome.tables) != 1 else ''} in {len(files)} file{'s' if len(files) != 1 else ''} -> {out / outcome.version / patch}"
        elif outcome.error:
            line += f": {outcome.error}"
        click.echo(line, err=outcome.status == command.STATUS_ERROR)

    try:
        result = command.generate(repo, list(tags), out, target, from_cc, to_cc, check, templates, progress)
    except PatchkitError as exc:
        fail(exc)
    summary = result.summary()
    if as_json:
        doc = {
            "repo": str(repo),
            "out": str(out),
            "from_cc": from_cc,
            "to_cc": to_cc,
            "check": check,
            "tags": [o.to_json() for o in result.outcomes],
            "summary": summary,
            "differences": result.differences,
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in result.differences:
            click.echo(line)
        click.echo(
            f"{summary['tags']} tags: {summary['patched']} patched, {summary['nothing to patch']} nothing to patch, "
            f"{summary['already upstream']} already upstream, {summary['error']} errors"
            + (f"; {len(result.differences)} differences in {out}" if check else "")
        )
    if result.failed:
        sys.exit(REFUSED)  # a tag whose tables could not be patched
    sys.exit(PROBLEMS if result.differences else OK)


def emit(make_report, as_json: bool) -> None:
    """Run a command's library function, print its report, exit with its code."""
    try:
        report = make_report()
    except PatchkitError as exc:
        fail(exc)
    except OSError as exc:
        where = exc.filename or "patchkit"
        click.echo(f"patchkit: {where}: {exc.strerror or exc}", err=True)
        sys.exit(REFUSED)
    if as_json:
        click.echo(json.dumps(report.data, indent=2, default=str))
    else:
        for line in report.lines:
            click.echo(line)
    sys.exit(report.exit_code)


PATH_ARG = click.argument("path", type=click.Path(path_type=Path), default=".", required=False)
PYTHON_OPT = click.option(
    "--python", "python", default=None, metavar="EXE",
    help="Patch the package installed for this interpreter (instead of PATH).",
)
PROJECT_OPT = click.option(
    "--project", type=click.Choice(sorted(PROJECTS)), default=None, help="[default: recognised from PATH]"
)


def target_path(path: Path, python: str | None, project: str | None) -> Path:
    """PATH, or the site-packages where ``--python`` has the project installed."""
    if python is None:
        return path
    from patchkit.sources.checkout import installed_package

    return installed_package(python, project or "sglang")
JSON_OPT = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
PATCHES_OPT = click.option(
    "--patches",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of patches/<version>/ [default: the patches shipped with patchkit].",
)


@cli.command()
@PATH_ARG
@PATCHES_OPT
@click.option("--no-generate", is_flag=True, help="Only a shipped patch whose pre-image matches; never generate.")
@click.option("--from-cc", type=CC(), default=None, help="[default: the project's, 10 for SGLang]")
@click.option("--to-cc", type=CC(), default=None, help="[default: the project's, 12 for SGLang]")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--version", "version", default=None, help="Treat the target as this release version.")
@PYTHON_OPT
@PROJECT_OPT
@JSON_OPT
def apply(path, patches, no_generate, from_cc, to_cc, dry_run, version, python, project, as_json) -> None:
    """Patch the checkout or installed package at PATH (default: here), all or nothing."""
    from patchkit.commands.apply import apply as command

    emit(lambda: command(target_path(path, python, project), patches, no_generate, from_cc, to_cc, dry_run, version, project), as_json)


@cli.command()
@PATH_ARG
@click.option("--from-cc", type=CC(), default=None, help="[default: what was applied, else 10]")
@click.option("--to-cc", type=CC(), default=None, help="[default: what was applied, else 12]")
@PYTHON_OPT
@PROJECT_OPT
@JSON_OPT
def verify(path, from_cc, to_cc, python, project, as_json) -> None:
    """Exit 0 only if the patch is in effect at PATH; else 1, a line per problem."""
    from patchkit.commands.verify import verify as command

    if (from_cc is None) != (to_cc is None):
        raise click.UsageError("give both --from-cc and --to-cc, or neither")
    emit(lambda: command(target_path(path, python, project), from_cc, to_cc, project), as_json)


@cli.command()
@PATH_ARG
@click.option("--force", is_flag=True, help="Restore the originals even over files edited after apply (keeping a copy).")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@PATCHES_OPT
@PYTHON_OPT
@PROJECT_OPT
@JSON_OPT
def revert(path, force, dry_run, patches, python, project, as_json) -> None:
    """Restore the exact original bytes at PATH."""
    from patchkit.commands.revert import revert as command

    emit(lambda: command(target_path(path, python, project), force, dry_run, patches, project), as_json)


@cli.command()
@PATH_ARG
@PATCHES_OPT
@PYTHON_OPT
@PROJECT_OPT
@JSON_OPT
def status(path, patches, python, project, as_json) -> None:
    """Version, applied patch, files, bytecode and pending work at PATH."""
    from patchkit.commands.status import status as command

    emit(lambda: command(target_path(path, python, project), patches, project), as_json)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path), default=".", required=False)
@click.option("--branch", default=None, help="Branch to create [default: patchkit/sm<to_cc>0-torch-symm-mem, made unique].")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("upstream"), show_default=True)
@click.option("--from-cc", type=CC(), default=None, help="[default: the project's, 10 for SGLang]")
@click.option("--to-cc", type=CC(), default=None, help="[default: the project's, 12 for SGLang]")
@click.option("--dry-run", is_flag=True, help="Print the commit message and PR.md; change nothing.")
@click.option("--templates", type=click.Path(path_type=Path, file_okay=False), default=None, help="Folder of templates overriding the shipped ones.")
@PATCHES_OPT
@JSON_OPT
def upstream(path, branch, out, from_cc, to_cc, dry_run, templates, patches, as_json) -> None:
    """Make a branch with one commit, an mbox and PR.md to send the fix to SGLang."""
    from patchkit.commands.upstream import upstream as command

    emit(lambda: command(path, branch, out, from_cc, to_cc, dry_run, templates, patches), as_json)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path), default=".", required=False)
@click.option("--cc", type=CC(), default="12", show_default=True, help="The new compute capability (12, or 12.0).")
@click.option("--from-cc", type=CC(), default="10", show_default=True, help="The one it should behave like.")
@click.option("--json", "fmt", flag_value="json", help="Print one JSON document.")
@click.option("--markdown", "fmt", flag_value="markdown", help="Print a markdown table.")
def scan(path, cc, from_cc, fmt) -> None:
    """List every capability gate under PATH that treats CC unlike FROM_CC (exit 1 if any)."""
    from patchkit.commands.scan import scan as command

    tables = tuple(dict.fromkeys(t for p in PROJECTS.values() for t in p.tables))
    emit(lambda: command(path, cc, from_cc, fmt or "text", tables), fmt == "json")


def main() -> None:
    cli(prog_name="patchkit")
