"""patchkit: generate, apply, verify, revert and upstream the source patches that let SGLang,
FlashInfer and vLLM run on NVIDIA's Blackwell workstation GPUs (compute capability 12.0, SM120:
RTX PRO 6000; 12.1, SM121: DGX Spark GB10), and say what a machine's GPUs, a server's log and
an environment's compiled kernels need."""

# The first thing patchkit does, when it runs as the command: from here on Ctrl-C is
# "patchkit: interrupted" and exit 130, patchkit's own imports included (docs/REFERENCE.md, "Exit
# codes"); ``patchkit.__main__`` then installs the command's own handler (``signals.catch_sigint``).
# A program that imports patchkit (the tests, a build backend) keeps its own Ctrl-C.
try:
    import os as _os
    import sys as _sys

    def _interrupted_at_start(signum: int | None, frame: object) -> None:  # frame: unused
        """Ctrl-C before ``patchkit.__main__`` installed its handler: nothing has begun, nothing is
        left to end."""
        _os.write(2, b"patchkit: interrupted\n")
        _os._exit(130)

    def _is_the_command() -> bool:
        """Whether this process is the ``patchkit`` command (its script, or ``python -m patchkit``)."""
        argv = getattr(_sys, "orig_argv", _sys.argv)
        if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "patchkit" or "-mpatchkit" in argv:
            return True
        return "-m" in argv and argv[argv.index("-m") + 1:argv.index("-m") + 2] == ["patchkit"]

    def _unraisable_at_start(unraisable: "_sys.UnraisableHookArgs") -> None:  # quoted: a name for type checkers only
        """Ctrl-C inside a callback Python runs on its own while this module imports (importlib's
        module-lock weakref): Python would print "Exception ignored in ..." and go on."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _interrupted_at_start(None, None)
        _sys.__unraisablehook__(unraisable)

    if _is_the_command():
        import gc as _gc

        # The command line's imports make thousands of objects that live as long as the process and
        # no garbage: no collection runs while they are made (``patchkit.__main__.main`` freezes them
        # and turns collection back on before the command's work).
        _gc.disable()
        _sys.unraisablehook = _unraisable_at_start
        import signal as _signal

        _signal.signal(_signal.SIGINT, _interrupted_at_start)
except KeyboardInterrupt:  # before the handler was in place
    import os as _os
    import sys as _sys

    if _is_the_command() if "_is_the_command" in globals() else "patchkit" in str(getattr(_sys, "orig_argv", _sys.argv)):
        _os.write(2, b"patchkit: interrupted\n")
        _os._exit(130)
    raise

__version__ = "0.1.0"
