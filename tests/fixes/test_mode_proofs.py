"""Every bound of a failure mode (patchkit/fixes/modes/*.toml) and every way out that names released
files rests on them: each proof is a file of a release's wheel that holds (or lacks) a text.  Read
here in the real wheels (support.released: the members kept in ~/.cache/patchkit/members, else the
cached wheel, else parts of the wheel on the index pip is configured with), then the reader itself:
it reads only the end of the zip and the member, keeps both, and honours pip's index settings."""

from __future__ import annotations

import zipfile

import pytest

from patchkit.errors import MirrorError
from patchkit.fixes.modes import modes
from support import released
from support.mirror import default_cache, fetch_wheel
from support.ranges import Index
from support.repos import ROOT

pytestmark = pytest.mark.network  # on a cold cache the proofs' members come from the index

FOLDER = ROOT / "patchkit" / "fixes" / "modes"  # the data in the tree (the tests import the installed package)
MODES = modes(FOLDER)


def _proofs():
    for mode in MODES:
        for bounds in (mode.exposed, mode.ways_out):
            for bound in bounds:
                for proof in bound.proofs:
                    verb = "holds" if proof.holds else "lacks"
                    machine = f"-{proof.machine}" if proof.machine else ""
                    yield pytest.param(proof, id=f"{mode.name}:{proof.distribution}-{proof.release}{machine}:{proof.file}:{verb}")


PROOFS = list(_proofs())


def test_every_mode_file_is_read_and_the_proofs_are_found():
    """A parametrized test over no proof is skipped, not failed: the proofs are counted here."""
    assert len(MODES) == len(list(FOLDER.glob("*.toml"))) >= 2
    assert len(PROOFS) >= 4
    assert {m.name for m in MODES} >= {"triton-ptxas-sm121a", "flashinfer-jit-arch-list"}


@pytest.mark.parametrize("proof", PROOFS)
def test_the_released_file_holds_or_lacks_the_text(proof):
    if proof.sdist:
        data = released.source_member(proof.distribution, proof.release, proof.file)
    else:
        data = released.member(proof.distribution, proof.release, proof.file, machine=proof.machine)
    assert data, f"{proof.distribution} {proof.release}: {proof.file} is empty"
    found = proof.text.encode() in data
    where = "source archive" if proof.sdist else released.wheel_name(proof.distribution, proof.release, machine=proof.machine)
    assert found == proof.holds, (f"{proof.distribution} {proof.release} ({where}):"
                                  f" {proof.file} {'lacks' if proof.holds else 'holds'} {proof.text!r}")


# -- the reader ---------------------------------------------------------------------------------

DIST, VERSION, PATH = "flashinfer-python", "0.6.17", "flashinfer/jit/comm.py"  # a proof's wheel: 15 MB


@pytest.fixture
def wheel():
    """The real wheel served (whole, from the cache of support.mirror), with zipfile's reading of it."""
    path = fetch_wheel(VERSION, default_cache(), DIST)
    with zipfile.ZipFile(path) as zf:
        yield path, zf


def test_the_reader_fetches_the_zips_end_and_the_member_only_and_keeps_them(wheel, pip_index, tmp_path):
    path, zf = wheel
    size, info = path.stat().st_size, zf.getinfo(PATH)
    record_end = min([i.header_offset for i in zf.infolist() if i.header_offset > info.header_offset] + [zf.start_dir])
    with Index({DIST: [(path, False)]}) as index:
        pip_index(index.url)
        assert released.member(DIST, VERSION, PATH, cache=tmp_path) == zf.read(PATH)
        files = [r for p, r in index.requests if p == f"/files/{path.name}"]
        # The last 256 KiB (the end record), the rest of the central directory, the member's record.
        assert files == [f"bytes=-{released.TAIL}", f"bytes={zf.start_dir}-{size - released.TAIL - 1}",
                         f"bytes={info.header_offset}-{record_end - 1}"]
        assert index.sent[path.name] == (size - zf.start_dir) + (record_end - info.header_offset)
        assert index.sent[path.name] < size / 10, f"{index.sent[path.name]} bytes of {size}"
        assert released.names(DIST, VERSION, cache=tmp_path) == tuple(zf.namelist())
        kept = tmp_path / "members" / DIST / VERSION
        assert (kept / "files" / PATH).read_bytes() == zf.read(PATH)
        with path.open("rb") as whole:
            whole.seek(zf.start_dir)
            assert (kept / "central-directory").read_bytes().endswith(b"\n" + whole.read())

        # A later run: what was read comes from the cache; the names from the kept central directory.
        released.forget()
        asked = len(index.requests)
        assert released.member(DIST, VERSION, PATH, cache=tmp_path) == zf.read(PATH)
        assert released.names(DIST, VERSION, cache=tmp_path) == tuple(zf.namelist())
        assert len(index.requests) == asked
        # A member not read before: the index's page for the wheel's address, then that member's record alone.
        other = zf.getinfo("flashinfer/__init__.py")
        other_end = min([i.header_offset for i in zf.infolist() if i.header_offset > other.header_offset] + [zf.start_dir])
        assert released.member(DIST, VERSION, other.filename, cache=tmp_path) == zf.read(other)
        assert index.requests[asked:] == [(f"/simple/{DIST}/", None),
                                          (f"/files/{path.name}", f"bytes={other.header_offset}-{other_end - 1}")]


def test_a_member_the_wheel_lacks_is_named_with_the_wheel(wheel, pip_index, tmp_path):
    path, _ = wheel
    with Index({DIST: [(path, False)]}) as index:
        pip_index(index.url)
        with pytest.raises(released.MissingMember) as caught:
            released.member(DIST, VERSION, "flashinfer/jit/no_such_file.py", cache=tmp_path)
    assert caught.value.reason == f"{path.name} has no flashinfer/jit/no_such_file.py"
    assert not (tmp_path / "members" / DIST / VERSION / "files").exists()


def test_a_server_without_range_requests_is_an_error_not_a_download(wheel, pip_index, tmp_path):
    path, _ = wheel
    with Index({DIST: [(path, False)]}, ranges=False) as index:
        pip_index(index.url)
        with pytest.raises(MirrorError) as caught:
            released.member(DIST, VERSION, PATH, cache=tmp_path)
    assert caught.value.reason == (f"{path.name}: the server answered 200 to a Range request"
                                   " (it does not serve parts of files)")
    assert not (tmp_path / "members").exists()


def test_a_file_index_is_read_as_local_files(wheel, pip_index, tmp_path):
    """A ``file://`` index (a folder of pages, each project's in its index.html, as pip reads it)."""
    path, zf = wheel
    page = tmp_path / "simple" / DIST / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="{path.as_uri()}">{path.name}</a>\n')
    pip_index((tmp_path / "simple").as_uri())
    assert released.member(DIST, VERSION, PATH, cache=tmp_path / "cache") == zf.read(PATH)
    assert released.wheel_name(DIST, VERSION, cache=tmp_path / "cache") == path.name


def test_the_wheel_taken_is_the_pure_one_else_cpython_311_on_manylinux_x86_64():
    # Real file names of the index (triton 3.6.0's, vllm 0.34.0's and flashinfer-python 0.6.17's).
    assert released._rank("flashinfer_python-0.6.17-py3-none-any.whl", "flashinfer-python", "0.6.17") == 0
    assert released._rank("triton-3.6.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "triton", "3.6.0") == 1
    assert released._rank("triton-3.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "triton", "3.6.0") == 2
    assert released._rank("vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl", "vllm", "0.34.0") == 2
    assert released._rank("triton-3.6.0-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl", "triton", "3.6.0") == 3
    assert released._rank("triton-3.6.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "triton", "3.5.1") is None
    assert released._rank("flashinfer_python-0.6.17.tar.gz", "flashinfer-python", "0.6.17") is None
