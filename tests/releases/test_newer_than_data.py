"""One verdict of "needed here" (doctor, a plain apply, --to-cc auto) and the judgement of a
release newer than patchkit's data (docs/RELEASES.md), on real release files: vLLM 0.34.0 (the
newest on the index; torch-symm-mem's data ends at 0.33.0) from the sparse copy of its wheel in
``data/vllm-0.34.0`` (README.md there), SGLang 0.5.23 and 0.5.9 from their wheels, with the
stand-in nvidia-smi of 8 x RTX PRO 6000 on PCIe and of one GB10."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gpus.standin import no_nvidia_smi, standin

from patchkit.cc import CC
from patchkit.rewrite.evaluate import tables
from support.cli import invoke
from support.venvs import copy_venv, make_venv, snapshot

DATA = Path(__file__).resolve().parent / "data"
DC = "vllm/distributed/device_communicators"
SYMM = f"{DC}/symm_mem.py"
GB10, RTX8 = "gb10", "rtxpro6000-8pcie"
LACK = {GB10: "one GPU, no peer to share multicast memory with", RTX8: "no multicast between PCIe GPUs"}
KEY = {GB10: "12.1", RTX8: "12.0"}
REST = ("with the key the communicator would go on to torch_symm_mem.rendezvous, which maps every peer's memory (P2P "
        "between the GPUs), and then turn itself off anyway: a way to fail, and no speed")
# Judged for both SM12x ccs at once (no GPU seen): the facts of each cc from gpus/products.py.
PRODUCTS = "no multicast on any GPU of cc 12.0 or 12.1 (RTX PRO 6000 and RTX 50 have no NVLink; GB10 is one GPU)"


def vllm_0340_why(lack: str, key: str) -> str:
    """Why torch-symm-mem is not needed on vLLM 0.34.0, read from its own symm_mem.py."""
    return (f'{lack}, and without it vLLM 0.34.0 warns "SymmMemCommunicator: Device capability {key} not supported, '
            f"communicator is not available.\" (newer than patchkit's data: read in its {SYMM}); {REST}")


def sglang_0523_why(lack: str) -> str:
    return (f'{lack}, and without it SGLang 0.5.23 warns "TorchSymmMemCommunicator: Device capability 12 not supported, '
            f'communicator is not available."; {REST}')


def out(done) -> list[str]:
    return done.stdout.decode().splitlines()


@pytest.fixture
def vllm_0340(tmp_path: Path) -> tuple[Path, str]:
    """A virtualenv holding the sparse copy of the vllm 0.34.0 wheel (its site-packages, and python)."""
    venv = make_venv(tmp_path / "V")
    site = next((venv / "lib").glob("python3*/site-packages"))
    shutil.copytree(DATA / "vllm-0.34.0", site, dirs_exist_ok=True)
    return site, str(venv / "bin" / "python")


@pytest.fixture
def sglang(prebuilt, tmp_path: Path):
    """version -> (site-packages, python) of a copy of a virtualenv with that real SGLang wheel."""
    from support.mirror import default_cache, fetch_wheel

    def make(version: str) -> tuple[Path, str]:
        venv = copy_venv(prebuilt.venv(fetch_wheel(version, default_cache())), tmp_path / f"S{version}")
        return next((venv / "lib").glob("python3*/site-packages")), str(venv / "bin" / "python")

    return make


@pytest.mark.parametrize("machine", [GB10, RTX8])
def test_doctor_judges_vllm_0340_from_its_files(tmp_path: Path, vllm_0340, machine: str) -> None:
    """0.34.0 is newer than torch-symm-mem's data (0.33.0): its symm_mem.py still only warns, so on
    GPUs without multicast the fix is not needed (it was "needed here", exit 1)."""
    site, python = vllm_0340
    done = invoke("doctor", "--python", python, env=standin(tmp_path, machine))
    lines = out(done)
    key = KEY[machine]
    tables_ = f"CUSTOM_ALL_REDUCE_MAX_SIZES lacks '{key}'; SYMM_MEM_ALL_REDUCE_MAX_SIZES lacks '{key}'; _WORLD_SIZES_MULTIMEM lacks '{key}'"
    start = lines.index(f"{site}/vllm: vLLM 0.34.0 (installed), from vllm-0.34.0.dist-info")
    assert lines[start + 1:start + 3] == [
        f"  torch-symm-mem (on by default): not needed here, not applied: {tables_}",
        f"    not needed because {vllm_0340_why(LACK[machine], key)}",
    ]
    assert not any(line.startswith("needed") for line in lines)
    assert lines[-1] == "nothing this machine needs is missing"
    assert done.returncode == 0, done.stdout.decode()
    doc = json.loads(invoke("doctor", "--python", python, "--json", env=standin(tmp_path, machine)).stdout)
    symm = doc["targets"][0]["fixes"][0]
    assert (symm["fix"], symm["needed"], symm["why_reason"], doc["needed"]) == ("torch-symm-mem", False, "not-needed-here", [])


@pytest.mark.parametrize("machine", [GB10, RTX8, None], ids=["gb10", "rtx8", "no-gpu"])
def test_plain_apply_on_vllm_0340_writes_no_torch_symm_mem_key(tmp_path: Path, vllm_0340, machine: str | None) -> None:
    """The README's first command after a crash: nothing written where doctor says the fix is not
    needed, one line says why; with no GPU seen it judges for the SM12x products and says so."""
    site, python = vllm_0340
    env = standin(tmp_path, machine) if machine else no_nvidia_smi(tmp_path)
    before = snapshot(site)
    done = invoke("apply", "--python", python, env=env)
    assert (done.returncode, done.stderr) == (0, b""), done.stdout.decode()
    judged = "here" if machine else "for the SM12x GPUs, 12.0 and 12.1 (no GPU seen)"
    why = vllm_0340_why(LACK[machine] if machine else PRODUCTS, KEY[machine] if machine else "12.0")
    assert out(done) == [f"{site}/vllm: vLLM 0.34.0 (installed), from vllm-0.34.0.dist-info",
                         f"not needed {judged}: torch-symm-mem: {why} (--fix torch-symm-mem applies it anyway)",
                         "nothing written"]
    assert snapshot(site) == before
    doc = json.loads(invoke("apply", "--python", python, "--json", env=env).stdout)
    assert doc["targets"][0]["not_needed"] == [{"fix": "torch-symm-mem", "reason": "not-needed-here", "why": why, "judged": judged}]


def test_plain_apply_on_sglang_0523_writes_no_torch_symm_mem_key(tmp_path: Path, sglang) -> None:
    """It applied the fix doctor calls "a way to fail, and no speed", silently: on a GB10, on 8 PCIe
    RTX PRO 6000 and with no GPU seen (judged for the SM12x products), one environment for the three."""
    site, python = sglang("0.5.23")
    before = snapshot(site / "sglang/srt/distributed/device_communicators"), sorted(p.name for p in site.iterdir())
    for machine in (GB10, RTX8, None):
        env = standin(tmp_path / str(machine), machine) if machine else no_nvidia_smi(tmp_path / "none")
        done = invoke("apply", "--python", python, env=env)
        assert (done.returncode, done.stderr) == (0, b""), done.stdout.decode()
        judged = "here" if machine else "for the SM12x GPUs, 12.0 and 12.1 (no GPU seen)"
        why = sglang_0523_why(LACK[machine] if machine else PRODUCTS)
        assert out(done)[1] == f"not needed {judged}: torch-symm-mem: {why} (--fix torch-symm-mem applies it anyway)", machine
        assert out(done)[-1].endswith(": nothing written")
        # Nothing written: the tables' files as released, and no state dir beside the package.
        assert (snapshot(site / "sglang/srt/distributed/device_communicators"), sorted(p.name for p in site.iterdir())) == before
        doc = json.loads(invoke("apply", "--python", python, "--json", env=env).stdout)
        assert doc["targets"][0]["not_needed"] == [{"fix": "torch-symm-mem", "reason": "not-needed-here", "judged": judged,
                                                    "why": why}]


def test_asked_for_it_is_applied_and_then_named_patchkits_own(tmp_path: Path, sglang) -> None:
    """--fix still applies it; then doctor says it does not help here, with revert, and --to-cc
    auto calls key 12 patchkit's, not the release's ("SGLang already holds key 12")."""
    site, python = sglang("0.5.23")
    env = standin(tmp_path, RTX8)
    assert invoke("apply", "--python", python, "--fix", "torch-symm-mem", env=env).returncode == 0
    utils = site / "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    (table,) = tables(utils.read_bytes(), ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",), str(utils)).values()
    assert table[12] == table[10]
    lines = out(invoke("doctor", "--python", python, env=env))
    at = lines.index("  torch-symm-mem (on by default): applied by patchkit, not needed here: `patchkit revert` takes it off")
    assert lines[at + 1] == f"    not needed because {sglang_0523_why(LACK[RTX8])}"
    done = invoke("apply", "--python", python, "--to-cc", "auto", env=env)
    assert out(done)[2] == ("nothing to do: key 12 is patchkit's own, applied by an earlier `patchkit apply` "
                            "(`patchkit doctor` says whether it helps here; `patchkit revert` takes it off)")
    assert invoke("revert", "--python", python, env=env).returncode == 0
    (table,) = tables(utils.read_bytes(), ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",), str(utils)).values()
    assert 12 not in table


def test_the_key_written_is_the_key_said(tmp_path: Path, vllm_0340) -> None:
    """On a GB10, asked for by name, the '12.1' keys are written, and the effect line speaks of
    12.1, from 0.34.0's own symm_mem.py (it said "adds key 12 (vLLM: \\"12.0\\")")."""
    site, python = vllm_0340
    done = invoke("apply", "--python", python, "--to-cc", "auto", "--fix", "torch-symm-mem", env=standin(tmp_path, GB10))
    assert done.returncode == 0, done.stdout.decode()
    (effect,) = [line for line in out(done) if line.startswith("effect: ")]
    assert effect.startswith('effect: torch-symm-mem prevents "SymmMemCommunicator: Device capability 12.1 not supported, '
                             'communicator is not available." on vLLM 0.34.0; ')
    assert "12.0" not in effect
    found = tables((site / DC / "all_reduce_utils.py").read_bytes(), ("CUSTOM_ALL_REDUCE_MAX_SIZES",), "all_reduce_utils.py")
    assert found and all(t["12.1"] == t["10.0"] and "12.0" not in t for t in found.values())


def test_a_newer_release_whose_files_do_not_tell_is_never_needed(vllm_0340) -> None:
    """Where the file that showed the outcome is not there, the verdict is "newer than patchkit
    has read": not needed on a guess, not unneeded either; with the file, judged from it."""
    from patchkit.fixes.effects import read_effects
    from patchkit.fixes.registry import PROJECTS
    from patchkit.gpus.smi import given
    from patchkit.judge.here import unneeded
    from patchkit.render.reasons import code, said

    site, _ = vllm_0340
    effect, vllm, gb10 = read_effects()["torch-symm-mem"], PROJECTS["vllm"], given(CC(12, 1))
    assert (effect.read_until("vllm"), effect.newer("vllm", "0.34.0"), effect.newer("vllm", "0.33.0")) == ("0.33.0", True, False)
    unread = unneeded(effect, vllm, "0.34.0", gb10, lambda path: None)
    assert code(unread) == "newer-than-read"
    assert said(unread) == (
        "no multicast on any GPU of cc 12.1 (GB10 is one GPU), and vLLM 0.34.0 is newer than patchkit has read (its data ends "
        f"at 0.33.0): its files do not hold what showed how 0.33.0 goes on without the fix ({SYMM}: "
        "`if self.device_capability not in SYMM_MEM_ALL_REDUCE_MAX_SIZES:`), so patchkit cannot say whether it is needed here")
    read = unneeded(effect, vllm, "0.34.0", gb10, lambda path: (site / path).read_bytes() if (site / path).is_file() else None)
    assert code(read) == "not-needed-here" and [f.read_in for f in read.failing] == [SYMM]
    # A release inside the data is judged by it, without its files.
    assert code(unneeded(effect, vllm, "0.33.0", gb10)) == "not-needed-here"


def test_to_cc_9_writes_nothing_on_sglang_059(tmp_path: Path, sglang) -> None:
    """--to-cc 9.0 wrote the DeepGEMM refusal of SM120/SM121 and status claimed key 9 applied; a
    table rule given a pair of its own (--from-cc 9 --to-cc 11) still copies it."""
    site, python = sglang("0.5.9")
    env = no_nvidia_smi(tmp_path)
    before = snapshot(site / "sglang")
    done = invoke("apply", "--python", python, "--to-cc", "9.0", env=env)
    assert (done.returncode, done.stderr) == (0, b""), done.stdout.decode()
    assert out(done) == [f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
                         "nothing to do: no fix for SGLang is for GPUs of key 9: deepgemm-sm12x, fusion-self-enable are for "
                         "other GPUs, and the release already holds key 9 (torch-symm-mem); nothing written"]
    assert snapshot(site / "sglang") == before
    status = out(invoke("status", "--python", python, "--to-cc", "9.0", env=env))
    assert "applied:  nothing recorded by patchkit" in status and "to-cc:    9.0: not applied (key 9; nothing applied)" in status
    done = invoke("apply", "--python", python, "--from-cc", "9", "--to-cc", "11", "--fix", "torch-symm-mem", env=env)
    assert done.returncode == 0, done.stdout.decode()
    assert "  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 11 = key 9" in out(done)
    assert not any("configurer.py" in line for line in out(done))
