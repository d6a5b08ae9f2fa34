"""patchkit diagnose: the failures patchkit knows, found in real logs, and nothing else claimed."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from logs import real_text as r

from patchkit.errors import BAD_INPUT, OK, PROBLEMS
from support.cli import PROCESS_ENV, invoke, run_cli
from support.repos import ROOT

FIXTURE = ROOT / "tests" / "logs" / "data" / "h200-sglang-0.5.9-flashinfer-0.6.4.log"
KEYERROR_LOG = (r.START, r.LOAD, r.KEYERROR, r.CHILD_FAILED, r.LOGGING_TAIL)
TRACEBACK_AT = len(r.START) + len(r.LOAD) + 1  # the KeyError's traceback starts here
KEYERROR_AT = TRACEBACK_AT + r.KEYERROR.index("KeyError: 12")  # and says "KeyError: 12" here: a finding's line
SYMM_MEM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"


# The failure mode the fix is a way out of (patchkit/fixes/modes/26-torch-symm-mem-keyerror.toml).
SYMM_MODE = "mode: torch-symm-mem-keyerror: SGLang's torch symmetric-memory all-reduce dies with KeyError: 12 (crash; 12.0 and 12.1)"


def keyerror_lines(label: str, at: int = KEYERROR_AT) -> list[str]:
    return [
        f"{label}:{at}: KeyError: 12 raised at /root/sglang/python/{SYMM_MEM}:83 (SGLang)",
        f"{label}:{at}: cause: TorchSymmMemCommunicator looks compute capability 12 up in its tables, which know 9 and 10"
        " (SGLang 0.5.4.post3 - 0.5.13.post1)",
        f"{label}:{at}: fix: torch-symm-mem: Add SM120 to the torch symm-mem all-reduce tables",
        f"{label}:{at}: run: patchkit apply /root/sglang",
        f"{label}:{at}: {SYMM_MODE}",
    ]


def write(tmp_path: Path, *parts, name: str = "server.log") -> Path:
    path = tmp_path / name
    path.write_bytes(r.log(*parts))
    return path


def test_the_cause_above_a_logging_traceback(tmp_path: Path) -> None:
    log = write(tmp_path, *KEYERROR_LOG)
    tail = log.read_text().splitlines()[-50:]
    assert "KeyError: 12" not in "\n".join(tail) and "logging/__init__.py" in "\n".join(tail)  # the tail misleads
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines() == keyerror_lines(str(log)) + [f"1 known SM120 failure in {log}"]
    assert done.stderr == b""


@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no file"])
def test_standard_input(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "patchkit", "diagnose", *args], input=r.log(*KEYERROR_LOG),
                          capture_output=True, env=dict(os.environ, **{k: v for k, v in PROCESS_ENV.items() if v}))
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines() == keyerror_lines("<stdin>") + ["1 known SM120 failure in <stdin>"]


def test_issue_15650_names_allreduce_fusion_and_flashinfer(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, r.CAPTURE, r.FUSION, r.CHILD_FAILED)
    at = len(r.START) + len(r.LOAD) + len(r.CAPTURE) + 1 + r.FUSION.index(
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10].")
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS
    assert done.stdout.decode().splitlines() == [
        f"{log}:{at}: RuntimeError: No supported CUDA architectures found for major versions [9, 10]. raised at"
        " /usr/local/lib/python3.12/dist-packages/flashinfer/compilation_context.py:62 (FlashInfer)",
        f"{log}:{at}: cause: FlashInfer's JIT builds the TRT-LLM all-reduce fusion module for majors 9 and 10 only,"
        " and it was asked for on SM120 (FlashInfer 0.5.0 - 0.6.16.post4)",
        f"{log}:{at}: fix: allreduce-fusion (opt-in): Allow the FlashInfer all-reduce fusion on SM120",
        f"{log}:{at}: run: patchkit apply --python /usr/bin/python3.12 --fix allreduce-fusion",
        f"{log}:{at}: {FUSION_MODE}",
        f"1 known SM120 failure in {log}",
    ]


ISSUE_15650 = ROOT / "tests" / "logs" / "data" / "sglang-issue-15650.log"
FUSION_CAUSE = ("cause: FlashInfer's JIT builds the TRT-LLM all-reduce fusion module for majors 9 and 10 only, and it was"
                " asked for on SM120 (FlashInfer 0.5.0 - 0.6.16.post4)")
FUSION_FIX = "fix: allreduce-fusion (opt-in): Allow the FlashInfer all-reduce fusion on SM120"
# The failure mode the fix is a way out of (patchkit/fixes/modes/22-flashinfer-jit-arch-list.toml).
FUSION_MODE = "mode: flashinfer-jit-arch-list: A FlashInfer JIT module's architecture list leaves out SM12x (crash; 12.0 and 12.1)"
RERAISED = "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10]."


def test_issue_15650_as_posted() -> None:
    """The thread's own lines: the exception line alone, no traceback (the log does not show the install)."""
    done = invoke("diagnose", str(ISSUE_15650))
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines() == [
        f"{ISSUE_15650}:2: {RERAISED}",
        f"{ISSUE_15650}:2: {FUSION_CAUSE}",
        f"{ISSUE_15650}:2: {FUSION_FIX}",
        f"{ISSUE_15650}:2: run: patchkit apply for the FlashInfer that wrote this log: the log does not show where it is"
        " (diagnose --python EXE, the server's Python, names the command)",
        f"{ISSUE_15650}:2: {FUSION_MODE}",
        f"1 known SM120 failure in {ISSUE_15650}",
    ]


def test_issue_15650_reraised_by_sglang_alone(tmp_path: Path) -> None:
    """The posted line as the exception of the traceback SGLang raises it in, with no FlashInfer frame: SGLang
    re-raises FlashInfer's message, and the fix patches both: it is still the fusion's failure."""
    log = write(tmp_path, r.START, r.LOAD, r.CAPTURE, r.FUSION_RERAISED, r.CHILD_FAILED)
    at = len(r.START) + len(r.LOAD) + len(r.CAPTURE) + 1 + r.FUSION_RERAISED.index(RERAISED)
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stdout
    assert done.stdout.decode().splitlines() == [
        f"{log}:{at}: {RERAISED} raised at"
        " /usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py:372 (SGLang)",
        f"{log}:{at}: {FUSION_CAUSE}",
        f"{log}:{at}: {FUSION_FIX}",
        f"{log}:{at}: run: patchkit apply --python /usr/bin/python3.12 --fix allreduce-fusion",
        f"{log}:{at}: {FUSION_MODE}",
        f"1 known SM120 failure in {log}",
    ]


def test_a_healthy_start_that_warned_about_multicast(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, r.MULTICAST, r.CAPTURE, r.CAPTURED, r.READY, r.ACCESS)
    at = len(r.START) + len(r.LOAD) + 1
    done = invoke("diagnose", str(log))
    assert done.returncode == OK
    assert done.stdout.decode().splitlines() == [
        f"{log}:{at}: TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.",
        f"{log}:{at}: means: these GPUs have no NVLink multicast (PCIe cards such as the RTX PRO 6000 have none): the torch"
        " symmetric-memory communicator turns itself off and all-reduce goes through the others; the server runs, and no"
        " patch changes this",
        f"{log}:{at}: seen 2 times: lines {at}, {at + 1}",
        f"no known SM120 failure in {log}; 1 warning explained",
    ]


def test_a_missing_kernel_image_names_the_package_and_offers_no_patch(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, r.CAPTURE, r.NO_KERNEL)
    at = len(r.START) + len(r.LOAD) + len(r.CAPTURE) + 1 + r.NO_KERNEL.index(
        "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device")
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS
    out = done.stdout.decode()
    assert out.splitlines() == [
        f"{log}:{at}: RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device"
        " raised at /opt/venv/lib/python3.11/site-packages/sgl_kernel/elementwise.py:45",
        f"{log}:{at}: cause: sgl_kernel was built without code for sm_120 (compute capability 12.0)",
        f"{log}:{at}: do: no source patch fixes this: install a sgl_kernel built for sm_120 (CUDA 12.8 or later), or build it"
        " from source with sm_120 in its architecture list",
        f"{log}:{at}: mode: prebuilt-no-sm12x: A prebuilt package carries no code for SM12x (crash; 12.0 and 12.1)",
        f"1 known SM120 failure in {log}",
    ]
    assert "patchkit apply" not in out


def test_an_unrelated_crash_is_not_claimed(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, r.UNRELATED, r.CHILD_FAILED)
    done = invoke("diagnose", str(log))
    assert done.returncode == OK
    lines = len(r.START) + len(r.LOAD) + len(r.UNRELATED) + 1
    assert done.stdout.decode().splitlines() == [f"nothing patchkit knows was found in {log} (1 traceback, {lines} lines read)"]


def test_binary_noise_and_broken_utf8(tmp_path: Path) -> None:
    noise = bytes(range(256)) * 3 + b"\xff\xfe\xc3\x28 \xe2\x82\n\x00\x00\r\n\x80abc\n"
    log = tmp_path / "noisy.log"
    log.write_bytes(noise + r.log(*KEYERROR_LOG) + noise)
    before = noise.count(b"\n")
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines() == keyerror_lines(str(log), KEYERROR_AT + before) + [f"1 known SM120 failure in {log}"]
    assert done.stderr == b""


def test_the_real_gpu_run(tmp_path: Path) -> None:
    done = invoke("diagnose", str(FIXTURE))
    assert done.returncode == PROBLEMS
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{FIXTURE}:9: KeyError: 12 raised at /tmp/u/torch_symm_mem.py:83 (SGLang)"  # the exception's line
    # The frames are in /tmp/u (the file was run from there): no checkout or environment to name, and no
    # placeholder command (it said "run: patchkit apply PATH (the checkout that wrote this log), ...").
    assert lines[3] == (f"{FIXTURE}:9: run: patchkit apply for the SGLang that wrote this log: the log does not show "
                        "where it is (diagnose --python EXE, the server's Python, names the command)")
    assert lines[4] == f"{FIXTURE}:9: {SYMM_MODE}"
    assert lines[5].startswith(f"{FIXTURE}:13: WARNING sglang.srt.distributed.device_communicators.torch_symm_mem: "
                               "TorchSymmMemCommunicator: World size 1 not supported")
    assert lines[7] == f"{FIXTURE}:16: gen_trtllm_comm_module: RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
    assert lines[-1] == f"2 known SM120 failures in {FIXTURE}; 1 warning explained"


def test_json_is_one_document(tmp_path: Path) -> None:
    log = write(tmp_path, *KEYERROR_LOG)
    done = invoke("diagnose", str(log), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == PROBLEMS
    assert (doc["command"], doc["failures"], doc["effects"]) == ("diagnose", 1, 0)
    [entry] = doc["logs"]
    assert (entry["log"], entry["tracebacks"]) == (str(log), 2)
    [finding] = entry["findings"]
    assert finding == {
        "kind": "fix", "name": "torch-symm-mem", "line": KEYERROR_AT, "traceback_line": TRACEBACK_AT, "lines": [KEYERROR_AT],
        "count": 1, "what": "KeyError: 12",
        "file": f"/root/sglang/python/{SYMM_MEM}", "file_line": 83, "function": "__init__", "project": "sglang",
        "releases": "0.5.4.post3 - 0.5.13.post1",
        "cause": "TorchSymmMemCommunicator looks compute capability 12 up in its tables, which know 9 and 10",
        "advice": None, "commands": ["patchkit apply /root/sglang"], "mode": "torch-symm-mem-keyerror",
        "started_after": False,  # no ready line after it: the server did not start
        "applied_now": False,  # its frames are not on this machine
    }


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_a_log_that_cannot_be_read(tmp_path: Path, make: str) -> None:
    log = tmp_path / "server.log"
    if make == "directory":
        log.mkdir()
    done = run_cli("diagnose", str(log))
    reason = "no such file" if make == "missing" else "is a directory, not a log file"
    assert (done.returncode, done.stdout, done.stderr.decode()) == (BAD_INPUT, b"", f"patchkit: {log}: {reason}\n")


def test_grouped_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the places are grouped under the log's name (ripgrep's headings)."""
    log = write(tmp_path, *KEYERROR_LOG)
    main, child = pty.openpty()
    env = dict(os.environ, **{k: v for k, v in PROCESS_ENV.items() if v})
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", "diagnose", str(log)], stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal closed: the process is done writing
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(timeout=60) == PROBLEMS
    assert out.decode().replace("\r\n", "\n").splitlines() == [
        str(log),
        f"  {KEYERROR_AT}: KeyError: 12 raised at /root/sglang/python/{SYMM_MEM}:83 (SGLang)",
        *("      " + line.split(": ", 1)[1] for line in keyerror_lines(str(log))[1:]),
        f"1 known SM120 failure in {log}",
    ]


def test_a_finding_points_at_the_exception_line(tmp_path: Path) -> None:
    """``log:line:`` is the line that says ``KeyError: 12`` (an editor opens the log there), not the
    traceback's first line, which --json keeps as ``traceback_line``; in a chain, the line of the
    part that matched (FlashInfer's RuntimeError, not SGLang's ``Exception: Capture cuda graph failed``)."""
    log = write(tmp_path, *KEYERROR_LOG)
    lines = log.read_text().splitlines()
    assert lines[KEYERROR_AT - 1] == "KeyError: 12" and lines[TRACEBACK_AT - 1].endswith("Traceback (most recent call last):")
    done = invoke("diagnose", str(log))
    assert {line.split(": ", 1)[0] for line in done.stdout.decode().splitlines()[:-1]} == {f"{log}:{KEYERROR_AT}"}
    [finding] = json.loads(invoke("diagnose", str(log), "--json").stdout)["logs"][0]["findings"]
    assert (finding["line"], finding["traceback_line"]) == (KEYERROR_AT, TRACEBACK_AT)

    log = write(tmp_path, r.START, r.FUSION, name="fusion.log")
    at = len(r.START) + 1 + r.FUSION.index("RuntimeError: No supported CUDA architectures found for major versions [9, 10].")
    [finding] = json.loads(invoke("diagnose", str(log), "--json").stdout)["logs"][0]["findings"]
    assert (finding["line"], finding["traceback_line"]) == (at, len(r.START) + 1)


def test_a_warning_the_server_was_ready_after_is_a_start_not_a_failure(tmp_path: Path) -> None:
    """SGLang 0.5.14+ warn that the communicator is off (torch_symm_mem.py) and go on: with the ready line
    after the warning the start succeeded (exit 0, said as such); without it the warning stays a finding."""
    log = write(tmp_path, r.START, r.CAPABILITY_OFF, r.LOAD, r.READY)
    at = len(r.START) + 1
    ready = at + len(r.LOAD) + 1
    done = invoke("diagnose", str(log))
    assert (done.returncode, done.stderr) == (OK, b"")
    assert done.stdout.decode().splitlines()[3:] == [
        f"{log}:{at}: started: the server was ready at line {ready}, after this warning: it did not stop the start; "
        "whether this machine needs torch-symm-mem: patchkit doctor",
        f"no known SM120 failure in {log}; 1 warning explained"]
    doc = json.loads(invoke("diagnose", str(log), "--json").stdout)
    assert (doc["ok"], doc["exit_code"], doc["failures"], doc["effects"]) == (True, OK, 0, 1)
    [f] = doc["logs"][0]["findings"]
    assert (doc["logs"][0]["ready_line"], f["name"], f["line"], f["started_after"]) == (ready, "torch-symm-mem", at, True)

    cut = write(tmp_path, r.START, r.CAPABILITY_OFF, r.LOAD, name="cut.log")
    done = invoke("diagnose", str(cut), "--python", sys.executable)
    assert done.returncode == PROBLEMS
    assert done.stdout.decode().splitlines()[3:] == [f"{cut}:{at}: run: patchkit apply --python {sys.executable}",
                                                     f"1 known SM120 failure in {cut}"]


# ptxas's own line as Triton 3.5's bundled ptxas prints it for a GB10 (shared fixture triton-ptxas-sm_121a.txt), and
# Triton 3.5.1's make_cubin raising around it (triton/backends/nvidia/compiler.py line 503 in the 3.5.1 wheel).
PTXAS_LINE = "  ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'"
PTXAS_ERROR = ["Traceback (most recent call last):",
               '  File "/opt/gb 10/lib/python3.12/site-packages/triton/backends/nvidia/compiler.py", line 503, in make_cubin',
               "    raise PTXASError(error)",
               "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error"]


def test_the_ptxas_advice_names_the_python_given_and_the_gb10(tmp_path: Path) -> None:
    """diagnose --python: the doctor command in the advice is that interpreter's, not a placeholder; the
    failure is a 12.1 GPU's (sm_121a), and the summary says so."""
    log = write(tmp_path, [PTXAS_LINE])
    python = str(ROOT / ".venv" / "bin" / "python")
    done = invoke("diagnose", str(log), "--python", python)
    assert done.returncode == PROBLEMS, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[2].endswith(f"`patchkit doctor --python {python} --to-cc 12.1` prints the line for the Triton installed")
    assert "PY" not in lines[2].split()
    assert lines[-1] == f"1 known SM121 failure in {log}"
    assert invoke("diagnose", str(log)).stdout.decode().splitlines()[2].endswith(
        "`patchkit doctor --python EXE --to-cc 12.1` prints the line for the Triton installed")


def test_the_ptxas_advice_names_the_python_the_frames_ran(tmp_path: Path) -> None:
    """No --python: the interpreter of the environment whose Triton raised it, shell-quoted (as apply's advice)."""
    log = write(tmp_path, PTXAS_ERROR)
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines()[2] == (
        f"{log}:4: do: on a GB10: point Triton at a ptxas of CUDA 12.9 or later (TRITON_PTXAS_PATH for Triton 3.4/3.5,"
        " TRITON_PTXAS-BLACKWELL_PATH for 3.3), or upgrade to Triton 3.6;"
        " `patchkit doctor --python '/opt/gb 10/bin/python' --to-cc 12.1` prints the line")


def test_an_sm121_failure_beside_an_sm12x_one_is_summed_as_sm12x(tmp_path: Path) -> None:
    log = write(tmp_path, r.START, r.LOAD, r.KEYERROR, PTXAS_LINE)
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS
    assert done.stdout.decode().splitlines()[-1] == f"2 known SM12x failures in {log}"


def test_after_apply_the_old_crash_says_the_fix_is_in_and_the_server_needs_a_restart(tmp_path: Path, sglang_venv: Path) -> None:
    """The KeyError's frames in a real SGLang 0.5.9 environment on this machine: before apply the advice is to
    apply; after it, that the fix is applied there now and the server needs a restart."""
    from support.venvs import copy_venv

    venv = copy_venv(sglang_venv, tmp_path / "v59")
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / SYMM_MEM).is_file()
    log = write(tmp_path, r.START, r.LOAD, [line.replace("/root/sglang/python", str(site)) for line in r.KEYERROR])
    head = [f"{log}:{KEYERROR_AT}: KeyError: 12 raised at {site}/{SYMM_MEM}:83 (SGLang)"] + keyerror_lines(str(log))[1:3]
    done = invoke("diagnose", str(log))
    assert (done.returncode, done.stdout.decode().splitlines()) == (PROBLEMS, head + [
        f"{log}:{KEYERROR_AT}: run: patchkit apply --python {venv}/bin/python", f"{log}:{KEYERROR_AT}: {SYMM_MODE}",
        f"1 known SM120 failure in {log}"])

    assert run_cli("apply", "--python", str(venv / "bin" / "python")).returncode == OK
    done = invoke("diagnose", str(log))
    assert (done.returncode, done.stdout.decode().splitlines()) == (PROBLEMS, head + [
        f"{log}:{KEYERROR_AT}: applied: torch-symm-mem is applied there now, after this log was written: restart the"
        " server to run it", f"{log}:{KEYERROR_AT}: {SYMM_MODE}", f"1 known SM120 failure in {log}"])
    [f] = json.loads(invoke("diagnose", str(log), "--json").stdout)["logs"][0]["findings"]
    assert (f["applied_now"], f["commands"]) == (True, [f"patchkit apply --python {venv}/bin/python"])


def test_a_log_from_elsewhere_is_judged_on_the_environment_python_names(tmp_path: Path, sglang_venv: Path) -> None:
    """The same KeyError, its frames at paths this machine does not have (the server ran in a container, or
    the log was copied here): with --python, the environment the server ran is where the fix is judged, as
    doctor and apply judge it; without it, nothing tells, and the fix is offered."""
    from support.venvs import copy_venv

    venv = copy_venv(sglang_venv, tmp_path / "v59")
    python = str(venv / "bin" / "python")
    log = write(tmp_path, r.START, r.LOAD, r.KEYERROR)
    run = f"{log}:{KEYERROR_AT}: run: patchkit apply --python {python}"
    assert run in invoke("diagnose", str(log), "--python", python).stdout.decode().splitlines()
    assert run_cli("apply", "--python", python).returncode == OK
    lines = invoke("diagnose", str(log), "--python", python).stdout.decode().splitlines()
    assert f"{log}:{KEYERROR_AT}: applied: torch-symm-mem is applied there now, after this log was written: restart the" \
           " server to run it" in lines
    assert run not in lines
    assert not any(": applied: " in line for line in invoke("diagnose", str(log)).stdout.decode().splitlines())


def test_the_same_failure_with_and_without_colour_codes_is_one(tmp_path: Path) -> None:
    """A KeyError wrapped in colour codes and an OSC 52 (set the clipboard), then the same one plain: one failure
    seen twice, printed as it first showed (escaped)."""
    coloured = [line if line != "KeyError: 12" else "\x1b[31mKeyError: 12\x1b[0m\x1b]52;c;aGVsbG8=\x07" for line in r.KEYERROR]
    log = write(tmp_path, r.START, r.LOAD, coloured, r.KEYERROR)
    done = invoke("diagnose", str(log))
    assert done.returncode == PROBLEMS, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{log}:{KEYERROR_AT}: ^[[31mKeyError: 12^[[0m^[]52;c;aGVsbG8=^G raised at /root/sglang/python/{SYMM_MEM}:83 (SGLang)"
    assert lines[1:] == keyerror_lines(str(log))[1:] + [
        f"{log}:{KEYERROR_AT}: seen 2 times: lines {KEYERROR_AT}, {KEYERROR_AT + len(r.KEYERROR)}", f"1 known SM120 failure in {log}"]
