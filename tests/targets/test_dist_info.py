"""Dist-infos (``patchkit.targets.dist_info``): the version as the folder's name says it, RECORD as CSV
rows read through the bounded reader; a RECORD row whose path holds a comma is one quoted CSV field,
read right; a RECORD that is a FIFO is one line naming it, never a hang.

Each environment is a copy of conftest's ``sglang_venv`` (the real SGLang 0.5.9 wheel installed
by pip); rows are added to its RECORD with ``csv.writer``, as pip writes them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.targets import dist_info
from patchkit.targets.session import Session
from support.venvs import copy_venv

COMM = "sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py"
INFO = "sglang-0.5.9.dist-info"


@pytest.fixture
def site(sglang_venv: Path, tmp_path: Path) -> Path:
    return next((copy_venv(sglang_venv, tmp_path / "V") / "lib").glob("python3*/site-packages"))


def add_rows(site: Path, *paths: str) -> None:
    """Files at ``paths`` (below ``site``), each with its RECORD row as pip writes it (csv.writer)."""
    with open(site / INFO / "RECORD", "a", newline="", encoding="utf-8") as f:
        for path in paths:
            data = f"# {path}\n".encode()
            (site / path).write_bytes(data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            csv.writer(f).writerow([path, f"sha256={digest}", len(data)])


def test_a_path_with_a_comma_is_one_quoted_field(site: Path) -> None:
    """pip quotes a path with a comma in it: its row gives that path and its hash, like any other
    (read with split(","), the path stopped at the comma and its hash was never found)."""
    odd = "sglang/srt/distributed/device_communicators/a,b.py"
    add_rows(site, odd)
    record = (site / INFO / "RECORD").read_bytes()
    assert f'"{odd}",sha256='.encode() in record
    session = Session.open(site)
    hashes = session.installed_hashes([f"python/{odd}", f"python/{COMM}"])
    assert hashes == {f"python/{odd}": hashlib.sha256((site / odd).read_bytes()).hexdigest(),
                      f"python/{COMM}": hashlib.sha256((site / COMM).read_bytes()).hexdigest()}
    rows = {row.path: row for row in dist_info.record(site / INFO)}
    assert rows[odd].size == len(f"# {odd}\n") and rows[odd].hash.mode == "sha256"


def test_kernels_finds_a_shared_object_with_a_comma_in_its_name(site: Path) -> None:
    from patchkit.kernels.installed import distributions

    add_rows(site, "sglang/lib,cuda.so", "sglang/lib_cuda.so.13")
    (sglang,) = [d for d in distributions([site]) if d.name == "sglang"]
    assert (sglang.version, sglang.problem) == ("0.5.9", None)
    assert sglang.shared == ("sglang/lib,cuda.so", "sglang/lib_cuda.so.13")


def _distributions_in_a_child(site: Path) -> str:
    """``distributions([site])``'s problem for sglang, in a child process under a time limit:
    before RECORD went through the bounded reader, a FIFO blocked open() for good."""
    code = ("import sys; from pathlib import Path; from patchkit.kernels.installed import distributions; "
            "print([d.problem for d in distributions([Path(sys.argv[1])]) if d.name == 'sglang'][0])")
    done = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().rstrip("\n")


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero"])
def test_a_record_that_is_a_fifo_or_a_device_is_a_problem_named(site: Path, kind: str) -> None:
    record = site / INFO / "RECORD"
    record.unlink()
    if kind == "FIFO":
        os.mkfifo(record)
    else:
        record.symlink_to("/dev/zero")
    noun = "a FIFO" if kind == "FIFO" else "a device"
    assert _distributions_in_a_child(site) == f"{record}: {noun}, not a regular file: patchkit reads a RECORD from regular files only"


def test_a_record_row_that_is_not_path_hash_size(site: Path) -> None:
    """A row that is not path,hash,size (a blank line, a size that is no number) makes
    the RECORD unreadable, named in one line, where it is among the rows a command parses: kernels
    parses the rows of shared objects, apply and verify those of the files they patch."""
    record = site / INFO / "RECORD"
    record.write_bytes(record.read_bytes() + b"\r\n\r\nsglang/x.py,,\r\n")
    with pytest.raises(dist_info.MalformedRecord) as caught:
        dist_info.record(site / INFO)
    unreadable = (f"{record}: unreadable RECORD: a row that is not path,hash,size (a blank line, more than three "
                  "columns or a size that is no number)")
    assert str(caught.value) == unreadable
    assert _distributions_in_a_child(site) == "None"  # no row of a shared object is bad
    assert Session.open(site).installed_hashes([f"python/{COMM}"]) == {
        f"python/{COMM}": hashlib.sha256((site / COMM).read_bytes()).hexdigest()}
    assert [row.path for row in dist_info.record(site / INFO, [COMM, "sglang/x.py"])] == [COMM, "sglang/x.py"]
    record.write_bytes(record.read_bytes() + f"sglang/lib_cuda.so,sha256=x,big\r\n{COMM},sha256=x,big\r\n".encode())
    assert _distributions_in_a_child(site) == unreadable
    assert Session.open(site).installed_hashes([f"python/{COMM}"]) == {}  # no hash trusted from it


def test_the_version_is_what_the_folder_name_says(site: Path) -> None:
    """``{name}-{version}.dist-info``, as pip wrote it for the real wheel, and the Version its METADATA holds; the
    METADATA itself is not read (a FIFO there holds nothing up), and a name with no version says none."""
    meta = site / INFO / "METADATA"
    assert "\nVersion: 0.5.9\n" in meta.read_text()
    assert dist_info.version(site / INFO) == "0.5.9"
    assert Session.open(site).how == f"from {INFO}"
    meta.unlink()
    os.mkfifo(meta)
    assert (dist_info.version(site / INFO), Session.open(site).version) == ("0.5.9", "0.5.9")
    assert [dist_info.version(Path(name)) for name in ("sglang.dist-info", "sglang-0.5.9+cu128.dist-info")] == [None, "0.5.9+cu128"]
