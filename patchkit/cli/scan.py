"""``patchkit scan``: the code that treats --cc unlike --from-cc."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli import cli
from patchkit.cli.options import (
    CCType,
    check_cc,
)
from patchkit.errors import BadInput
from patchkit.fixes.registry import PROJECTS

if TYPE_CHECKING:
    from patchkit.cc import CC
    from patchkit.commands.scan import CompareScan, TreeScan


@cli.command(short_help="List code that treats --to-cc unlike --from-cc.")
@click.argument("path", type=click.Path(path_type=Path), default=None, required=False)
@click.option("--to-cc", "--cc", "cc", type=CCType(), default="12", show_default=True,
              help="The new compute capability (12.0, 12.1, sm_120a...; 12, a major alone, compares \"X.Y\" by major; "
                   "12.1 after --from-cc 12.0: what names 12.0 and not 12.1 is unaware).")
@click.option("--from-cc", type=CCType(), default="10", show_default=True, help="The one it should behave like.")
@click.option("--unaware-only", is_flag=True, help="Only the gates that do not name --to-cc (neither aware nor covered).")
@click.option("--repo", type=click.Path(path_type=Path), default=None, help="Compare two releases of this git repository (with two --tag).")
@click.option("--tag", "tags", multiple=True, help="A release tag to compare (give it twice, the older first; needs --repo).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--markdown", is_flag=True, help="Print markdown tables.")
def scan(path: Path | None, cc: CC, from_cc: CC, unaware_only: bool, repo: Path | None, tags: tuple[str, ...], as_json: bool,
         markdown: bool) -> TreeScan | CompareScan:
    """List every capability gate under PATH (default: .) that treats CC unlike FROM_CC, by
    class (unaware, aware, covered) and file; or, with --repo and two --tag, what changed
    between two releases (exit 1 if any gate is shown; compare: if any appeared unaware)."""
    from patchkit.commands.scan import scan as command

    if as_json and markdown:
        raise BadInput(None, "give --json or --markdown, not both")
    from patchkit.rewrite.capability import given

    check_cc(from_cc, cc, None, "--to-cc")  # scan compares 10 with 12.0 as 10.0 with 12.0
    tables = tuple(dict.fromkeys(t for p in PROJECTS.values() for t in p.tables))
    fmt = "json" if as_json else "markdown" if markdown else "text"
    return command(path, given(cc), given(from_cc), fmt, tables, unaware_only, repo, tags)
