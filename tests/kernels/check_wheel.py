"""Every shared object of the real sglang-kernel 0.4.10 wheel (1.2 GB unpacked, installed by pip) read
by patchkit beside cuobjdump 13.4: the same entries, architectures and PTX versions.  Run by
``make check-kernels`` (cuobjdump reads the 1.1 GB flash_ops.abi3.so whole: seconds and about 2 GB)."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import WHEEL_SO, headers, installed_venv, lists
from test_fatbin import as_cuobjdump, listed

from patchkit.kernels.fatbin import read_binary


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return next((installed_venv(tmp_path_factory) / "lib").glob("python3*/site-packages"))


@pytest.mark.parametrize("member", WHEEL_SO)
def test_as_cuobjdump_reads_it(site: Path, member: str) -> None:
    so = site / member
    b = read_binary(str(so))
    assert b.problem is None and b.cuda
    assert as_cuobjdump(b.entries) == headers(so)
    assert (listed(b.sass()), listed(b.ptx())) == lists(so)
