"""Virtualenvs of the interpreter that runs the tests, with real wheels installed by pip."""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path


def make_venv(path: Path, *options: str) -> Path:
    """A virtualenv of the interpreter that runs the tests, without pip (pip runs from outside)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(path)], check=True, capture_output=True)
    return path


# The file ``pip --python PYTHON`` runs with PYTHON: this interpreter's pip, run by another
# interpreter, for that interpreter's environment (which needs no pip of its own).
PIP_RUNNER = str(Path(importlib.util.find_spec("pip").origin).parent / "__pip-runner__.py")


def pip_command(python: Path | str, *args: str) -> list[str]:
    """``pip ARGS`` for the environment of ``python``: what ``python -m pip --python PYTHON ARGS``
    runs, without the first pip process that only starts this one (nor its look at the index for a newer pip)."""
    return [str(python), PIP_RUNNER, "--disable-pip-version-check", *args]


def pip_install(python: Path | str, *args: str) -> None:
    """``pip install ARGS`` into the environment of ``python``, by this interpreter's pip (``pip_command``)."""
    cmd = pip_command(python, "install", "-q", "--no-deps", "--no-index", "--no-compile", *args)
    subprocess.run(cmd, check=True, capture_output=True)


def copy_venv(template: Path, dest: Path) -> Path:
    """A copy of a virtualenv, byte for byte (so every RECORD hash holds); its bin/python
    links to the same base interpreter, and it finds its own site-packages from there.
    (Console scripts keep the template's path on their #! line: no test runs them.)"""
    if dest.exists():
        raise FileExistsError(dest)
    subprocess.run(["cp", "-a", str(template), str(dest)], check=True, capture_output=True)  # copytree(symlinks=True), faster
    return dest


def copy_installed(template: Path, dest: Path, dist_info: str) -> None:
    """What pip installed for one distribution in the virtualenv ``template`` (the files its
    ``dist_info/RECORD`` lists: packages, modules, scripts), copied into the virtualenv ``dest`` at
    the same places, byte for byte (a script keeps the template's path on its #! line, as with
    ``copy_venv``).  For an environment that another installer made (a uv venv)."""
    site = next((template / "lib").glob("python3*/site-packages"))
    lib = site.relative_to(template)  # lib/python3.X/site-packages
    # What each file of RECORD is part of: its top entry in site-packages (a package folder, a module),
    # or the file itself elsewhere (bin/ of a script).
    units = set()
    for row in csv.reader(io.StringIO((site / dist_info / "RECORD").read_text())):
        path = Path(os.path.normpath(site / row[0])).relative_to(template)
        units.add(lib / path.relative_to(lib).parts[0] if path.is_relative_to(lib) else path)
    for parent in {u.parent for u in units}:
        (dest / parent).mkdir(parents=True, exist_ok=True)
        sources = sorted(str(template / u) for u in units if u.parent == parent)
        subprocess.run(["cp", "-a", *sources, str(dest / parent)], check=True, capture_output=True)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def link_installed(template: Path, dest: Path) -> Path:
    """What pip installed in the virtualenv ``template`` (its site-packages, its console scripts),
    hard-linked into the fresh virtualenv ``dest`` (``make_venv``): the same bytes, unpacked once.
    The links are the template's files: nothing may write to them (a test that writes takes a
    ``copy_venv``, which copies every byte, links or not); files added beside them are ``dest``'s
    own, as are its interpreter links, activate scripts and pyvenv.cfg."""
    site = site_packages(dest)
    subprocess.run(["cp", "-al", f"{site_packages(template)}/.", str(site)], check=True, capture_output=True)
    for entry in os.scandir(template / "bin"):  # the console scripts (#! the template's python, as in a copy)
        if not os.path.lexists(dest / "bin" / entry.name):
            os.link(entry.path, dest / "bin" / entry.name, follow_symlinks=False)
    return dest


def snapshot(root: Path) -> dict[str, str]:
    """Each file below ``root`` (a link to a file followed, a link to a folder not entered, as
    ``rglob``) -> the sha256 of its bytes: what a read-only command must leave as it was.  hashlib's
    (OpenSSL's) sha256, six times faster than the one patchkit.digest takes for its start-up: a venv
    holds 100 to 300 MB."""
    import hashlib

    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return found
