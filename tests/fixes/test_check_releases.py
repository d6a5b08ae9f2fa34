"""make check-releases (support.check_releases): the newest release on the index per project the modes
name, the bounds read to an older one, and whether the newest release still holds each fix's text.
Against an index on 127.0.0.1 serving the real wheels (read in parts), with pip's settings naming it."""

from __future__ import annotations

import socket

import pytest

from support import check_releases
from support.index import Listed
from support.mirror import default_cache, fetch_wheel
from support.ranges import Index

pytestmark = pytest.mark.network  # the wheels served are fetched on a cold cache

def _listed(*names: str, yanked: tuple[str, ...] = ()) -> list[Listed]:
    return [Listed(n, f"https://example.invalid/{n}", n in yanked) for n in names]


def test_the_newest_release_leaves_out_pre_releases_and_yanked_files():
    # flashinfer-python's files as the index listed them, 0.4.0 to 0.5.0rc3 (source archives, then wheels too).
    files = ("flashinfer_python-0.4.0.tar.gz", "flashinfer_python-0.4.0rc4.tar.gz", "flashinfer_python-0.4.1.tar.gz",
             "flashinfer_python-0.5.0rc1-py3-none-any.whl", "flashinfer_python-0.5.0rc1.tar.gz",
             "flashinfer_python-0.5.0rc3-py3-none-any.whl", "flashinfer_python-0.5.0rc3.tar.gz")
    assert check_releases.newest(_listed(*files)) == "0.4.1"
    assert check_releases.newest(_listed(*files, yanked=("flashinfer_python-0.4.1.tar.gz",))) == "0.4.0"
    assert check_releases.newest(_listed(*files, "flashinfer_python-0.5.0-py3-none-any.whl")) == "0.5.0"
    assert check_releases.newest(_listed("flashinfer_python-0.5.0rc3.tar.gz")) is None


MODE = "22-flashinfer-jit-arch-list.toml"  # read to 0.7.4; fixed in 0.6.17, its comm.py the proof
MARK = "supported_major_versions=[9, 10, 12]"
MOE = "\n# gen_trtllm_gen_fused_moe_sm100_module"  # where the mode's MoE exposures begin


def _fusion_only(folder) -> None:
    """Mode 22 with its first exposure alone (the fusion's comm module), in ``folder``: the check of one bound."""
    folder.mkdir()
    text = (check_releases.FOLDER / MODE).read_text()
    assert MOE in text
    (folder / MODE).write_text(text[:text.index(MOE)] + "\n" + text[text.index("[[ways_out]]"):])


def _check(served: dict, modes, cache, pip_index, capsys, json: bool = False) -> tuple[Index, list[str]]:
    with Index(served, json=json) as index:
        pip_index(index.url)
        code = check_releases.main(["--modes", str(modes), "--cache", str(cache)])
    out = capsys.readouterr()
    assert (code, out.err) == (0, "")
    return index, out.out.splitlines()


def test_a_bound_read_to_an_older_release_and_the_fix_in_the_newest(pip_index, tmp_path, capsys):
    wheels = [fetch_wheel(v, default_cache(), "flashinfer-python") for v in ("0.6.17", "0.7.4")]
    # The mode as it was before FlashInfer 0.7.4 was read: the same file, read to 0.6.17.
    _fusion_only(tmp_path / "modes")
    text = (tmp_path / "modes" / MODE).read_text()
    assert text.count('read_to = "0.7.4"') == 1
    (tmp_path / "modes" / MODE).write_text(text.replace('read_to = "0.7.4"', 'read_to = "0.6.17"'))
    index, lines = _check({"flashinfer-python": [(w, False) for w in wheels]}, tmp_path / "modes", tmp_path / "cache",
                          pip_index, capsys)
    assert lines == [
        "flashinfer-jit-arch-list: flashinfer-python read to 0.6.17, newest on the index 0.7.4: the bound is not proven past 0.6.17",
        f"flashinfer-jit-arch-list: flashinfer-python 0.7.4's flashinfer/jit/comm.py still holds {MARK!r} (the fix of 0.6.17)",
        "1 bound of 1 mode against the newest releases (flashinfer-python 0.7.4): 1 read to an older release",
    ]
    # 0.7.4's end and its comm.py only (99 MB, 1.8 MB of it its central directory); 0.6.17 not at all.
    assert list(index.sent) == [wheels[1].name] and index.sent[wheels[1].name] < wheels[1].stat().st_size / 20


def test_a_newest_release_without_the_fixs_text_and_a_yanked_one_left_out(pip_index, tmp_path, capsys):
    wheels = [fetch_wheel(v, default_cache(), "flashinfer-python") for v in ("0.6.16.post4", "0.6.17")]
    _fusion_only(tmp_path / "modes")
    index, lines = _check({"flashinfer-python": [(wheels[0], False), (wheels[1], True)]}, tmp_path / "modes",
                          tmp_path / "cache", pip_index, capsys, json=True)  # PEP 691's "yanked", as PyPI answers
    assert lines == [
        f"flashinfer-jit-arch-list: flashinfer-python 0.6.16.post4's flashinfer/jit/comm.py does not hold {MARK!r}"
        " (the fix of 0.6.17): read the release",
        "1 bound of 1 mode against the newest releases (flashinfer-python 0.6.16.post4): 0 read to an older release",
    ]
    assert list(index.sent) == [wheels[0].name]


NVFP4 = "04-nvfp4-cutlass-crash.toml"  # its vLLM bound: fixed in 0.20.0, proven by CMakeLists.txt of the source archives


def test_a_fix_proven_in_the_source_archive_is_read_there(pip_index, tmp_path, capsys):
    """A proof of the source archive (``archive = "sdist"``) is looked for in the newest release's source archive,
    not its wheel (which has no CMakeLists.txt)."""
    from support.mirror import fetch_sdist

    archive = fetch_sdist("vllm", "0.34.0", default_cache())
    text = (check_releases.FOLDER / NVFP4).read_text()
    (tmp_path / "modes").mkdir()  # the mode with its vLLM bound alone (and its ways out)
    (tmp_path / "modes" / NVFP4).write_text(text[:text.index("[[exposed]]")] + text[text.index('[[exposed]]\nproject = "vllm"'):])
    index, lines = _check({"vllm": [(archive, False)]}, tmp_path / "modes", tmp_path / "cache", pip_index, capsys)
    assert lines == [
        "nvfp4-cutlass-crash: vllm 0.34.0's CMakeLists.txt still holds 'set(CUTLASS_REVISION \"v4.7.1\")'"
        " (the fix of 0.20.0)",
        "1 bound of 1 mode against the newest releases (vllm 0.34.0): 0 read to an older release",
    ]
    assert list(index.sent) == [archive.name]


def test_an_index_that_cannot_be_read_exits_2_with_one_line(pip_index, tmp_path, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"http://127.0.0.1:{port}/simple/"
    pip_index(address)
    _fusion_only(tmp_path / "modes")
    code = check_releases.main(["--modes", str(tmp_path / "modes")])
    out = capsys.readouterr()
    assert (code, out.out) == (2, "")
    assert out.err.startswith(f"check-releases: cannot read the package index {address} for flashinfer-python: ")
    assert "Connection refused" in out.err and out.err.count("\n") == 1
