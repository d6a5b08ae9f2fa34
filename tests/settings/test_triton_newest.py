"""Triton 3.7.0, 3.8.0 and 3.9.0 (3.9.0 the newest on the index) judged for a GB10 from their own files
(issue 41: a release newer than the data is read, never assumed like the last one known).

Each release is a sparse copy of its PyPI wheel (data/triton-X/: knobs.py, compiler.py and the
dist-info; data/README.md) whose bundled ``ptxas`` and ``ptxas-blackwell`` are stand-ins that print
what the real binaries printed for ``--version`` and ``--help`` (tests/kernels/data/tools/).  A
release newer than the data is made by judging with the data cut short (``settings_here``'s
``settings``): the real 3.8.0 and 3.9.0 files, read past where the cut data ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernels.test_jit import standin
from settings.test_settings import clean_env
from settings.test_settings_here import GB10, gb10, lines, with_vllm

from patchkit.cc import CC
from patchkit.commands.settings import SettingsVerified
from patchkit.fixes.settings import read_settings
from patchkit.gpus.smi import given
from patchkit.judge.settings import Need, missing, settings_here
from patchkit.render.settings import lines as doctor_lines
from patchkit.render.settings import setting_json, to_text
from patchkit.versions import at_least
from support.cli import invoke
from support.venvs import make_venv

DATA = Path(__file__).resolve().parent / "data"
BIN = "triton/backends/nvidia/bin"


def with_triton(site: Path, version: str) -> Path:
    """Triton ``version``'s sparse copy in ``site``, its two bundled ptxas as stand-ins of the real ones."""
    shutil.copytree(DATA / f"triton-{version}", site, dirs_exist_ok=True)
    for tool in ("ptxas", "ptxas-blackwell"):
        standin(site / BIN / tool, f"triton-{version}-{tool}")
    return site / BIN


def site_with(tmp_path: Path, version: str) -> Path:
    site = tmp_path / "site"
    site.mkdir(parents=True)
    with_triton(site, version)
    return site


def ptxas_setting(until: str | None = None):
    """triton-ptxas as the data has it, or with its spellings cut to those before ``until``."""
    [s] = [s for s in read_settings() if s.name == "triton-ptxas"]
    if until is None:
        return s
    return s._replace(spellings=tuple(sp for sp in s.spellings if not at_least(sp.since, until)))


def judge(site: Path, setting=None, **variables: str):
    return settings_here([site], clean_env(**variables), given(CC(12, 1)), (setting or ptxas_setting(),))


def test_each_release_read_is_judged_from_its_bundled_ptxas_blackwell(tmp_path: Path) -> None:
    for version, release in (("3.7.0", "13.1"), ("3.8.0", "13.3"), ("3.9.0", "13.4")):
        site = site_with(tmp_path / version, version)
        [h] = judge(site)
        assert (h.need, h.spelling.name, h.spelling.since, h.read_in) == (Need.NOT_NEEDED, "TRITON_PTXAS_BLACKWELL_PATH",
                                                                         version[:3], ())
        assert (h.asked.tool, h.asked.path, h.asked.release, h.asked.knows("sm_121a")) == (
            "ptxas-blackwell", str(site / BIN / "ptxas-blackwell"), release, True)
        # None of them needs it on 12.0 either: the setting is for 12.1 only.
        assert settings_here([site], clean_env(), given(CC(12, 0)), (ptxas_setting(),)) == []


def test_the_variable_is_judged_by_what_its_ptxas_answers(tmp_path: Path) -> None:
    """3.7.0's own ``ptxas`` (12.8, no sm_121a) named by TRITON_PTXAS_BLACKWELL_PATH: set wrongly, and the
    bundled ptxas-blackwell is what would do (before: "not needed", the variable never looked at)."""
    site = site_with(tmp_path, "3.7.0")
    old = str(site / BIN / "ptxas")
    [h] = judge(site, TRITON_PTXAS_BLACKWELL_PATH=old)
    assert (h.need, h.found, h.asked.release, h.value) == (Need.WRONG, old, "12.8", str(site / BIN / "ptxas-blackwell"))
    [h] = judge(site, TRITON_PTXAS_BLACKWELL_PATH=str(site / BIN / "ptxas-blackwell"))
    assert (h.need, h.asked.release) == (Need.SET, "13.1")
    # TRITON_PTXAS_PATH is not the variable 3.7.0 reads for 12.1: not looked at.
    [h] = judge(site, TRITON_PTXAS_PATH=old)
    assert (h.need, h.asked.path) == (Need.NOT_NEEDED, str(site / BIN / "ptxas-blackwell"))


def test_a_release_newer_than_the_data_is_read_from_its_knobs_and_compiler(tmp_path: Path) -> None:
    # Data cut before 3.8: 3.8.0 holds what showed 3.6-3.7's spelling, and is judged by its ptxas-blackwell.
    site = site_with(tmp_path / "38", "3.8.0")
    [h] = judge(site, ptxas_setting(until="3.8"))
    assert (h.need, h.spelling.since, h.read_in, h.asked.release) == (
        Need.NOT_NEEDED, "3.7", ("triton/knobs.py", "triton/backends/nvidia/compiler.py"), "13.3")
    assert doctor_lines([h])[1] == (
        "  triton-ptxas: not needed for 12.1 (Triton 3.8.0 (newer than patchkit's data: read in its triton/knobs.py and "
        f"triton/backends/nvidia/compiler.py) calls ptxas-blackwell 13.3 ({site / BIN / 'ptxas-blackwell'}), which knows sm_121a)")
    [h] = judge(site, ptxas_setting(until="3.8"), TRITON_PTXAS_BLACKWELL_PATH=str(tmp_path / "none"))
    assert (h.need, h.asked.problem) == (Need.WRONG, "not found")
    # Data cut before 3.9: 3.9.0's get_ptxas is not 3.8's: which ptxas it calls is not read, so not judged,
    # with what each ptxas it bundles answers -- never "not needed" like 3.8.0.
    site = site_with(tmp_path / "39", "3.9.0")
    [h] = judge(site, ptxas_setting(until="3.9"))
    assert (h.need, h.spelling, h.value, [(b.tool, b.release, b.knows("sm_121a")) for b in h.bundled]) == (
        Need.UNREAD, None, None, [("ptxas", "12.9", True), ("ptxas-blackwell", "13.4", True)])
    assert doctor_lines([h])[1] == (
        "  triton-ptxas: not judged for 12.1 (Triton 3.9.0 is newer than patchkit has read (its data ends before 3.9): "
        "its triton/knobs.py and triton/backends/nvidia/compiler.py do not hold what showed which ptxas the releases "
        f"read call for 12.1 and which variable names it; it bundles ptxas 12.9 ({site / BIN / 'ptxas'}), which knows "
        f"sm_121a; ptxas-blackwell 13.4 ({site / BIN / 'ptxas-blackwell'}), which knows sm_121a)")
    assert setting_json(h)["need"] == "newer than patchkit has read"
    # verify: not missing (no variable can be named), and its last line is no "ok".
    said = to_text(SettingsVerified("PY", (CC(12, 1),), (h,), tuple(missing([h]))), False)
    assert said[-2:] == [f"setting triton-ptxas: not judged for 12.1 ({doctor_lines([h])[1].split(' (', 1)[1][:-1]})",
                         "verify: none missing of 0 settings judged; not judged: triton-ptxas (newer than patchkit has read)"]
    # Older than every release the data reads: not said at all.
    assert judge(tmp_path / "38" / "site", ptxas_setting()._replace(spellings=ptxas_setting().spellings[-1:])) == []


def environment(tmp_path: Path, prebuilt, version: str) -> tuple[str, Path]:
    venv = make_venv(tmp_path / "V")
    site = next((venv / "lib").glob("python3*")) / "site-packages"
    with_triton(site, version)
    with_vllm(site, prebuilt)
    return str(venv / "bin" / "python"), site


def test_plain_verify_and_doctor_on_a_gb10_with_triton_390(tmp_path: Path, prebuilt) -> None:
    python, site = environment(tmp_path, prebuilt, "3.9.0")
    blackwell = site / BIN / "ptxas-blackwell"
    done = invoke("verify", "--python", python, env=gb10(tmp_path))
    assert (done.returncode, lines(done)[0], lines(done)[-1]) == (0, GB10, "verify: ok (1 setting judged, none missing)"), \
        done.stdout.decode()
    done = invoke("doctor", "--python", python, env=gb10(tmp_path))
    assert done.returncode == 0 and lines(done)[-1] == "nothing this machine needs is missing", done.stdout.decode()
    assert (f"  triton-ptxas: not needed for 12.1 (Triton 3.9.0 calls ptxas-blackwell 13.4 ({blackwell}), which knows "
            "sm_121a)") in lines(done)
    # TRITON_PTXAS_BLACKWELL_PATH naming a ptxas that does not know sm_121a (Triton 3.7.0's own ptxas 12.8):
    # verify fails with the setting's own code, and doctor --format env points it back at the bundled one.
    old = standin(tmp_path / "triton-3.7.0" / "ptxas", "triton-3.7.0-ptxas")
    env = gb10(tmp_path, TRITON_PTXAS_BLACKWELL_PATH=str(old))
    done = invoke("verify", "--python", python, env=env)
    assert (done.returncode, lines(done)[-2:]) == (5, [
        f"setting triton-ptxas: TRITON_PTXAS_BLACKWELL_PATH={old} does not do for 12.1 (Triton 3.9.0 calls ptxas-blackwell "
        f"12.8 ({old}), which does not know sm_121a)", "verify: 1 setting missing"]), done.stdout.decode()
    doc = json.loads(invoke("verify", "--python", python, "--json", env=env).stdout)
    [part] = [t for t in doc["targets"] if "settings_of" in t]
    assert [(s["setting"], s["need"], s["name"], s["value"]) for s in part["settings"] if s["setting"] == "triton-ptxas"] == [
        ("triton-ptxas", "set wrongly", "TRITON_PTXAS_BLACKWELL_PATH", str(blackwell))]
    done = invoke("doctor", "--python", python, "--format", "env", env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"export TRITON_PTXAS_BLACKWELL_PATH={blackwell}\n".encode(), b"")
    assert invoke("verify", "--python", python, env=gb10(tmp_path, TRITON_PTXAS_BLACKWELL_PATH=str(blackwell))).returncode == 0
