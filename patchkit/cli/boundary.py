"""The one error boundary of the command line, and where a command's result is printed.

A PatchkitError becomes one line on stderr and its documented exit code, an OSError one
line naming its file and exit 2, any other exception (MemoryError and RecursionError
included) one line asking for a report and exit 70, and Ctrl-C ``patchkit: interrupted``
and exit 130; with ``--json`` each also prints an error document on stdout, and a click
usage error given with ``--json`` gets the same document.  A value an option's type refuses
with a PatchkitError (a cc NVIDIA has none of) is its one line too, while click parses.
``last_resort`` holds the whole command line, click's parsing included, never click's
"Aborted!" nor a traceback.
A result that fails although it has something to say (doctor with no GPU) prints its lines,
then its ``render.failure`` line on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any, NoReturn

import click

from patchkit.errors import BAD_INPUT, INTERRUPTED, SOFTWARE, Interrupted, PatchkitError, interrupt_in, unexpected
from patchkit.signals import catch_sigint

if TYPE_CHECKING:
    from patchkit.report import Result


def _head(command: str | None, exit_code: int) -> dict[str, object]:
    """What every --json document starts with: the version of its shape (``render.SCHEMA``), the
    command, whether it succeeded and the exit code the process exits with."""
    from patchkit.render import SCHEMA

    return {"schema": SCHEMA, "command": command, "ok": exit_code == 0, "exit_code": exit_code}


def error_document(command: str | None, exit_code: int, error: str, path: str | None) -> str:
    """What ``--json`` prints on stdout when a command fails."""
    return json.dumps({**_head(command, exit_code), "error": error, "path": path}, indent=2)


def envelope(command: str | None, result: Result) -> dict[str, object]:
    """Every --json document: the envelope (``_head``), then the command's own fields
    (``render.document``).  The envelope's fields are the envelope's: a document that holds one
    of them with another value is a bug (a ValueError), never overwritten."""
    from patchkit.render import document

    head = _head(command, result.exit_code)
    data = document(result)
    clash = [key for key in head if key in data and data[key] != head[key]]
    if clash:
        raise ValueError(f"the --json document of {command} has its own {', '.join(clash)}")
    return {**head, **{key: value for key, value in data.items() if key not in head}}


def fail(command: str | None, as_json: bool, exc: PatchkitError, exit_code: int) -> NoReturn:
    """One line on stderr (and the error document with --json), then exit."""
    click.echo(f"patchkit: {exc}", err=True)
    if as_json:
        click.echo(error_document(command, exit_code, str(exc), exc.path))
    sys.exit(exit_code)


class Command(click.Command):
    """A patchkit command: its callback returns a result (``patchkit.report``), printed here
    as ``render.text`` or, with --json, in the envelope; failures end here."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = args[: args.index("--")] if "--" in args else list(args)  # click consumes args
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # click prints it on stderr and exits 2
            if "--json" in given:
                click.echo(error_document(self.name, exc.exit_code, exc.format_message(), None))
            raise
        except PatchkitError as exc:  # a value its option's type refuses in one line (a cc NVIDIA has none of)
            fail(self.name, "--json" in given, exc, exc.exit_code)

    def invoke(self, ctx: click.Context) -> NoReturn:
        as_json = bool(ctx.params.get("as_json"))
        try:
            result = super().invoke(ctx)
        except PatchkitError as exc:
            fail(self.name, as_json, exc, exc.exit_code)
        except OSError as exc:
            where = str(exc.filename) if exc.filename is not None else None
            fail(self.name, as_json, PatchkitError(where, exc.strerror or str(exc)), BAD_INPUT)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            stop = interrupt_in(exc)  # a Ctrl-C Python wrapped (a class made at that instant)
            if stop is not None:
                fail(self.name, as_json, PatchkitError(None, _interrupted(stop)), INTERRUPTED)
            fail(self.name, as_json, PatchkitError(None, unexpected(exc)), SOFTWARE)
        except (Interrupted, KeyboardInterrupt) as exc:
            fail(self.name, as_json, PatchkitError(None, _interrupted(exc)), INTERRUPTED)
        from patchkit.render import failure, text  # places in files: grouped on a terminal, path:line: when piped

        if as_json:
            click.echo(json.dumps(envelope(self.name, result), indent=2, default=str))
        else:
            for line in text(result, sys.stdout.isatty()):
                click.echo(line)
        still = failure(result)
        if still:  # a result printed, and still a failure: its line, as every failure's
            click.echo(f"patchkit: {still}", err=True)
        sys.exit(result.exit_code)


class Group(click.Group):
    """The command line: each command is defined by its module (``lazy``: the command's name and
    its module), imported when the command line names it; ``commands`` (``--help``, a name that
    is none) imports them all."""

    command_class = Command

    def __init__(self, name: str | None = None, commands: MutableMapping[str, click.Command] | Sequence[click.Command] | None = None,
                 *, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:  # Any: the rest of click.Group's own
        self._lazy = dict(lazy or {})
        super().__init__(name, commands, **kwargs)

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        for name in self._lazy:
            self._define(name)
        return self._commands

    @commands.setter
    def commands(self, commands: MutableMapping[str, click.Command]) -> None:  # click.Group.__init__ sets it
        self._commands = commands

    def _define(self, name: str) -> None:
        if name not in self._commands and name in self._lazy:
            import_module(self._lazy[name])

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """As click's, into the commands defined so far: a module that defines one defines no other."""
        name = name or cmd.name
        if name is None:
            raise TypeError("Command has no name.")
        self._commands[name] = cmd

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._define(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._lazy, *self._commands})


def last_resort(run: Callable[[], object]) -> NoReturn:
    """Run the command line; whatever escapes it (an interrupt, or an exception outside a
    command: parsing, dispatch) is one line and its exit code."""
    catch_sigint()  # (again: a caller that did not come through __main__)
    try:
        run()
    except (Interrupted, KeyboardInterrupt) as exc:
        click.echo(f"patchkit: {_interrupted(exc)}", err=True)
        sys.exit(INTERRUPTED)
    except Exception as exc:
        stop = interrupt_in(exc)  # a Ctrl-C Python wrapped (a class made at that instant)
        if stop is not None:
            click.echo(f"patchkit: {_interrupted(stop)}", err=True)
            sys.exit(INTERRUPTED)
        click.echo(f"patchkit: {unexpected(exc)}", err=True)
        sys.exit(SOFTWARE)
    sys.exit(0)


def _interrupted(exc: BaseException) -> str:
    detail = getattr(exc, "detail", "")
    return f"interrupted: {detail}" if detail else "interrupted"
