"""Tracebacks read line by line from real text: chains, headers, the exception's message lines,
the logging module's own, and bounded frames."""

from __future__ import annotations

from logs import real_text as r

from patchkit.logs.tracebacks import HEAD_FRAMES, TAIL_FRAMES, Frame, TracebackReader


def read_all(lines: list[str]):
    reader, ended = TracebackReader(), []
    for number, text in enumerate(lines, 1):
        tb = reader.feed(number, text)
        if tb is not None:
            ended.append(tb)
    tb = reader.finish()
    return ended + ([tb] if tb is not None else [])


def test_a_scheduler_exception() -> None:
    [tb] = read_all(r.START + r.KEYERROR + [r.CHILD_FAILED])
    assert (tb.line, tb.header) == (len(r.START) + 1, "[2026-02-11 10:03:02 TP3] Scheduler hit an exception: ")
    [part] = tb.parts
    assert part.exception == "KeyError: 12"
    assert part.frames[0] == Frame("/root/sglang/python/sglang/srt/managers/scheduler.py", 3130, "run_scheduler_process")
    assert part.frames[-1] == Frame("/root/sglang/python/sglang/srt/distributed/device_communicators/torch_symm_mem.py", 83, "__init__")
    assert len(part.frames) == 11 and not tb.logging_error


def test_a_chain_and_a_message_of_several_lines() -> None:
    [tb] = read_all(r.FUSION + [r.CHILD_FAILED])
    first, second = tb.parts
    assert first.exception == "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
    assert first.frames[-1].path.endswith("/flashinfer/compilation_context.py")
    assert second.exception.splitlines() == [
        "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10].",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "3. disable torch compile by not using --enable-torch-compile",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    ]
    assert tb.last == "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10]."


def test_an_uncaught_chain_of_three() -> None:
    [tb] = read_all(r.LOGGING_TAIL)
    reentrant = "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>"
    assert [p.exception for p in tb.parts] == ["EOFError", reentrant, reentrant]
    assert tb.header == "" and tb.parts[2].frames[0] == Frame("<frozen runpy>", 198, "_run_module_as_main")


def test_the_logging_modules_own() -> None:
    [tb] = read_all(["--- Logging error ---"] + r.LOGGING_TAIL[13:17] + ["Call stack:", '  File "x.py", line 1, in <module>'])
    assert tb.logging_error and tb.last == "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>"


def test_two_tracebacks_back_to_back() -> None:
    one, two = read_all(r.KEYERROR[:-1] + r.UNRELATED)
    assert (one.last, two.last) == ("KeyError: 12", "KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'")


def test_a_process_prefix_on_every_line() -> None:
    prefix = "(EngineCore pid=1128) "  # a process's prefix, as vLLM's multiprocess output has it (vLLM issue 45604)
    [tb] = read_all([prefix + "Traceback (most recent call last):"] + [prefix + line for line in r.KEYERROR[1:-1]])
    assert tb.last == "KeyError: 12" and len(tb.parts[0].frames) == 11


def test_frames_are_bounded() -> None:
    frame = '  File "/x/recurse.py", line {}, in f'
    lines = ["Traceback (most recent call last):"] + [frame.format(i) for i in range(1, 1001)] + ["RecursionError: maximum recursion depth exceeded"]
    [tb] = read_all(lines)
    frames = tb.parts[0].frames
    assert len(frames) == HEAD_FRAMES + TAIL_FRAMES
    assert [f.line for f in frames] == list(range(1, HEAD_FRAMES + 1)) + list(range(1001 - TAIL_FRAMES, 1001))


def test_a_logger_prefix_on_every_line_of_the_traceback() -> None:
    """vLLM's engine core logs a traceback with its record's prefix on every line, after the process's own
    (lines as opendatalab/MinerU#4350 posted them, a DGX Spark's Triton refusing sm_121a): the frames and the
    exception are read under both prefixes."""
    prefix = "(EngineCore_DP0 pid=60) ERROR 01-12 01:09:14 [core.py:708] "
    lines = [prefix + line for line in (
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/triton/backends/nvidia/compiler.py", line 442, in make_cubin',
        '    raise PTXASError(f"{error}\\n"',
        "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error")]
    reader = TracebackReader()
    assert [reader.feed(n, text) for n, text in enumerate(lines, 1)] == [None] * 4
    tb = reader.finish()
    (part,) = tb.parts
    assert (tb.header, part.line, part.exception) == (
        "ERROR 01-12 01:09:14 [core.py:708] ", 4, "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error")
    assert [(f.path, f.line, f.func) for f in part.frames] == [
        ("/usr/local/lib/python3.12/dist-packages/triton/backends/nvidia/compiler.py", 442, "make_cubin")]
