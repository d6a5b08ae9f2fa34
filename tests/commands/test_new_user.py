"""What a new user met with the real sglang 0.5.9 and flashinfer-python 0.6.4 wheels in one
environment: a plain apply after ``apply --all-fixes`` took SGLang's half of the opt-in fix
away (``communicator.py (-2 lines)``) and kept FlashInfer's, then a plain verify said ok;
``flashinfer/jit/comm.py (+0 lines)`` for a changed line; "replacing the applied patch (10 ->
12, ...)" when the cc pair was not what changed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.venvs import copy_venv

pytestmark = pytest.mark.network  # SGLang's and FlashInfer's real wheels, fetched once into the cache

COMMUNICATOR = "sglang/srt/layers/communicator.py"
TABLES = ("sglang/srt/distributed/device_communicators/all_reduce_utils.py",
          "sglang/srt/distributed/device_communicators/torch_symm_mem.py")
FLASHINFER = ("flashinfer/jit/comm.py", "flashinfer/aot.py", "flashinfer/data/include/flashinfer/utils.cuh")
# What a plain apply writes to 0.5.9: the DeepGEMM fix (on by default) and the tables.
SHIPPED = ("patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch + "
           "patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch")


@pytest.fixture(scope="module")
def template(prebuilt) -> Path:
    """The session's virtualenv with the sglang 0.5.9 and flashinfer-python 0.6.4 wheels (support.prebuilt)."""
    return prebuilt.venv(fetch_wheel("0.5.9", default_cache()), fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))


@pytest.fixture
def venv(template: Path, tmp_path: Path) -> tuple[str, Path]:
    copy = copy_venv(template, tmp_path / "venv")
    return str(copy / "bin" / "python"), next((copy / "lib").glob("python3*/site-packages"))


def _lines(done) -> list[str]:
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    return done.stdout.decode().splitlines()


def test_a_plain_apply_keeps_the_fixes_applied_before(venv) -> None:
    python, site = venv
    original = {f: (site / f).read_bytes() for f in (COMMUNICATOR, *TABLES, *FLASHINFER)}
    _lines(invoke("apply", "--python", python, "--all-fixes"))
    patched = {f: (site / f).read_bytes() for f in original}
    assert all(patched[f] != original[f] for f in original)

    lines = _lines(invoke("apply", "--python", python))
    assert lines.count("note: keeps allreduce-fusion, applied before (`patchkit revert` takes the fixes away)") == 2
    assert sum(line.startswith("already applied (") for line in lines) == 2
    assert not any(line.startswith("  patched ") for line in lines)
    assert {f: (site / f).read_bytes() for f in original} == patched

    lines = _lines(invoke("verify", "--python", python))  # a plain verify checks the fix applied before
    assert (f"checked {COMMUNICATOR}: _is_sm100_supported in apply_flashinfer_allreduce_fusion() "
            "(post-image hash recorded at apply)") in lines
    _lines(invoke("revert", "--python", python))
    assert {f: (site / f).read_bytes() for f in original} == original


def test_a_named_fix_adds_to_those_applied(venv) -> None:
    """``apply --fix torch-symm-mem`` after ``--all-fixes``: the opt-in fix stays too."""
    python, site = venv
    _lines(invoke("apply", "--python", python, "--all-fixes"))
    patched = (site / COMMUNICATOR).read_bytes()
    lines = _lines(invoke("apply", "--python", python, "--fix", "torch-symm-mem"))
    assert "note: keeps allreduce-fusion, applied before (`patchkit revert` takes the fixes away)" in lines
    assert (site / COMMUNICATOR).read_bytes() == patched


GATE_LEFT = ("allreduce-fusion incomplete on SGLang 0.5.9: the feature's path still refuses the GPU at "
             "sglang/srt/layers/communicator.py:97: (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported); "
             "nothing written")


def test_a_kept_fix_refused_for_another_cc_says_it_was_applied_before(venv) -> None:
    """A kept fix that cannot apply with a new cc pair is refused as any fix is, the line saying it
    was applied before (the refusal names the fix it is about; a fix asked for on the command line,
    not kept, gets no such words)."""
    python, site = venv
    _lines(invoke("apply", "--python", python, "--all-fixes"))
    patched = {f: (site / f).read_bytes() for f in (COMMUNICATOR, *TABLES, *FLASHINFER)}
    done = invoke("apply", "--python", python, "--from-cc", "10", "--to-cc", "11")
    # Its flag rule adds _is_sm120_supported, for SM12x alone: for --to-cc 11 the gate is left as it is.
    kept = (f"patchkit: {GATE_LEFT_11} (allreduce-fusion: applied before, it stays until `patchkit revert`; revert, then "
            "apply the fixes you want)\n")
    assert (done.returncode, done.stdout, done.stderr.decode()) == (3, b"", kept)
    assert {f: (site / f).read_bytes() for f in patched} == patched
    _lines(invoke("revert", "--python", python))
    done = invoke("apply", "--python", python, "--project", "sglang", "--all-fixes", "--from-cc", "10", "--to-cc", "11")
    assert (done.returncode, done.stdout, done.stderr.decode()) == (3, b"", f"patchkit: {GATE_LEFT_11}\n")

GATE_LEFT_11 = ("allreduce-fusion incomplete on SGLang 0.5.9: the feature's path still refuses the GPU at "
                "sglang/srt/layers/communicator.py:95: (_is_sm90_supported or _is_sm100_supported); nothing written")


def _numstat(a: bytes, b: bytes, tmp: Path) -> tuple[int, int]:
    (tmp / "a").write_bytes(a)
    (tmp / "b").write_bytes(b)
    done = subprocess.run(["git", "diff", "--no-index", "--numstat", "a", "b"], cwd=tmp, capture_output=True)
    added, removed, _ = done.stdout.decode().split("\t")
    return int(added), int(removed)


def test_each_patched_file_says_the_lines_its_diff_adds_and_removes(venv, tmp_path: Path) -> None:
    """Every "patched FILE (...)" line says what ``git diff --numstat`` says of that file:
    ``flashinfer/jit/comm.py`` changes one line, "+1 -1 lines", never "+0 lines"."""
    python, site = venv
    files = (COMMUNICATOR, *TABLES, *FLASHINFER)
    original = {f: (site / f).read_bytes() for f in files}
    lines = _lines(invoke("apply", "--python", python, "--all-fixes"))
    assert "  patched flashinfer/jit/comm.py (+1 -1 lines)" in lines
    assert f"  patched {TABLES[1]} (+1 line)" in lines
    for f in files:
        added, removed = _numstat(original[f], (site / f).read_bytes(), tmp_path)
        said = f"+{added} -{removed} lines" if added and removed else f"+{added} line{'s' * (added != 1)}"
        assert f"  patched {f} ({said})" in lines, (f, said)
    assert not any(line.endswith("(+0 lines)") for line in lines)


def test_replacing_the_applied_patch_says_what_changed(venv) -> None:
    python, site = venv
    _lines(invoke("apply", "--python", python, "--project", "sglang"))
    lines = _lines(invoke("apply", "--python", python, "--project", "sglang", "--all-fixes"))
    assert f"note: replacing the applied patch (adds allreduce-fusion; was shipped patch {SHIPPED})" in lines
    _lines(invoke("revert", "--python", python))
    _lines(invoke("apply", "--python", python, "--project", "sglang"))
    lines = _lines(invoke("apply", "--python", python, "--project", "sglang", "--from-cc", "9", "--to-cc", "11"))
    # The DeepGEMM fix is for SM12x alone: a pair for 11 takes it away, and says so.
    assert f"note: replacing the applied patch (10 -> 12 becomes 9 -> 11; takes away deepgemm-sm12x; was shipped patch {SHIPPED})" in lines


def test_status_names_the_project_of_each_block(venv) -> None:
    """Both wheels live in one site-packages folder: each block of ``status --python`` says
    which project it is about, in its lines and in its document."""
    python, site = venv
    blocks = "\n".join(_lines(invoke("status", "--python", python))).split("\n\n")
    assert [block.splitlines()[:3] for block in blocks] == [
        [f"target:   {site} (installed package; state in {site}/.patchkit-sglang)", "project:  SGLang",
         "version:  0.5.9 (from sglang-0.5.9.dist-info)"],
        [f"target:   {site} (installed package; state in {site}/.patchkit-flashinfer)", "project:  FlashInfer",
         "version:  0.6.4 (from flashinfer_python-0.6.4.dist-info)"],
    ]
    import json

    doc = json.loads(invoke("status", "--python", python, "--json").stdout)
    assert [(t["project"], t["version"]) for t in doc["targets"]] == [("sglang", "0.5.9"), ("flashinfer", "0.6.4")]


def test_status_counts_bytecode_of_python_files_only(venv) -> None:
    """A CUDA header or source has no cached bytecode: its line says its state alone; a Python
    file's line counts its ``.pyc`` files."""
    python, _ = venv
    lines = _lines(invoke("status", "--python", python))
    assert "  flashinfer/data/csrc/trtllm_allreduce.cu: original release file" in lines
    assert "  flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh: original release file" in lines
    assert [line for line in lines if line.startswith("  flashinfer/jit/comm.py: ")] == [
        "  flashinfer/jit/comm.py: original release file; 0 cached bytecode files"]
