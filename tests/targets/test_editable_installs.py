"""An editable SGLang, as SGLang's official image installs it (tests/image_layout.py: a
shallow clone of the real 0.5.9 files at ``v0.5.9``, ``pip install -e python --no-deps`` with
the real ``pyproject.toml``, in setuptools' default mode and in ``editable_mode=compat``),
FlashInfer 0.6.4's wheel beside it, ``python3`` first on PATH; and the same in a uv venv.  pip
installs the wheel once a session into a template virtualenv (support.prebuilt): each pip image is
a copy of it before its editable install, the uv venv gets a copy of the files pip installed there.

``--python python3`` patches the checkout and the wheel together, verify accepts both, a
second apply has nothing to do, a server started before is named, revert gives back the
clean checkout and the wheel's bytes; a checkout removed under the install is exit 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.fixes.registry import SGLANG
from patchkit.rewrite.evaluate import tables
from support.cli import invoke
from support.image import pip_editable, shallow_clone, uv_editable
from support.mirror import default_cache, fetch_wheel, wheel_zip
from support.procs import running
from support.venvs import copy_installed, copy_venv, make_venv

DC = "python/sglang/srt/distributed/device_communicators"
TABLES = (f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py")
GATE = "python/sglang/srt/layers/communicator.py"
DEEPGEMM = "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py"
COMM = "flashinfer/jit/comm.py"
# The files of FlashInfer PR 3903 (the allreduce-fusion backport) where a wheel has them.
PR_3903_INSTALLED = (
    "flashinfer/data/csrc/trtllm_allreduce.cu", "flashinfer/aot.py", "flashinfer/comm/trtllm_ar.py", COMM,
    "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh",
    "flashinfer/data/include/flashinfer/comm/trtllm_allreduce_fusion.cuh",
    "flashinfer/data/include/flashinfer/comm/trtllm_moe_allreduce_fusion.cuh", "flashinfer/data/include/flashinfer/utils.cuh",
)
SERIES = "patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch + patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch + patches/0.5.9/0003-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch"


@pytest.fixture(scope="module")
def origin(prebuilt) -> Path:
    return prebuilt.origin("0.5.9")


@pytest.fixture(scope="module")
def backend(prebuilt) -> Path:
    return prebuilt.build_backend()


@pytest.fixture(scope="module")
def flashinfer_venv(prebuilt) -> Path:
    """A virtualenv with FlashInfer 0.6.4's wheel installed by pip: a template, copied (``copy_venv``)."""
    return prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))


def wheel_bytes(rel: str) -> bytes:
    return wheel_zip("0.6.4", "flashinfer-python").read(rel)


def git_status(checkout: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True, check=True).stdout


def out(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.decode().splitlines()


def image(tmp: Path, origin: Path, installer: str, backend: Path, flashinfer_venv: Path) -> tuple[Path, Path, Path]:
    """(the checkout, the environment's bin folder, its site-packages) of an image layout."""
    checkout = shallow_clone(origin, "v0.5.9", tmp / "sgl-workspace/sglang")
    venv = tmp / "env"
    if installer == "uv":
        uv_editable(venv, checkout, backend=backend)
        copy_installed(flashinfer_venv, venv, "flashinfer_python-0.6.4.dist-info")  # the wheel, as pip installed it
    else:
        copy_venv(flashinfer_venv, venv)  # the wheel, as pip installed it
        pip_editable(venv / "bin/python", checkout, compat=installer == "pip-compat", backend=backend)
    return checkout, venv / "bin", next((venv / "lib").glob("python3*/site-packages"))


@pytest.mark.servers
@pytest.mark.parametrize("installer", ["pip", "pip-compat", "uv"])
def test_the_image_layout_through_apply_verify_revert(origin: Path, backend: Path, flashinfer_venv: Path, tmp_path: Path,
                                                       installer: str) -> None:
    checkout, bin_dir, site = image(tmp_path, origin, installer, backend, flashinfer_venv)
    if installer == "pip-compat":
        assert (site / "__editable__.sglang-0.5.9.pth").read_text().strip() == str(checkout / "python")
    else:
        assert next(site.glob("__editable___sglang_0_5_9_finder.py"))
    before = git_status(checkout)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    first = f"{checkout}/python/sglang: SGLang 0.5.9 (editable install of {checkout}, tag v0.5.9 at HEAD)"

    done = invoke("verify", "--python", "python3", "--all-fixes", env=env)
    assert done.returncode == 1, done.stdout.decode()
    lines = out(done)
    assert lines[0] == f"{bin_dir}/python3: SGLang (editable), FlashInfer (wheel); not installed: vLLM"
    assert lines[1] == first
    assert f"{TABLES[0]}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no key 12 (the patch is not applied)" in lines

    # What names the checkout: setuptools' finder (the .pth installs it; uv builds with setuptools too),
    # or, in pip's compat mode, the .pth's line naming python/.
    held = f"{checkout}/python" if installer == "pip-compat" else f"{checkout}/python/sglang"
    editable = f"{held} ({site}/__editable__.sglang-0.5.9.pth)"
    standin = tmp_path / "standin"  # a server that only waits: PYTHONPATH comes before the editable install
    (standin / "sglang").mkdir(parents=True)
    (standin / "sglang/__init__.py").write_text("")
    (standin / "sglang/launch_server.py").write_text('import sys\nprint("ready", flush=True)\nsys.stdin.read()\n')
    with running([bin_dir / "python3", "-m", "sglang.launch_server", "--port", "30000"], standin) as server:
        done = invoke("apply", "--python", "python3", "--all-fixes", env=env)
        assert done.returncode == 0, done.stderr.decode()
        lines = out(done)
        assert lines[0] == first
        assert lines[1] == f"applied shipped patch {SERIES}"
        assert [line.rsplit(" (", 1)[0] if "flashinfer/" in line else line for line in lines if line.startswith("  patched")] == [
            f"  patched {TABLES[0]} (+6 lines)", f"  patched {TABLES[1]} (+1 line)", f"  patched {GATE} (+3 -1 lines)",
            f"  patched {DEEPGEMM} (+3 lines)",  # the DeepGEMM fix, on by default
        ] + [f"  patched {path}" for path in PR_3903_INSTALLED]
        pid = f"  pid {server.pid}: {bin_dir}/python3 -m sglang.launch_server --port 30000"
        assert lines[lines.index(pid) + 1] == f"    because its interpreter's site-packages hold the editable install of {editable}"
        assert f"{site}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer_python-0.6.4.dist-info" in lines
    for rel in TABLES:
        for table in tables((checkout / rel).read_bytes(), SGLANG.tables, rel).values():
            assert table[12] == table[10]
    assert b"_is_sm120_supported" in (checkout / GATE).read_bytes()
    assert b"supported_major_versions=[9, 10, 12]" in (site / COMM).read_bytes()
    assert (checkout / ".git/patchkit/state.json").is_file()  # the checkout's state, as for `apply PATH`

    done = invoke("status", "--python", "python3", env=env)
    assert done.returncode == 0
    assert out(done)[0] == f"target:   {checkout} (git checkout, editable install of {checkout}/python/sglang; state in {checkout}/.git/patchkit)"

    done = invoke("verify", "--python", "python3", "--all-fixes", env=env)
    assert done.returncode == 0, done.stdout.decode()
    assert out(done)[-1] == "verify: ok (FlashInfer PR 3903 in every file it changes)"
    assert "verify: ok (key 12 = key 10 in every table)" in out(done)

    done = invoke("apply", "--python", "python3", "--all-fixes", env=env)
    assert done.returncode == 0
    assert [line for line in out(done) if line.startswith("already applied")] == [
        f"already applied (shipped patch {SERIES}): nothing written",
        "already applied (shipped patch patches/flashinfer/0.6.4/0001-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch): nothing written",
    ]

    done = invoke("revert", "--python", "python3", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert git_status(checkout) == before  # what pip's install wrote (egg-info, _version.py), nothing of patchkit's
    assert subprocess.run(["git", "diff", "--quiet"], cwd=checkout).returncode == 0
    assert all((site / path).read_bytes() == wheel_bytes(path) for path in PR_3903_INSTALLED)

    # The checkout moved away under the editable install: exit 2, one line naming the file.
    shutil.move(checkout, tmp_path / "moved")
    for command in ("verify", "apply", "status", "revert"):
        done = invoke(command, "--python", "python3", env=env)
        assert done.returncode == 2, (command, done.stdout.decode())
        err = done.stderr.decode().splitlines()
        assert len(err) == 1 and err[0].startswith("patchkit: ") and "an editable install of SGLang from " in err[0], err
        assert "which is not there (moved or deleted?); reinstall it" in err[0]
        assert done.stdout == b""


def test_a_checkout_between_tags_takes_the_installed_version_and_generates(origin: Path, backend: Path, tmp_path: Path) -> None:
    """A clone of main one commit past v0.5.9 that changed a table file: no tag at HEAD, so
    the version is the one the install recorded (its dist-info: SGLang's own
    git_describe_command describes the newest tag itself, so setuptools-scm says 0.5.9), the
    files are not 0.5.9's, and the change is generated from them; apply says both."""
    from support.image import git

    work = tmp_path / "origin"
    git("clone", "-q", str(origin), str(work))
    comm = work / TABLES[1]
    comm.write_bytes(comm.read_bytes() + b"\n# main, after v0.5.9\n")
    git("commit", "-q", "-am", "after the release", cwd=work)
    checkout = tmp_path / "sglang"
    git("clone", "-q", f"file://{work}", str(checkout))
    venv = make_venv(tmp_path / "env")
    pip_editable(venv / "bin/python", checkout, backend=backend)
    (info,) = (venv / "lib").glob("python3*/site-packages/sglang-*.dist-info")
    assert info.name == "sglang-0.5.9.dist-info"
    done = invoke("apply", "--python", str(venv))
    assert done.returncode == 0, done.stderr.decode()
    lines = out(done)
    assert lines[0] == f"{checkout}/python/sglang: SGLang 0.5.9 (editable install of {checkout}, from sglang-0.5.9.dist-info)"
    assert lines[1] == ("note: files differ from the pre-image of patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-"
                        "their.patch + patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
                        f" (local edits?): {TABLES[1]}")
    assert lines[2] == "applied generated from the checkout's files"
    assert invoke("verify", "--python", str(venv)).returncode == 0
    assert invoke("revert", "--python", str(venv)).returncode == 0
    assert subprocess.run(["git", "diff", "--quiet"], cwd=checkout).returncode == 0
