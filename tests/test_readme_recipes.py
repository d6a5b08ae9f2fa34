"""The README's image recipe, run as written: the Dockerfile's COPY and RUN steps and its
entrypoint ``launch.sh``, taken from README.md itself.

There is no Docker engine here, so a stand-in reproduces the image's layout
(tests/image_layout.py): a shallow clone at ``v0.5.9`` of a repository of SGLang 0.5.9's real
files and real ``pyproject.toml`` in ``/sgl-workspace/sglang``, installed with ``pip install -e
python --no-deps`` into the environment whose ``python3`` is first on PATH, FlashInfer 0.6.4's
wheel beside it (``FROM``; the environment is a copy of a template with the wheel that pip installs
once a session).  COPY destinations and ``/opt`` are mapped into a scratch folder;
RUN lines run with ``sh -c``.  The entrypoint runs on a stand-in GB10 (tests/gpus/standin.py), with
Triton 3.5.1's and nvidia-cuda-nvcc 13.5's wheel files beside SGLang: it must set TRITON_PTXAS_PATH.  ``python3 -m sglang.launch_server`` meets a stand-in that only
prints its arguments.  Then the "image" is upgraded to the sglang 0.5.23 wheel and the
entrypoint runs again: it must patch the new release before serving.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from gpus.standin import no_nvidia_smi
from gpus.standin import standin as smi
from settings.test_settings import nvcc13_files, triton_files

from patchkit.fixes.registry import SGLANG
from patchkit.rewrite.evaluate import tables
from support.image import pip_editable, shallow_clone
from support.mirror import default_cache, fetch_wheel
from support.repos import ROOT, copy_source
from support.venvs import copy_venv, pip_install

README = (ROOT / "docs" / "REFERENCE.md").read_text()  # the reference: recipes and synopses
FILES = (
    "sglang/srt/distributed/device_communicators/all_reduce_utils.py",
    "sglang/srt/distributed/device_communicators/torch_symm_mem.py",
)


def block(after: str, fence: str) -> str:
    """The first ``fence`` code block of README.md that follows the text ``after``."""
    start = README.index(after)
    match = re.compile(rf"^```{fence}\n(.*?)^```$", re.S | re.M).search(README, start)
    assert match, (after, fence)
    return match.group(1)


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, argument) pairs, continuation lines joined."""
    text = block("#### In an image", "dockerfile").replace("\\\n", " ")
    steps = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            steps.append((word, rest.strip()))
    return steps


def launch_script() -> str:
    return block("`launch.sh`:", "sh")


def patched(site: Path) -> bool:
    for rel in FILES:
        found = tables((site / rel).read_bytes(), SGLANG.tables, rel)
        if not found or not all(12 in t and t[12] == t[10] for t in found.values()):
            return False
    return True


def test_the_recipe_has_the_shape_this_test_runs() -> None:
    steps = dockerfile()
    assert [word for word, _ in steps] == ["FROM", "COPY", "COPY", "RUN", "ENTRYPOINT"]
    assert steps[0][1] == "lmsysorg/sglang:v0.5.9"
    assert launch_script().startswith("#!/bin/sh\n")


def test_dockerfile_and_launch_script_as_written(tmp_path: Path, prebuilt) -> None:
    steps = dockerfile()
    image = tmp_path / "image"  # where the image's absolute paths go
    context = tmp_path / "context"  # the docker build context: this repository and launch.sh
    copy_source(context / "patchkit")

    def in_image(text: str) -> str:
        return re.sub(r"(?<![\w./-])/(opt|usr/local)/", lambda m: f"{image}/{m.group(1)}/", text)

    (context / "launch.sh").write_text(in_image(launch_script()))

    # FROM: the image's layout: SGLang cloned shallow at the tag and installed editable, FlashInfer's wheel beside it.
    checkout = shallow_clone(prebuilt.origin("0.5.9"), "v0.5.9", image / "sgl-workspace/sglang")
    flashinfer = prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))  # the wheel, as pip installed it
    python = copy_venv(flashinfer, image / "usr") / "bin/python3"
    pip_editable(python, checkout, backend=prebuilt.build_backend())
    site = next((image / "usr/lib").glob("python3*/site-packages"))

    env = dict(os.environ, PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}", HOME=str(tmp_path / "home"))
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    entrypoint: list[str] = []
    for word, arg in steps:
        if word == "COPY":
            src, dest = arg.split()
            real = Path(in_image(dest))
            real.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (context / src).is_dir() else shutil.copy)(context / src, real)
        elif word == "RUN":
            done = subprocess.run(["sh", "-c", in_image(arg)], env=env, capture_output=True)
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            assert b"Traceback" not in done.stderr
        elif word == "ENTRYPOINT":
            entrypoint = [in_image(a) for a in json.loads(arg)]
    assert patched(checkout / "python")
    assert b"supported_major_versions=[9, 10, 12]" in (site / "flashinfer/jit/comm.py").read_bytes()
    assert (image / "opt/patchkit/bin/patchkit").is_file() and not (python.parent / "patchkit").exists()
    assert (checkout / ".git/patchkit/state.json").is_file()  # the checkout's state, beside its git data

    # The entrypoint, on a GB10 whose image also has Triton 3.5.1 (its bundled ptxas 12.8 does not know sm_121a) and
    # nvidia-cuda-nvcc 13.5's ptxas: the variable is set, verify passes, the server starts (a stand-in that prints its
    # arguments and the variable).
    for files in (triton_files("3.5.1"), nvcc13_files()):
        for entry in files.iterdir():
            if entry.name != ".done":
                (site / entry.name).symlink_to(entry)
    standin = tmp_path / "standin"
    (standin / "sglang").mkdir(parents=True)
    (standin / "sglang/__init__.py").write_text("")
    (standin / "sglang/launch_server.py").write_text(
        "import os, sys\nprint('serving', *sys.argv[1:], 'with', os.environ.get('TRITON_PTXAS_PATH'))\n")
    gpu = [p for p in smi(tmp_path / "gb10", "gb10")["PATH"].split(os.pathsep) if not (Path(p) / "ptxas").exists()]
    served = dict(env, PATH=os.pathsep.join([str(python.parent), *gpu]), PYTHONPATH=str(standin))
    served = {k: v for k, v in served.items() if not k.startswith("TRITON_") and k not in ("CUDA_HOME", "CUDA_PATH")}
    ptxas13 = site / "nvidia/cu13/bin/ptxas"
    done = subprocess.run([*entrypoint, "--model-path", "m", "--enable-torch-symm-mem"], env=served, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[-2].startswith("verify: ok") and lines[-1] == f"serving --model-path m --enable-torch-symm-mem with {ptxas13}"
    assert f"settings of {python} for 12.1, with this shell's variables:" in lines, lines

    # A derived image upgrades SGLang to a wheel: the entrypoint judges 0.5.23 before serving (nothing to patch on a GB10).
    pip_install(python, str(fetch_wheel("0.5.23", default_cache())))
    assert not patched(site)
    done = subprocess.run([*entrypoint, "--model-path", "m"], env=served, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert f"{site}/sglang: SGLang 0.5.23 (installed), from sglang-0.5.23.dist-info" in out
    # 0.5.23's series is torch-symm-mem alone, and a GB10 is one GPU (no multicast): 0.5.23 only warns
    # without it, so it is left out, said; the fusion is incomplete
    # there (its resolver refuses SM120 after the gate), so --all-fixes leaves it out and says why.
    assert any(line.startswith("not needed here: torch-symm-mem: one GPU, no peer to share multicast memory with, ")
               for line in out.splitlines())
    assert "note: allreduce-fusion left out: incomplete on SGLang 0.5.23: the feature's path still refuses the GPU at " \
           "sglang/srt/layers/flashinfer_comm_fusion.py:48 in _resolve_backend(): " in out
    assert out.splitlines()[-1] == f"serving --model-path m with {ptxas13}"
    assert not patched(site)
    # Without the stand-in GPU (a container started without its GPUs) the script stops before the server.
    done = subprocess.run(entrypoint, env=dict(served, PATH=os.pathsep.join([str(python.parent), no_nvidia_smi(tmp_path)["PATH"]])),
                          capture_output=True)
    assert (done.returncode, done.stdout) == (1, b"") and done.stderr.decode().startswith("patchkit: no GPU seen"), done.stderr



# -- the commands' synopses ----------------------------------------------------------------------


def _help_options(command: str) -> list[str]:
    """The long options ``patchkit COMMAND --help`` lists (but --help itself), in its order."""
    from support.cli import invoke

    done = invoke(command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    options = text[text.index("\nOptions:\n"):]
    found = re.findall(r"^  (?:-\w, )?(--[a-z][a-z-]*)", options, re.M)
    return [o for o in dict.fromkeys(found) if o != "--help"]


def _synopsis(command: str) -> str:
    """The ``sh`` block under the README's ``### `patchkit COMMAND``` heading: its lines for the command."""
    text = block(f"### `patchkit {command}`\n", "sh")
    lines = [line for line in text.splitlines() if line.startswith(f"patchkit {command} ") or line == f"patchkit {command}"]
    assert lines, (command, text)
    return "\n".join(lines)


def _commands() -> list[str]:
    from patchkit.cli import cli

    return sorted(cli.commands)


def test_every_command_has_a_synopsis_with_every_option_its_help_lists() -> None:
    """Each ``patchkit COMMAND --help`` option appears in the README's synopsis of COMMAND, and
    the synopsis names no option the command does not take."""
    missing, unknown = {}, {}
    for command in _commands():
        options = _help_options(command)
        synopsis = _synopsis(command)
        named = set(re.findall(r"(--[a-z][a-z-]*)", synopsis))
        if [o for o in options if o not in named]:
            missing[command] = [o for o in options if o not in named]
        if sorted(named - set(options)):
            unknown[command] = sorted(named - set(options))
    assert (missing, unknown) == ({}, {})
    assert len(_commands()) == 12  # kernels joined the eleven
