"""The command line: parse, dispatch, print.  The work is in ``patchkit.commands``.

Every command's callback checks its inputs and returns the command's result, which
``boundary.Command`` prints through ``patchkit.render``; it is the one error boundary around
all of them (and ``boundary.last_resort`` around the whole command line): one line on stderr
and the documented exit code, and with ``--json`` also an error document on stdout; a click
usage error given with ``--json`` gets the same document.
``options.py`` holds the options several commands share and the checks that need more
than one option.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from patchkit import __version__
from patchkit.cc import AUTO
from patchkit.cli.boundary import Group
from patchkit.cli.options import (
    ALL_FIXES_OPT,
    CC_HELP,
    DRY_RUN_OPT,
    FIX_OPT,
    FROM_CC_OPT,
    JSON_OPT,
    PATCHES_OPT,
    PATH_ARG,
    PROJECT_OPT,
    PYTHON_OPT,
    TEMPLATES_OPT,
    TO_CC_AUTO_OPT,
    TO_CC_OPT,
    CCType,
    check_cc,
    check_out,
    check_version,
    python_opt,
    run_each,
    targets,
)
from patchkit.errors import BadInput, Refused
from patchkit.fixes.registry import FIXES, PROJECTS, choose_fixes, no_rule, rules_for


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Generate, apply and upstream patches that teach SGLang new GPU architectures."""


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
def generate(from_cc, to_cc, fix_names, project, repo, tags, out, check, as_json, templates):
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
        from patchkit.render.reasons import said

        unneeded = generate_skip(PROJECTS[project], machine, tuple(fix_names))

        def skip(fix: str, version: str) -> str | None:  # the manifest says why in words
            return said(unneeded(fix, version))
    check_cc(from_cc, to_cc, project)
    check_out(out)
    target = PROJECTS[project]
    from_cc, to_cc = target.cc_pair(from_cc, to_cc)
    fixes = choose_fixes(fix_names, all_fixes=not fix_names)
    rules = rules_for(project, fixes, from_cc, to_cc)
    if not rules:
        raise BadInput(None, no_rule(target.label, project, fixes))
    asked = tuple(fix_names) + tuple(n for n in fixes if FIXES[n].default)

    width = max(map(len, tags), default=14)  # the tags asked for; every release tag fits in 14

    def progress(outcome) -> None:
        from patchkit.render.generate import tag_line
        from patchkit.types import ERROR

        if not as_json:
            click.echo(tag_line(outcome, width, out), err=outcome.status == ERROR)

    return command.generate(repo or default_repo(), list(tags), out, target, fixes, rules, asked, check, templates, progress,
                            skip=skip)


@cli.command(short_help="Patch a checkout or package, all or nothing.")
@PATH_ARG
@PATCHES_OPT
@click.option("--no-generate", is_flag=True, help="Only a shipped patch whose pre-image matches; never generate.")
@FROM_CC_OPT
@TO_CC_AUTO_OPT
@DRY_RUN_OPT
@click.option("--version", "version", default=None, help="Treat the target as this release version (such as 0.5.9).")
@PYTHON_OPT
@PROJECT_OPT
@FIX_OPT
@ALL_FIXES_OPT
@JSON_OPT
def apply(path, patches, no_generate, from_cc, to_cc, dry_run, version, python, project, fix_names, all_fixes, as_json):
    """Patch the checkout or installed package at PATH (default: here), all or nothing;
    with --python, every project patchkit knows that is installed for EXE."""
    from patchkit.commands.apply import apply_auto, apply_targets

    check_version(version)
    fixes = choose_fixes(fix_names, all_fixes)
    if to_cc is AUTO:
        check_cc(from_cc, None, project)
        return apply_auto(targets(path, python, project).found, patches, no_generate, from_cc, dry_run, version, fixes,
                          named=tuple(fix_names))
    check_cc(from_cc, to_cc, project)
    # --all-fixes names no fix: one a release cannot take whole is left out there, and said.
    named = tuple(fix_names) if fix_names else (() if all_fixes else None)
    return apply_targets(targets(path, python, project).found, patches, no_generate, from_cc, to_cc, dry_run, version, fixes,
                         named=named)


@cli.command(short_help="Exit 0 only if the patch is in effect.")
@PATH_ARG
@click.option("--from-cc", type=CCType(), default=None,
              help=f"The cc whose keys the new ones must equal ({CC_HELP}) [default: what was applied, else what the fixes copy from].")
@click.option("--to-cc", type=CCType(auto=True), default=None,
              help=f"The cc whose keys must be there ({CC_HELP}); auto: the cc of this machine's GPUs "
                   "[default: auto where nvidia-smi shows SM12x GPUs, else what was applied, else the fixes' own].")
@python_opt("Verify")
@PROJECT_OPT
@click.option("--fix", "fix_names", multiple=True, metavar="NAME",
              help="A fix that must be in effect (repeatable) [default: the default fixes and those applied].")
@ALL_FIXES_OPT
@JSON_OPT
def verify(path, from_cc, to_cc, python, project, fix_names, all_fixes, as_json):
    """Exit 0 only if the patch is in effect at PATH; else 1, a line per problem."""
    from patchkit.commands.verify import sm12x_gpus, verify_auto
    from patchkit.commands.verify import verify as command

    fixes = choose_fixes(fix_names, all_fixes) if fix_names or all_fixes else None
    found = None if to_cc is not None or from_cc is not None else sm12x_gpus()
    if to_cc is AUTO or found is not None:  # given auto, or SM12x GPUs here: proved for them
        if from_cc is not None:
            raise BadInput(None, "--to-cc auto checks each GPU's key against the project's own --from-cc: give no --from-cc")
        return verify_auto(targets(path, python, project).found, fixes, named=tuple(fix_names), m=found)
    check_cc(from_cc, to_cc, project)
    named = tuple(fix_names) if fix_names else (() if all_fixes else None)
    given = targets(path, python, project)
    done = run_each("verify", given, lambda p, name, i: command(p, from_cc, to_cc, name, fixes, i, named), judged=True)
    if given.env is None:
        return done
    from patchkit.commands.settings import verify_settings  # --python: the settings its releases need, too

    settings = verify_settings(given.env, to_cc)
    return done._replace(results=done.results + (settings,)) if settings.judged else done


@cli.command(short_help="Restore the exact original bytes.")
@PATH_ARG
@click.option("--force", is_flag=True, help="Restore the originals even over files edited after apply (keeping a copy).")
@DRY_RUN_OPT
@PATCHES_OPT
@click.option("--to-cc", type=CCType(), default=None,
              help=f"Revert only if what is applied adds this cc ({CC_HELP}); else refuse, nothing written "
                   "[default: whatever is applied].")
@python_opt("Revert")
@PROJECT_OPT
@JSON_OPT
def revert(path, force, dry_run, patches, to_cc, python, project, as_json):
    """Restore the exact original bytes at PATH."""
    from patchkit.commands.revert import ForceRefused, applied_for
    from patchkit.commands.revert import revert as command

    given = targets(path, python, project)
    try:
        if to_cc is not None:  # every target checked before the first is written
            for p, name, i in given.found:
                applied_for(p, to_cc, name, i)
        return run_each("revert", given, lambda p, name, i: command(p, force, dry_run, patches, name, i, to_cc=to_cc))
    except ForceRefused as exc:  # its line starts with how the state is another release's
        from patchkit.render.reasons import said

        raise Refused(exc.path, f"{said(exc.changed)}: {exc.reason}") from None


@cli.command(short_help="Show version, patch, files and bytecode.")
@PATH_ARG
@PATCHES_OPT
@click.option("--to-cc", type=CCType(), default=None,
              help=f"Also say whether what is applied adds this cc, as each project keys it ({CC_HELP}).")
@python_opt("Show")
@PROJECT_OPT
@JSON_OPT
def status(path, patches, to_cc, python, project, as_json):
    """Version, applied patch, files, bytecode and pending work at PATH."""
    from patchkit.commands.status import status as command

    return run_each("status", targets(path, python, project), lambda p, name, i: command(p, patches, name, i, to_cc=to_cc))


@cli.command(short_help="Make a branch, mboxes and PR.md, one commit per fix.")
@click.argument("path", type=click.Path(path_type=Path), default=".", required=False)
@click.option("--branch", default=None, help="Branch to create [default: patchkit/sm<to_cc>0-<the fixes>, made unique].")
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("upstream"), show_default=True,
    help="Folder to write the mboxes and PR.md into.",
)
@FROM_CC_OPT
@TO_CC_OPT
@click.option("--dry-run", is_flag=True, help="Print the commit message and PR.md; change nothing.")
@TEMPLATES_OPT
@PATCHES_OPT
@FIX_OPT
@ALL_FIXES_OPT
@JSON_OPT
def upstream(path, branch, out, from_cc, to_cc, dry_run, templates, patches, fix_names, all_fixes, as_json):
    """Make a branch with one commit per fix (default: the fixes on by default), an mbox per
    commit and PR.md, to send the fixes upstream."""
    from patchkit.commands.upstream import upstream as command

    check_cc(from_cc, to_cc, None)
    check_out(out)
    return command(path, branch, out, from_cc, to_cc, dry_run, templates, patches, choose_fixes(fix_names, all_fixes))


@cli.command("fixes", short_help="List the fixes, their rules and the releases they patch.")
@PATCHES_OPT
@JSON_OPT
def list_fixes(patches, as_json):
    """Every fix: on by default or opt-in (--fix NAME), its rules, and the releases its shipped patches cover."""
    from patchkit.commands.fixes import fixes as command

    return command(patches)


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
def scan(path, cc, from_cc, unaware_only, repo, tags, as_json, markdown):
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


@cli.command(short_help="Find the failures patchkit knows in a server's log.")
@click.argument("logs", nargs=-1, metavar="[LOG]...")
@click.option("--python", "python", default=None, metavar="EXE",
              help="The interpreter the server ran: a missing kernel image names its shared objects without code for the GPUs "
                   "[default: the site-packages folder of the traceback's frames].")
@JSON_OPT
def diagnose(logs, python, as_json):
    """Read each LOG (- or none: standard input) in one pass and name every failure patchkit
    knows in it: where, what failed, the fix and the `patchkit apply` that applies it
    (exit 1 if one was found, 0 if none)."""
    from patchkit.commands.diagnose import diagnose as command

    return command(list(logs), python=python)


@cli.command(short_help="Follow a server's log until it is ready, crashes or times out.")
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--timeout", default=None, metavar="SECONDS",
              help="Give up after this long, a finite number of seconds above 0 (exit 124) [default: wait].")
@JSON_OPT
def watch(log, timeout, as_json):
    """Follow LOG as the server writes it (it may not exist yet, or start over; a FIFO is read
    without waiting): exit 0 at the ready line of the project the log is of, 1 with the
    diagnosis at a crash, 124 at the time-out.  Starts, signals and kills nothing."""
    from patchkit.commands.watch import seconds
    from patchkit.commands.watch import watch as command

    timeout = seconds(timeout)  # checked before anything is read: nan, inf, 0 and -1 are one line, exit 2

    def progress(event) -> None:  # on a terminal only
        from patchkit.render.watch import progress_line

        click.echo(progress_line(event), err=True)

    return command(log, timeout, progress if sys.stderr.isatty() and not as_json else None)


@cli.command(short_help="Which GPUs the compiled CUDA code of shared objects can run on.")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path), metavar="[PATH]...")
@click.option("--python", "python", default=None, metavar="EXE",
              help="Every distribution installed for this interpreter whose shared objects carry CUDA code (instead of PATH).")
@click.option("--to-cc", "to_cc", type=CCType(auto=True), multiple=True,
              help="Judge for a GPU of this compute capability (repeatable); auto: this machine's GPUs (nvidia-smi) "
                   "[default: the GPUs of nvidia-smi when it is on PATH and answers, else no verdict].")
@JSON_OPT
def kernels(paths, python, to_cc, as_json):
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


@cli.command(short_help="What the fixes do on this machine's GPUs; what is missing.")
@PATH_ARG
@python_opt("Judge the fixes for")
@PROJECT_OPT
@click.option("--to-cc", type=CCType(auto=True), default=AUTO.value, show_default=True, metavar="CC|auto",
              help="The GPUs to judge for: auto (those nvidia-smi shows), or a compute capability (12, 12.0, 12.1) "
                   "judged as given, with no GPU needed (an image build has none).")
@JSON_OPT
def doctor(path, python, project, to_cc, as_json):
    """The GPUs (nvidia-smi), how they are linked, the projects at PATH (default: here) or
    installed for --python, each fix: needed here or not, applied or not, and what it does
    on this machine.  Read only.  Exit 1 when something this machine needs is missing; with
    no GPU seen and no --to-cc, the projects and fixes are still shown, and the exit is 2."""
    from patchkit.commands.doctor import apply_target
    from patchkit.commands.doctor import doctor as command

    given = targets(path, python, project)
    return command(given.found, apply_target(path, python), given.env, to_cc=None if to_cc is AUTO else to_cc)


def main() -> None:
    from patchkit.cli.boundary import last_resort

    last_resort(lambda: cli(prog_name="patchkit"))
