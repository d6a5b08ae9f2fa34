"""Finding the target: ``--python`` as people type it, and the root from inside a subfolder.

The real-install tests use a real SGLang 0.5.9 wheel (fetched once and cached, see
``support.mirror``) installed by pip in a real virtualenv (a copy of conftest's
``sglang_venv``), and in a user site under a temporary PYTHONUSERBASE (never the real
~/.local).  The commands run in this process (support.cli.invoke), from the folder each test names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.targets.environment import read_environment
from patchkit.targets.interpreter import interpreter, site_packages_of
from patchkit.targets.locate import CHECKOUT, DIRECTORY, INSTALLED, open_target
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.repos import DC, make_repo
from support.venvs import copy_venv, make_venv

NOT_FOUND = "not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, no package with a dist-info)"
PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
# What a virtualenv's site.getsitepackages() lists: platlibdir, then lib.
VENV_LIBS = tuple(dict.fromkeys((sys.platlibdir, "lib")))
BASE = Path(getattr(sys, "_base_executable", sys.executable))


def out(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.decode().splitlines()


def err(done: subprocess.CompletedProcess) -> list[str]:
    return done.stderr.decode().splitlines()


def described(site: Path) -> str:
    return f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info"


def status_target(site: Path) -> str:
    return f"target:   {site} (installed package; state in {site}/.patchkit-sglang)"


def venv_site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def asks(python: Path, code: str, env: dict) -> str:
    """What ``python`` itself says, run normally (with its site), in ``env``."""
    done = subprocess.run([str(python), "-c", code], env=env, capture_output=True, check=True)
    return done.stdout.decode().strip()


def user_env(userbase: Path, **more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONNOUSERSITE", "PYTHONPATH")}
    return dict(env, PYTHONUSERBASE=str(userbase), **more)


@pytest.fixture(scope="module")
def venv(sglang_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with SGLang 0.5.9 installed by pip (read only: tests that write copy it)."""
    return copy_venv(sglang_venv, tmp_path_factory.mktemp("installed") / "V")


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SGLang 0.5.9 as ``pip install --target`` lays it out (what ``pip install --user`` puts in a user site)."""
    folder = tmp_path_factory.mktemp("user-files")
    wheel = fetch_wheel("0.5.9", default_cache())
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(folder), str(wheel)]
    subprocess.run(cmd, check=True, capture_output=True)
    return folder


@pytest.fixture
def base() -> Path:
    """The real interpreter under the tests' virtualenv (not a virtualenv itself)."""
    assert not (BASE.parent.parent / "pyvenv.cfg").is_file(), BASE
    return BASE


# --python: a name on PATH, a virtualenv folder, bad input


@pytest.mark.parametrize("name", ["python3", "python"])
def test_bare_name_is_found_on_path_and_keeps_the_virtualenv(venv: Path, name: str) -> None:
    assert (venv / "bin" / name).is_symlink()  # resolving it would lose the virtualenv
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    site = venv_site(venv)
    done = invoke("status", "--python", name, env=env)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == status_target(site)
    done = invoke("apply", "--dry-run", "--python", name, env=env)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == described(site)


def test_virtualenv_folder_means_its_interpreter(venv: Path) -> None:
    done = invoke("apply", "--dry-run", "--python", str(venv))
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == described(venv_site(venv))
    assert interpreter(str(venv)) == venv / "bin/python"
    assert interpreter(f"{venv}/") == venv / "bin/python"


def test_a_shim_that_execs_a_virtualenv_python(venv: Path, tmp_path: Path) -> None:
    """Like a pyenv shim: a script on PATH that runs the real interpreter, which knows its virtualenv."""
    shim = tmp_path / "shims/python3"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{venv}/bin/python" "$@"\n')
    shim.chmod(0o755)
    done = invoke("status", "--python", "python3", env={"PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == status_target(venv_site(venv))


def test_name_not_on_path_is_one_line(tmp_path: Path) -> None:
    done = invoke("status", "--python", "nosuchpython", env={"PATH": str(tmp_path)})
    assert done.returncode == 2
    assert done.stdout == b""
    assert err(done) == ["patchkit: nosuchpython: not found on PATH"]


def test_name_of_a_folder_here_says_how_to_mean_it(venv: Path) -> None:
    done = invoke("status", "--python", "V", cwd=venv.parent, env={"PATH": str(venv.parent / "nothing")})
    assert done.returncode == 2
    assert err(done) == ["patchkit: V: not found on PATH (for the one in this folder, write ./V)"]
    done = invoke("status", "--python", "./V", cwd=venv.parent)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == status_target(venv_site(venv))


def _bad(tmp_path: Path, case: str) -> str:
    if case == "missing":
        return str(tmp_path / "nope/bin/python")
    if case == "folder":
        (tmp_path / "plain").mkdir()
        return str(tmp_path / "plain")
    if case == "venv without python":
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken/pyvenv.cfg").write_text("home = /nowhere\n")
        return str(tmp_path / "broken")
    if case == "not executable":
        (tmp_path / "python").write_text("#!/bin/sh\n")
        return str(tmp_path / "python")
    script = tmp_path / "quiet"
    script.write_text("#!/bin/sh\necho 'no python here' >&2\nexit 5\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    "case, reason",
    [
        ("missing", "no such file or directory"),
        ("folder", "a folder that is not a virtualenv (no pyvenv.cfg); give the interpreter itself"),
        ("venv without python", "a virtualenv without bin/python or bin/python3"),
        ("not executable", "not an executable file"),
        ("not python", "did not answer as a Python interpreter (exit 5: no python here)"),
    ],
)
def test_bad_python_is_one_line(tmp_path: Path, case: str, reason: str) -> None:
    given = _bad(tmp_path, case)
    for command in ("apply", "verify", "revert", "status"):
        done = invoke(command, "--python", given)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stdout == b""
        assert err(done) == [f"patchkit: {given}: {reason}"], command


def test_not_installed_names_the_interpreter_and_where_it_looked(tmp_path: Path) -> None:
    empty = make_venv(tmp_path / "E")
    done = invoke("status", "--python", "python3", env={"PATH": str(empty / "bin")})
    assert done.returncode == 2
    looked = ", ".join(str(empty / lib / PY / "site-packages") for lib in VENV_LIBS)
    # named as found on PATH: the symlink, not the base interpreter it points to
    assert err(done) == [f"patchkit: {empty}/bin/python3: sglang or vllm or flashinfer is not installed for this interpreter (looked in {looked})"]


# --python: the user site (pip install --user)


@pytest.fixture
def user_install(user_files: Path, base: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(PYTHONUSERBASE, its user site holding SGLang 0.5.9), the user site as ``base`` names it."""
    userbase = tmp_path / "userbase"
    usersite = Path(asks(base, "import site; print(site.getusersitepackages())", user_env(userbase)))
    assert usersite.is_relative_to(userbase)  # never the real ~/.local
    shutil.copytree(user_files, usersite, symlinks=True)
    return userbase, usersite


@pytest.mark.network
def test_user_install_is_found_for_a_base_interpreter(user_install: tuple[Path, Path], base: Path) -> None:
    userbase, usersite = user_install
    # the interpreter itself imports it from there
    spec = asks(base, "import importlib.util; print(importlib.util.find_spec('sglang').origin)", user_env(userbase))
    assert spec == str(usersite / "sglang/__init__.py")
    done = invoke("apply", "--dry-run", "--python", str(base), env={"PYTHONUSERBASE": str(userbase), "PYTHONNOUSERSITE": None})
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == described(usersite)


@pytest.mark.network
def test_pythonnousersite_hides_the_user_site(user_install: tuple[Path, Path], base: Path) -> None:
    userbase, usersite = user_install
    done = invoke("status", "--python", str(base), env={"PYTHONUSERBASE": str(userbase), "PYTHONNOUSERSITE": "1"})
    assert done.returncode == 2
    (line,) = err(done)
    assert line.startswith(f"patchkit: {base}: sglang or vllm or flashinfer is not installed for this interpreter (looked in ")
    assert str(userbase) not in line


@pytest.mark.network
def test_virtualenv_sees_the_user_site_only_with_system_site_packages(user_install: tuple[Path, Path], tmp_path: Path) -> None:
    userbase, usersite = user_install
    env = {"PYTHONUSERBASE": str(userbase), "PYTHONNOUSERSITE": None}
    closed = make_venv(tmp_path / "closed")
    done = invoke("status", "--python", str(closed), env=env)
    assert done.returncode == 2
    looked = ", ".join(str(closed / lib / PY / "site-packages") for lib in VENV_LIBS)
    assert err(done) == [f"patchkit: {closed}/bin/python: sglang or vllm or flashinfer is not installed for this interpreter (looked in {looked})"]
    opened = make_venv(tmp_path / "opened", "--system-site-packages")
    spec = asks(opened / "bin/python", "import importlib.util; print(importlib.util.find_spec('sglang').origin)", user_env(userbase))
    assert spec == str(usersite / "sglang/__init__.py")
    done = invoke("status", "--python", str(opened), env=env)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == status_target(usersite)


def _syspath_sites(python: Path, env: dict, ours: list[Path]) -> list[Path]:
    """The entries of ``python``'s own sys.path that are site-packages folders."""
    path = [Path(p) for p in json.loads(asks(python, "import json, sys; print(json.dumps(sys.path))", env))]
    assert all(p in ours for p in path if p.name in ("site-packages", "dist-packages")), (path, ours)
    return [p for p in path if p in ours]


@pytest.mark.parametrize("kind", ["base", "venv", "venv with system site-packages"])
def test_site_packages_in_the_interpreters_own_order(tmp_path: Path, base: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    userbase = tmp_path / "userbase"
    env = user_env(userbase)
    usersite = Path(asks(base, "import site; print(site.getusersitepackages())", env))
    usersite.mkdir(parents=True)  # site adds only folders that exist
    python = base
    if kind != "base":
        options = ("--system-site-packages",) if kind.endswith("site-packages") else ()
        python = make_venv(tmp_path / "V", *options) / "bin/python"
    monkeypatch.setenv("PYTHONUSERBASE", str(userbase))
    monkeypatch.delenv("PYTHONNOUSERSITE", raising=False)
    ours = site_packages_of(python)
    assert [p for p in ours if p.is_dir()] == _syspath_sites(python, env, ours)
    assert (usersite in ours) == (kind != "venv")
    assert (ours[0] == usersite) == (kind == "base")  # a virtualenv's own site-packages come first


# the root from inside a subfolder


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("walk") / "sglang")


@pytest.mark.parametrize("sub", ["", "python", "python/sglang", DC])
def test_open_target_walks_up_a_checkout(checkout: Path, sub: str) -> None:
    target = open_target(checkout / sub)
    assert (target.root, target.kind, target.state_dir) == (checkout, CHECKOUT, checkout / ".git/patchkit")


def test_nearest_root_wins(tmp_path: Path) -> None:
    make_repo(tmp_path / "outer", {"v0.5.5": {"README": b"outer\n"}})
    (tmp_path / "outer/python/sglang").mkdir(parents=True)
    inner = tmp_path / "outer/vendor/copy"  # a plain copy inside the checkout
    (inner / DC).mkdir(parents=True)
    target = open_target(inner / DC)
    assert (target.root, target.kind) == (inner, DIRECTORY)
    site = tmp_path / "outer/.venv/lib" / PY / "site-packages"
    (site / "sglang/srt").mkdir(parents=True)
    (site / "sglang/__init__.py").write_text("")
    (site / "sglang-0.5.9.dist-info").mkdir()
    target = open_target(site / "sglang/srt")
    assert (target.root, target.kind) == (site, INSTALLED)
    target = open_target(tmp_path / "outer/vendor")
    assert (target.root, target.kind) == (tmp_path / "outer", CHECKOUT)


def test_vllm_checkout_from_a_subfolder(tmp_path: Path) -> None:
    files = {"vllm/__init__.py": b"", "vllm/distributed/device_communicators/all_reduce_utils.py": b"X = 1\n"}
    repo = make_repo(tmp_path / "vllm", {"v0.11.0": files})
    target = open_target(repo / "vllm/distributed")
    assert (target.root, target.kind, target.project.name) == (repo, CHECKOUT, "vllm")


def test_site_packages_counts_on_the_way_up_only_through_the_package(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for folder in ("sglang", "sglang-0.5.9.dist-info", "torch/cuda"):
        (site / folder).mkdir(parents=True)
    (site / "sglang/__init__.py").write_text("")
    assert open_target(site).root == site
    with pytest.raises(BadInput) as raised:
        open_target(site / "torch/cuda")
    assert str(raised.value) == f"{site / 'torch/cuda'}: {NOT_FOUND}"


def test_nothing_up_to_the_root_keeps_the_message(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    done = invoke("status", cwd=tmp_path / "a/b")
    assert done.returncode == 2
    assert err(done) == [f"patchkit: .: {NOT_FOUND}"]
    done = invoke("apply", str(tmp_path / "a/b"))
    assert done.returncode == 2
    assert err(done) == [f"patchkit: {tmp_path}/a/b: {NOT_FOUND}"]


def test_apply_and_status_from_inside_a_checkout(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "sglang")
    deep = repo / DC
    # The default fixes by name: SGLang 0.5.16 only warns without torch-symm-mem (a plain apply leaves it out).
    done = invoke("apply", "--fix", "deepgemm-sm12x", "--fix", "fusion-self-enable", "--fix", "torch-symm-mem", cwd=deep)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == f"{repo}: SGLang 0.5.16, tag v0.5.16 at HEAD"
    done = invoke("status", str(repo / "python/sglang"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == f"target:   {repo} (git checkout; state in {repo}/.git/patchkit)"
    assert f"  {DC}/torch_symm_mem.py: patched; 0 cached bytecode files" in out(done)
    assert invoke("verify", "srt", cwd=repo / "python/sglang").returncode == 0
    assert invoke("revert", cwd=repo / "python").returncode == 0
    assert invoke("verify", str(deep), "--fix", "torch-symm-mem").returncode == 1


def test_apply_and_status_from_inside_an_installed_package(venv: Path, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for name in ("sglang", "sglang-0.5.9.dist-info"):
        shutil.copytree(venv_site(venv) / name, site / name, symlinks=True)
    deep = site / "sglang/srt/distributed/device_communicators"
    done = invoke("apply", "--no-generate", cwd=deep)
    assert done.returncode == 0, done.stderr
    assert out(done)[:2] == [
        described(site),
        "applied shipped patch patches/0.5.9/0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch + patches/0.5.9/0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch",
    ]
    assert (site / ".patchkit-sglang/state.json").is_file()
    done = invoke("status", str(site / "sglang/srt"))
    assert done.returncode == 0, done.stderr
    assert out(done)[0] == status_target(site)
    assert invoke("verify", cwd=site / "sglang").returncode == 0
    assert invoke("revert", "distributed", cwd=site / "sglang/srt").returncode == 0
    assert invoke("verify", str(deep)).returncode == 1


def test_installed_package_in_process(venv: Path) -> None:
    assert [i.site for i in read_environment(str(venv)).installs] == [venv_site(venv)]
    assert [i.site for i in read_environment(str(venv / "bin/python3")).installs] == [venv_site(venv)]


def test_python_finds_vllm_without_project(tmp_path: Path) -> None:
    """--python without --project looks for every project patchkit knows (vLLM here, in
    the shape of an installed vLLM: the package with its tables and a dist-info)."""
    from support.repos import UTILS_OLD

    env = make_venv(tmp_path / "V")
    site = venv_site(env)
    dc = site / "vllm/distributed/device_communicators"
    dc.mkdir(parents=True)
    (site / "vllm/__init__.py").write_text("")
    (dc / "all_reduce_utils.py").write_bytes(
        UTILS_OLD.replace(b"    9: {", b'    "9.0": {').replace(b"    10: {", b'    "10.0": {'))
    (site / "vllm-0.11.0.dist-info").mkdir()
    (site / "vllm-0.11.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
    done = invoke("apply", "--python", str(env / "bin/python"), "--dry-run", "--fix", "torch-symm-mem")  # vLLM only warns without it: named
    assert done.returncode == 0, done.stderr.decode()
    assert out(done)[0] == f"{site / 'vllm'}: vLLM 0.11.0 (installed), from vllm-0.11.0.dist-info"
    assert "  would patch vllm/distributed/device_communicators/all_reduce_utils.py (+4 lines)" in out(done)


def test_the_candidate_files_are_what_glob_finds_that_is_a_file(tmp_path: Path) -> None:
    """``_matching`` reads the folder of a pattern whose last component alone is a wildcard;
    what it finds is what ``Path.glob`` finds that is a file (links to files included, dotfiles
    matched by ``*``, folders and broken links not)."""
    from patchkit.targets.locate import _matching

    dc = tmp_path / "python/sglang/srt/dc"
    dc.mkdir(parents=True)
    for name in ("a.py", ".hidden.py", "b.txt", "c.PY"):
        (dc / name).write_text("x")
    (dc / "folder.py").mkdir()
    (dc / "link.py").symlink_to(dc / "a.py")
    (dc / "broken.py").symlink_to(dc / "missing.py")
    (tmp_path / "top.py").write_text("x")
    (tmp_path / "file").write_text("x")
    patterns = ["python/sglang/srt/dc/*.py", "python/sglang/srt/dc/a.py", "python/sglang/srt/dc/?.py", "python/sglang/srt/dc/[ab].*",
                "python/sglang/srt/dc/missing.py", "python/sglang/srt/nowhere/*.py", "file/*.py", "file/a.py", "*.py", "top.py",
                "python/*/srt/dc/*.py", "python/sglang/srt/dc/folder.py"]
    for pattern in patterns:
        assert sorted(_matching(tmp_path, pattern)) == sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob(pattern)
                                                              if p.is_file()), pattern
