"""``patchkit generate``: write a patch series and manifest per release tag."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cc import AUTO
from patchkit.cli import cli
from patchkit.cli.options import (
    FROM_CC_OPT,
    JSON_OPT,
    TEMPLATES_OPT,
    TO_CC_AUTO_OPT,
    check_cc,
    check_out,
)
from patchkit.errors import BadInput
from patchkit.fixes.registry import FIXES, PROJECTS, choose_fixes, no_rule, rules_for

if TYPE_CHECKING:
    from patchkit.cc import CC, AutoCC
    from patchkit.commands.generate import GenerateResult, NoKeys, TagOutcome


@cli.command(short_help="Write a patch series and manifest per release tag.")
@FROM_CC_OPT
@TO_CC_AUTO_OPT
@click.option("--fix", "fix_names", multiple=True, metavar="NAME", help="A fix to generate (repeatable) [default: every fix].")
@click.option("--project", type=click.Choice(sorted(PROJECTS)), default="sglang", show_default=True, help="The project the repository holds.")
@click.option(
    "--repo",
    type=click.Path(path_type=Path),
    default=None,
    help="The git repository of the --project, with a tag per release [default: $PATCHKIT_SGLANG_REPO, else ~/sglang, for any --project].",
)
@click.option("--tag", "tags", multiple=True, help="Release tag to generate for (repeatable) [default: every v* tag].")
@click.option("--out", type=click.Path(path_type=Path), default=Path("patches"), show_default=True, help="Folder to write <version>/ folders into.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if --out differs from what would be written.")
@JSON_OPT
@TEMPLATES_OPT
def generate(from_cc: CC | None, to_cc: CC | AutoCC | None, fix_names: tuple[str, ...], project: str, repo: Path | None,
             tags: tuple[str, ...], out: Path, check: bool, as_json: bool, templates: Path | None) -> GenerateResult | NoKeys:
    """Write a version-pinned patch series (one patch per fix), its quilt `series` file and
    manifest per release tag into OUT/<version>/."""
    from patchkit.commands import generate as command
    from patchkit.git.objects import default_repo

    skip = None
    if to_cc is AUTO:
        from patchkit.judge.auto import generate_cc, generate_skip

        to_cc, machine = generate_cc(PROJECTS[project], from_cc)
        if to_cc is None:
            return command.NoKeys(machine, PROJECTS[project].label)
        from patchkit.render.saved import saved

        unneeded = generate_skip(PROJECTS[project], machine, tuple(fix_names))

        def skip(fix: str, version: str) -> dict[str, object] | None:  # the manifest keeps why as values
            return saved(unneeded(fix, version))
    check_cc(from_cc, to_cc, project)
    check_out(out)
    target = PROJECTS[project]
    from_key, to_key = target.cc_pair(from_cc, to_cc)
    fixes = choose_fixes(fix_names, all_fixes=not fix_names)
    rules = rules_for(project, fixes, from_key, to_key)
    if not rules:
        raise BadInput(None, no_rule(target.label, project, fixes))
    asked = tuple(fix_names) + tuple(n for n in fixes if FIXES[n].default)

    width = max(map(len, tags), default=14)  # the tags asked for; every release tag fits in 14

    def progress(outcome: TagOutcome) -> None:
        from patchkit.render.generate import tag_line
        from patchkit.types import ERROR

        if not as_json:
            click.echo(tag_line(outcome, width, out), err=outcome.status == ERROR)

    return command.generate(repo or default_repo(), list(tags), out, target, fixes, rules, asked, check, templates, progress,
                            skip=skip)
