"""``python -m patchkit`` and the ``patchkit`` command (``main``).

Ctrl-C is handled from here on, before the command line's imports (until here, by the handler
``patchkit/__init__.py`` installs as its first statement): SIGINT raises ``errors.Interrupted``
wherever patchkit is (the child processes it runs are ended on the way out), and ``cli.boundary.last_resort`` prints ``patchkit: interrupted`` and exits 130.
When the command has ended, the process ends without taking the interpreter apart (``_end``).
"""

import gc
import os
import sys

from patchkit.errors import INTERRUPTED, SOFTWARE, Interrupted, catch_sigint, settle_interrupts, unexpected

catch_sigint()


def main() -> None:
    # The command line's imports make thousands of objects that live as long as the process and
    # no garbage: no collection runs while they are made, and none looks at them again (a tenth
    # of the start-up's time, measured with `python -X importtime` and instruction counts).
    gc.disable()
    try:
        _import_pathlib()
        from patchkit.cli import main as run
        from patchkit.cli import preload

        preload(sys.argv[1:])  # the module of the command named: its imports too
    except Interrupted:  # while the command line is imported
        _leave("interrupted", INTERRUPTED)
    except Exception as exc:  # a broken install
        _leave(unexpected(exc), SOFTWARE)
    finally:
        gc.freeze()
        # The command's own work makes few cycles, and the process ends soon: a collection every
        # 10,000 new objects, not every 700, is enough (a few % of apply's instructions).
        gc.set_threshold(10_000, 10, 10)
        gc.enable()
    _end(run)


def _import_pathlib() -> None:
    """Import pathlib without urllib.parse.  pathlib imports urllib.parse (and it ipaddress) for
    one function, ``quote_from_bytes``, which only ``Path.as_uri`` calls and patchkit never does:
    that import is about 3% of apply's time (``python -X importtime``; an A/B of whole processes).
    While pathlib is imported, ``urllib.parse`` is a stand-in whose ``quote_from_bytes`` imports
    the real module when it is first called; the stand-in is gone once pathlib is in, so any other
    import of ``urllib.parse`` gets the real module.  A Python whose pathlib asks urllib.parse for
    more than that imports both as ever."""
    if "pathlib" in sys.modules or "urllib.parse" in sys.modules:
        return
    stand_in = type(sys)("urllib.parse")

    def quote_from_bytes(*args, **kwargs):
        from urllib.parse import quote_from_bytes as real

        return real(*args, **kwargs)

    stand_in.quote_from_bytes = quote_from_bytes
    sys.modules["urllib.parse"] = stand_in
    try:
        import pathlib  # noqa: F401
    except ImportError:  # it asked for more than quote_from_bytes
        pass
    finally:
        if sys.modules.get("urllib.parse") is stand_in:
            del sys.modules["urllib.parse"]
    import pathlib  # noqa: F401,F811  (where the stand-in was not enough)


def _end(run) -> None:
    """Run the command line, then end the process with its exit code once stdout and stderr are
    flushed, without tearing the interpreter down: every file patchkit wrote is closed by then,
    no thread, child process or exit handler of patchkit's is left, and freeing every module and
    object one by one costs a few % of a command's instructions.  Where any of that is not so
    (an exit that is not a code, a thread, a pipe closed under stdout) Python ends it as ever."""
    try:
        try:
            run()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
        settle_interrupts()
        threads = sys.modules.get("threading")
        if not isinstance(code, int) or threads is not None and threads.active_count() > 1:
            sys.exit(code)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed pipe or stream: Python says so, as it would have
            sys.exit(code)
    except Interrupted:  # a Ctrl-C after the command's work, while it ends: as every Ctrl-C
        _leave("interrupted", INTERRUPTED)
    os._exit(code)


def _leave(line: str, code: int) -> None:
    sys.stderr.write(f"patchkit: {line}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
