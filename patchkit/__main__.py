"""``python -m patchkit`` and the ``patchkit`` command (``main``).

Ctrl-C is handled from here on, before the command line's imports (until here, by the handler
``patchkit/__init__.py`` installs as its first statement): SIGINT raises ``errors.Interrupted``
wherever patchkit is (the child processes it runs are ended on the way out), and ``cli.boundary.last_resort`` prints ``patchkit: interrupted`` and exits 130.
"""

import gc
import signal
import sys
from typing import TYPE_CHECKING

from patchkit.errors import INTERRUPTED, SOFTWARE, Interrupted, PatchkitError, interrupt_in, unexpected
from patchkit.signals import catch_sigint, settle_interrupts

if TYPE_CHECKING:
    from collections.abc import Callable

catch_sigint()


def main() -> None:
    # The command line's imports make thousands of objects that live as long as the process and
    # no garbage: no collection runs while they are made (from patchkit's first statement, when it
    # runs as the command), and none looks at them again (a tenth of the start-up's time, measured
    # with `python -X importtime` and instruction counts).
    gc.disable()
    try:
        from patchkit.cli import main as run
        from patchkit.cli import preload

        preload(sys.argv[1:])  # the module of the command named: its imports too
    except Interrupted:  # while the command line is imported
        _leave("interrupted", INTERRUPTED)
    except PatchkitError as exc:  # patchkit's own data, unreadable (a broken install): its one line
        _leave(str(exc), exc.exit_code)
    except Exception as exc:  # a broken install, or a Ctrl-C Python wrapped (a class made at that instant)
        if interrupt_in(exc) is not None:
            _leave("interrupted", INTERRUPTED)
        _leave(unexpected(exc), SOFTWARE)
    finally:
        gc.freeze()
        # The command's own work makes few cycles, and the process ends soon: a collection every
        # 10,000 new objects, not every 700, is enough (a few % of apply's instructions).
        gc.set_threshold(10_000, 10, 10)
        gc.enable()
    _end(run)


def _end(run: "Callable[[], object]") -> None:
    """Run the command line and exit with its code.  A Ctrl-C after the command's work, while its
    output is flushed, is one more Ctrl-C (exit 130); once the output is out, the command's exit code
    stands, and Python ends the process as ever."""
    try:
        try:
            run()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
        settle_interrupts()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except Interrupted:
        _leave("interrupted", INTERRUPTED)
    except (OSError, ValueError):  # a closed pipe or stream: Python says so, as it would have
        pass
    sys.exit(code)


def _leave(line: str, code: int) -> None:
    sys.stderr.write(f"patchkit: {line}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
