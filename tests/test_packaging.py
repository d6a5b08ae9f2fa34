"""patchkit as pip and ``python -m build`` package it: built without a setuptools warning, and
the wheel and the source archive hold every shipped series, template and fix file of the tree."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from support.repos import ROOT, copy_source

pytestmark = pytest.mark.network  # the build backends of isolated builds, fetched once into the cache

# What setuptools prints when a folder of data looks like a package it was not told about.
WARNINGS = ("_Warning", "SetuptoolsDeprecationWarning", "would be ignored", "is absent from the `packages`")


def shipped() -> list[str]:
    """Every shipped file of the tree, as the installed package names it (patchkit/...)."""
    files = [f"patchkit/patches/{p.relative_to(ROOT / 'patches').as_posix()}" for p in (ROOT / "patches").rglob("*") if p.is_file()]
    files += [f"patchkit/templates/{p.name}" for p in (ROOT / "templates").iterdir() if p.is_file()]
    files += [f"patchkit/fixes/{p.name}" for p in (ROOT / "patchkit/fixes").glob("*.toml")] + ["patchkit/fixes/data.json"]
    files += [f"patchkit/fixes/modes/{p.name}" for p in (ROOT / "patchkit/fixes/modes").glob("*.toml")] + ["patchkit/fixes/modes/data.json"]
    files += [f"patchkit/fixes/backports/{p.name}" for p in (ROOT / "patchkit/fixes/backports").glob("*.diff")]
    return sorted(files)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the folder with the wheel and the source archive ``python -m build`` made of a copy of the tree, what it printed).
    Its two isolated environments (the source archive's, then the wheel's built from it) get the build
    requirements from uv (``--installer uv``): the same setuptools and unidiff as pip would install, and the
    same bytes built, for a quarter less CPU time than venv and pip took."""
    tmp = tmp_path_factory.mktemp("build")
    src = tmp / "src"
    copy_source(src)
    cmd = [sys.executable, "-m", "build", "--installer", "uv", "-o", str(tmp / "dist"), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "dist", done.stdout + done.stderr


def test_build_prints_no_setuptools_warning(built: tuple[Path, str]) -> None:
    _, printed = built
    assert [line for line in printed.splitlines() if any(w in line for w in WARNINGS)] == []


def test_the_wheel_holds_every_shipped_file(built: tuple[Path, str]) -> None:
    dist, _ = built
    (wheel,) = dist.glob("patchkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [f for f in shipped() if f not in names] == []
    assert len(shipped()) > 300  # the SGLang, FlashInfer and vLLM series, templates, fixes


def test_the_source_archive_holds_every_shipped_file(built: tuple[Path, str]) -> None:
    dist, _ = built
    (sdist,) = dist.glob("patchkit-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    in_tree = [f.replace("patchkit/patches/", "patches/", 1).replace("patchkit/templates/", "templates/", 1) for f in shipped()]
    assert [f for f in in_tree if f not in names] == []


def test_pip_install_prints_no_setuptools_warning(tmp_path: Path) -> None:
    src = tmp_path / "src"
    copy_source(src)
    done = subprocess.run(
        # --no-compile: the files installed are the question, not their bytecode (left out below).
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(tmp_path / "t"), str(src)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    assert [line for line in printed.splitlines() if any(w in line for w in WARNINGS)] == []
    installed = sorted(p.relative_to(tmp_path / "t").as_posix() for p in (tmp_path / "t/patchkit").rglob("*")
                       if p.is_file() and p.suffix not in (".py", ".pyc"))
    assert installed == shipped()
