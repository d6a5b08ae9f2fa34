"""targets/environment.py: a known project that is installed in a form patchkit cannot read
or patch is exit 2 naming the file, never "not installed" and never "ok".

Each case starts from a copy of conftest's ``sglang_venv`` (the real 0.5.9 wheel, installed
by pip) and breaks it the way a half-done uninstall, a hand edit or another installer does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.targets.environment import EDITABLE, WHEEL, read_environment
from support.cli import invoke
from support.venvs import copy_venv


def site_of(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


@pytest.fixture
def venv(sglang_venv: Path, tmp_path: Path) -> Path:
    return copy_venv(sglang_venv, tmp_path / "V")


def refused(venv: Path) -> list[str]:
    """What each of verify, apply, status and revert says of the environment; all alike."""
    said = set()
    for command in ("verify", "apply", "status", "revert"):
        done = invoke(command, "--python", str(venv))
        assert done.returncode == 2, (command, done.stdout.decode())
        assert done.stdout == b"" and b"Traceback" not in done.stderr
        said.add(done.stderr.decode())
    assert len(said) == 1
    return said.pop().splitlines()


def test_a_wheel_is_found_as_a_wheel(venv: Path) -> None:
    env = read_environment(str(venv))
    assert [(i.project, i.how, i.site) for i in env.installs] == [("sglang", WHEEL, site_of(venv))]
    assert env.missing == ["vllm", "flashinfer"]


def test_a_dist_info_without_its_package(venv: Path) -> None:
    shutil.rmtree(site_of(venv) / "sglang")
    info = site_of(venv) / "sglang-0.5.9.dist-info"
    assert refused(venv) == [
        f"patchkit: {info}: a dist-info of SGLang without its package sglang/ beside it (a half-done install or uninstall?); reinstall it"
    ]


def test_a_package_without_a_dist_info(venv: Path) -> None:
    shutil.rmtree(site_of(venv) / "sglang-0.5.9.dist-info")
    assert refused(venv) == [
        f"patchkit: {site_of(venv) / 'sglang'}: SGLang without a dist-info: patchkit cannot tell which release it is; reinstall it with pip"
    ]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"dir_info": {"editable": true}}', "\udcff"])
def test_an_unreadable_direct_url_json(venv: Path, text: str) -> None:
    direct = site_of(venv) / "sglang-0.5.9.dist-info/direct_url.json"
    direct.write_bytes(text.encode("utf-8", "surrogateescape"))
    line = refused(venv)
    assert len(line) == 1 and line[0].startswith(f"patchkit: {direct}: unreadable direct_url.json ("), line


def test_an_editable_install_from_a_remote_url(venv: Path) -> None:
    direct = site_of(venv) / "sglang-0.5.9.dist-info/direct_url.json"
    direct.write_text(json.dumps({"url": "https://example.invalid/sglang", "dir_info": {"editable": True}}))
    assert refused(venv) == [f"patchkit: {direct}: an editable install from 'https://example.invalid/sglang', which is not a local folder"]


def test_a_wheel_with_a_direct_url_that_is_not_editable_is_a_wheel(venv: Path) -> None:
    """pip writes direct_url.json for a wheel installed from a file too (PEP 610 archive_info)."""
    direct = site_of(venv) / "sglang-0.5.9.dist-info/direct_url.json"
    direct.write_text(json.dumps({"url": "file:///tmp/sglang-0.5.9-py3-none-any.whl", "archive_info": {}}))
    assert [i.how for i in read_environment(str(venv)).installs] == [WHEEL]


def test_a_zipped_egg(venv: Path) -> None:
    site = site_of(venv)
    shutil.rmtree(site / "sglang")
    shutil.rmtree(site / "sglang-0.5.9.dist-info")
    egg = site / "sglang-0.5.9-py3.11.egg"
    subprocess.run(["zip", "-q", "-r", str(egg), "."], cwd=site, check=False, capture_output=True)
    if not egg.exists():
        egg.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip archive
    assert refused(venv) == [
        f"patchkit: {egg}: a zipped egg of SGLang: patchkit cannot patch files inside a zip archive; reinstall it with pip"
    ]


def test_a_legacy_egg_link_to_a_checkout(venv: Path, tmp_path: Path) -> None:
    """``setup.py develop`` writes ``<name>.egg-link``: the project folder, then the relative path (``.``)."""
    site = site_of(venv)
    checkout = tmp_path / "sglang"
    shutil.move(site / "sglang", checkout / "python/sglang")
    shutil.rmtree(site / "sglang-0.5.9.dist-info")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    (site / "sglang.egg-link").write_text(f"{checkout / 'python'}\n.")
    (install,) = read_environment(str(venv)).installs
    assert (install.how, install.package, install.via) == (EDITABLE, checkout / "python/sglang", site / "sglang.egg-link")
    done = invoke("verify", "--python", str(venv))
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[1] == (
        f"{checkout}/python/sglang: SGLang 0.5.9 (editable install of {checkout}, declared in python/sglang/_version.py)"
    )
    shutil.rmtree(checkout)
    assert refused(venv) == [
        f"patchkit: {site / 'sglang.egg-link'}: an editable install of SGLang from {checkout / 'python'}, which is not there (moved or deleted?); reinstall it"
    ]


def test_bad_input_is_raised_not_printed(venv: Path) -> None:
    shutil.rmtree(site_of(venv) / "sglang")
    with pytest.raises(BadInput):
        read_environment(str(venv))


@pytest.mark.parametrize("url, folder", [
    ("file:///sgl-workspace/sglang/python", "/sgl-workspace/sglang/python"),
    ("file://localhost/opt/my%20src/sglang/python", "/opt/my src/sglang/python"),
    ("file:///opt/caf%C3%A9/python", "/opt/café/python"),
])
def test_direct_url_json_names_a_local_folder(tmp_path: Path, url: str, folder: str) -> None:
    from patchkit.targets.environment import _direct_url

    direct = tmp_path / "direct_url.json"
    direct.write_text(json.dumps({"url": url, "dir_info": {"editable": True}}))
    assert _direct_url(direct) == folder
