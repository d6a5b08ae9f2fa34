"""What Python's import system finds for ``--python EXE`` is what patchkit judges: never a
checkout that a leftover editable finder names while Python imports ``site-packages/sglang``,
never "not installed" for an unzipped egg on the path, never the lexically first of two
dist-infos (targets/import_path.py).

Every environment is the real SGLang 0.5.9 wheel installed by pip (conftest's ``sglang_venv``),
with what another installer leaves beside it: a real editable install of SGLang 0.5.8 (its
release's files and build configuration, ``pip install -e``) that a later ``pip install
--ignore-installed`` of the 0.5.9 wheel did not remove; an unzipped egg (setuptools' layout:
the package and ``EGG-INFO/PKG-INFO``, named by ``easy-install.pth``) made of the 0.5.9 wheel's
files; the 0.5.23 wheel's real dist-info beside 0.5.9's files.  The interpreter itself is the
oracle of where ``import sglang`` goes (``importlib.util.find_spec``: finds the package and
runs nothing of it).
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.venvs import copy_venv, make_venv, pip_install

DC = "sglang/srt/distributed/device_communicators"


def site_of(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def imported(venv: Path) -> Path:
    """Where the environment's own interpreter finds ``sglang`` (its __init__.py)."""
    done = subprocess.run([str(venv / "bin/python"), "-c", "import importlib.util as u; print(u.find_spec('sglang').origin)"],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def refused(venv: Path) -> str:
    """What verify, apply, status and revert say of the environment: the same one line, exit 2."""
    said = set()
    for command in ("verify", "apply", "status", "revert"):
        done = invoke(command, "--python", str(venv))
        assert (done.returncode, done.stdout) == (2, b""), (command, done.stdout.decode(), done.stderr.decode())
        said.add(done.stderr.decode())
    (line,) = said
    assert line.count("\n") == 1 and "Traceback" not in line
    return line.rstrip("\n")


@pytest.fixture(scope="module")
def stale_editable(tmp_path_factory: pytest.TempPathFactory, prebuilt) -> Path:
    """SGLang 0.5.8 installed editable (setuptools' finder), then the 0.5.9 wheel installed over it
    with --ignore-installed: pip leaves the editable's .pth, finder and dist-info in place."""
    from support.image import pip_editable, shallow_clone

    base = tmp_path_factory.mktemp("stale")
    checkout = shallow_clone(prebuilt.origin("0.5.8"), "v0.5.8", base / "sglang")
    venv = make_venv(base / "V")
    pip_editable(venv / "bin/python", checkout, backend=prebuilt.build_backend())
    pip_install(venv / "bin/python", "--ignore-installed", str(fetch_wheel("0.5.9", default_cache())))
    return venv


def test_a_stale_editable_finder_beside_the_wheel_python_imports(stale_editable: Path, tmp_path: Path) -> None:
    venv = copy_venv(stale_editable, tmp_path / "V")
    site = site_of(venv)
    assert {p.name for p in site.iterdir()} >= {"__editable__.sglang-0.5.8.pth", "__editable___sglang_0_5_8_finder.py",
                                                 "sglang", "sglang-0.5.8.dist-info", "sglang-0.5.9.dist-info"}
    assert imported(venv) == site / "sglang/__init__.py"  # the finder comes after the path
    checkout = stale_editable.parent / "sglang"
    assert refused(venv) == (
        f"patchkit: {site}/__editable__.sglang-0.5.8.pth: SGLang at {checkout}/python/sglang, which Python does not import: "
        f"it imports {site}/sglang (setuptools' editable finder is asked only when no folder on sys.path holds the package); "
        "the two installs disagree: `pip uninstall sglang` until none is left, then reinstall the one you want"
    )
    assert not (checkout / ".git/patchkit").exists()  # the checkout the finder names was never written


def test_a_leftover_finder_no_dist_info_records(stale_editable: Path, tmp_path: Path) -> None:
    venv = copy_venv(stale_editable, tmp_path / "V")
    site = site_of(venv)
    shutil.rmtree(site / "sglang-0.5.8.dist-info")
    assert imported(venv) == site / "sglang/__init__.py"
    assert refused(venv).endswith(
        "the two installs disagree: no sglang-0.5.8.dist-info records that editable install any more: remove "
        f"__editable__.sglang-0.5.8.pth and __editable___sglang_0_5_8_finder.py from {site}")
    (site / "__editable__.sglang-0.5.8.pth").unlink()  # as the line says: then the wheel is what is judged
    (site / "__editable___sglang_0_5_8_finder.py").unlink()
    done = invoke("verify", "--python", str(venv))
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[1] == f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info"


def test_the_editable_install_alone_is_still_its_checkout(stale_editable: Path, tmp_path: Path) -> None:
    """Leaves alone: without the wheel's package, Python asks the finder, and so does patchkit."""
    venv = copy_venv(stale_editable, tmp_path / "V")
    site = site_of(venv)
    shutil.rmtree(site / "sglang")
    shutil.rmtree(site / "sglang-0.5.9.dist-info")
    checkout = stale_editable.parent / "sglang"
    assert imported(venv) == checkout / "python/sglang/__init__.py"
    done = invoke("verify", "--python", str(venv))
    assert done.returncode == 1, done.stderr.decode()
    assert done.stdout.decode().splitlines()[1] == (
        f"{checkout}/python/sglang: SGLang 0.5.8 (editable install of {checkout}, tag v0.5.8 at HEAD)")


@pytest.fixture
def venv(sglang_venv: Path, tmp_path: Path) -> Path:
    return copy_venv(sglang_venv, tmp_path / "V")


def test_an_unzipped_egg_on_the_path(venv: Path) -> None:
    site = site_of(venv)
    egg = site / "sglang-0.5.9-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    shutil.move(site / "sglang", egg / "sglang")
    shutil.move(site / "sglang-0.5.9.dist-info/METADATA", egg / "EGG-INFO/PKG-INFO")
    shutil.rmtree(site / "sglang-0.5.9.dist-info")
    (site / "easy-install.pth").write_text("./sglang-0.5.9-py3.11.egg\n")
    assert imported(venv) == egg / "sglang/__init__.py"
    assert refused(venv) == (
        f"patchkit: {egg}: an unzipped egg of SGLang, on sys.path through easy-install.pth: patchkit judges a release by its "
        "dist-info (its name, its RECORD), which an egg does not have; reinstall it with pip")
    (site / "easy-install.pth").unlink()  # no .pth names it: Python imports nothing, patchkit still names the egg
    assert refused(venv).startswith(f"patchkit: {egg}: an unzipped egg of SGLang that no .pth puts on sys.path")


def test_two_dist_infos_of_one_project(venv: Path) -> None:
    site = site_of(venv)
    with zipfile.ZipFile(fetch_wheel("0.5.23", default_cache())) as wheel:
        wheel.extractall(site, [n for n in wheel.namelist() if n.startswith("sglang-0.5.23.dist-info/")])
    assert refused(venv) == (
        f"patchkit: {site}: two dist-infos of SGLang, sglang-0.5.23.dist-info and sglang-0.5.9.dist-info: importlib.metadata "
        "takes whichever the folder lists first, so which release this is cannot be told (a half-done upgrade?); "
        "`pip uninstall sglang` until none is left, then reinstall it")


def test_code_lines_of_a_pth_are_never_run_and_leave_the_judgement_alone(venv: Path, tmp_path: Path) -> None:
    """Leaves alone: setuptools' own distutils-precedence.pth line (code, not a folder), a
    comment, and a folder that does not exist change nothing; nothing of them runs."""
    site = site_of(venv)
    ran = tmp_path / "ran"
    (site / "distutils-precedence.pth").write_text(
        "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
        "enabled and __import__('_distutils_hack').add_shim(); \n"
        f"# a comment\n{tmp_path / 'gone'}\nimport pathlib; pathlib.Path({str(ran)!r}).touch()\n")
    done = invoke("verify", "--python", str(venv))
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[:2] == [
        f"{venv}/bin/python: SGLang (wheel); not installed: vLLM, FlashInfer",
        f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
    ]
    assert not ran.exists()


def test_a_pth_that_rewrites_sys_path_with_two_places(venv: Path, tmp_path: Path) -> None:
    """The old easy-install.pth lines move what they add to the front of sys.path, in code
    patchkit does not run: with the package in two places, which one Python imports is unknown."""
    site = site_of(venv)
    other = tmp_path / "other"
    shutil.copytree(site / "sglang", other / "sglang")
    (site / "easy-install.pth").write_text(
        "import sys; sys.__plen = len(sys.path)\n"
        f"{other}\n"
        "import sys; new = sys.path[sys.__plen:]; del sys.path[sys.__plen:]; p = getattr(sys, '__egginsert', 0); "
        "sys.path[p:p] = new; sys.__egginsert = p + len(new)\n")
    assert imported(venv) == other / "sglang/__init__.py"  # the code did move it first
    assert refused(venv) == (
        f"patchkit: {site}/easy-install.pth: runs code that rewrites sys.path, which patchkit never runs: it cannot tell "
        f"whether Python imports SGLang from {site}/sglang or from {other}/sglang")


def test_an_unparseable_candidate_beside_the_shipped_patch(venv: Path) -> None:
    """A file that names a table apply would patch and cannot be parsed: apply refuses with the
    line verify prints for it, and writes nothing."""
    site = site_of(venv)
    broken = site / DC / "broken.py"
    broken.write_text("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {\n    9: (\n")
    line = f"{DC}/broken.py: cannot parse: line 2: '(' was never closed"
    before = {p: p.read_bytes() for p in (site / DC).glob("*.py")}
    done = invoke("apply", "--python", str(venv))
    assert (done.returncode, done.stdout, done.stderr.decode()) == (3, b"", f"patchkit: {line}\n")
    assert {p: p.read_bytes() for p in (site / DC).glob("*.py")} == before
    assert not (site / ".patchkit-sglang").exists()
    done = invoke("verify", "--python", str(venv))
    assert done.returncode == 1 and line in done.stdout.decode().splitlines()
    broken.write_text("from .all_reduce_utils import TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES\n")  # leaves alone: it parses
    done = invoke("apply", "--python", str(venv))
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines()[1].startswith("applied shipped patch patches/0.5.9/")
    assert invoke("verify", "--python", str(venv)).returncode == 0
