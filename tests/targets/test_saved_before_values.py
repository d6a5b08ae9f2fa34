"""A state.json and a manifest.json that the patchkit before sources and reasons were values wrote
(tests/targets/data/saved-before-values/README.md) are still read: the checkout reverts exactly,
and a fix the old manifest calls incomplete is said as before."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from patchkit.patch.manifest import read_manifest
from patchkit.targets.state import Store
from patchkit.types import Files, Generated
from support.cli import invoke
from support.repos import DC, ROOT, git, make_repo

DATA = Path(__file__).parent / "data" / "saved-before-values"
FILES = (f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py")


def test_a_state_written_before_reverts_exactly(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin" / "sglang")
    target = tmp_path / "t"
    subprocess.run(["git", "clone", "-q", str(origin), str(target)], check=True, capture_output=True)
    git(target, "checkout", "-q", "v0.5.5")
    before = {rel: (target / rel).read_bytes() for rel in FILES}
    done = invoke("apply", str(target), "--patches", str(tmp_path / "none"))
    assert done.returncode == 0, done.stderr
    state = target / ".git" / "patchkit" / "state.json"
    old = json.loads((DATA / "state.json").read_bytes())
    new = json.loads(state.read_bytes())
    # The same apply, but for the source: a value now, the earlier patchkit's words then.
    assert (new.pop("source"), old.pop("source")) == ({"generated": "checkout"}, "generated from the checkout's files")
    assert new == old
    state.write_bytes((DATA / "state.json").read_bytes())
    assert Store(state.parent).applied().source == Generated(Files.CHECKOUT)  # the words read as the value
    done = invoke("status", str(target))
    assert done.returncode == 0, done.stderr
    assert b"applied:  generated from the checkout's files, key 12 copied from 10 (patchkit 0.1.0)\n" in done.stdout
    done = invoke("revert", str(target))
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.decode().splitlines()[1] == "reverted generated from the checkout's files"
    assert {rel: (target / rel).read_bytes() for rel in FILES} == before
    assert not state.exists()


def test_an_incomplete_fix_of_a_manifest_written_before_is_said_as_before() -> None:
    old = read_manifest(DATA / "manifest-0.5.11.json")
    new = read_manifest(ROOT / "patches" / "0.5.11" / "manifest.json")
    saved = json.loads((DATA / "manifest-0.5.11.json").read_bytes())["fixes"]
    (was,) = [f["reason"] for f in saved if f["status"] == "incomplete"]
    (o,), (n,) = ([f for f in m.fixes if f.status == "incomplete"] for m in (old, new))
    assert n.reason is None and n.gates == o.gates
    assert o.says() == n.says() == was
    # Installed, a gate's path is the package's: the sentence says it so (it was edited into it before).
    local = {"python/sglang/srt/layers/flashinfer_comm_fusion.py": "sglang/srt/layers/flashinfer_comm_fusion.py"}.get
    assert o.localized(local).says() == n.localized(local).says() == was.replace("python/sglang/", "sglang/")
