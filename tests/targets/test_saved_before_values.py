"""A state.json and manifest.json files that the patchkit before sources and reasons were values wrote
(tests/targets/data/saved-before-values/README.md) are still read: the checkout reverts exactly,
and a fix the old manifest calls incomplete, cannot apply or not needed here is said as before."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit.commands.generate import TagOutcome
from patchkit.patch.manifest import Manifest, read_manifest
from patchkit.render.generate import tag_line, why
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


@pytest.mark.parametrize(("saved", "shipped"), [
    ("manifest-0.5.1.json", "0.5.1"), ("manifest-0.5.2.json", "0.5.2"), ("manifest-flashinfer-0.5.0.json", "flashinfer/0.5.0")])
def test_a_fix_that_cannot_apply_of_a_manifest_written_before_is_said_as_before(saved: str, shipped: str) -> None:
    old = read_manifest(DATA / saved)
    new = read_manifest(ROOT / "patches" / shipped / "manifest.json")
    (was,) = [f["reason"] for f in json.loads((DATA / saved).read_bytes())["fixes"] if f["status"] == "cannot apply"]
    (o,), (n,) = ([f for f in m.fixes if f.status == "cannot apply"] for m in (old, new))
    assert (o.unfit, n.reason) == (None, None) and n.unfit is not None  # the sentence then, the value now
    assert o.says() == n.says() == was
    # The value read back is the one written: the same bytes again.
    assert Manifest.from_json(json.loads(new.to_bytes())).to_bytes() == (ROOT / "patches" / shipped / "manifest.json").read_bytes()
    outcome = TagOutcome(f"v{new.version}", new.version, "nothing to patch", fixes=tuple(old.fixes))
    line = tag_line(outcome, len(outcome.tag), Path("out"))
    assert line.endswith(f"  nothing to patch: allreduce-fusion cannot apply ({was})")
    assert tag_line(outcome._replace(fixes=tuple(new.fixes)), len(outcome.tag), Path("out")) == line


def test_a_fix_not_needed_here_of_a_manifest_written_before_is_said_as_before() -> None:
    old = read_manifest(DATA / "manifest-0.5.23-not-needed.json")
    (was,) = [f["reason"] for f in json.loads((DATA / "manifest-0.5.23-not-needed.json").read_bytes())["fixes"]
              if f["status"] == "not needed here"]
    (o,) = [f for f in old.fixes if f.status == "not needed here"]
    assert (o.unneeded, why(o)) == (None, was)
    # The line that patchkit printed as it wrote the manifest (tests/gpus/test_doctor.py holds the value written now).
    line = tag_line(TagOutcome("v0.5.23", "0.5.23", "already upstream", fixes=tuple(old.fixes)), 7, Path("out"))
    assert line.startswith(f"v0.5.23  already upstream: torch-symm-mem not needed here ({was}); allreduce-fusion incomplete (")
    assert was.startswith("no multicast between PCIe GPUs, and without it SGLang 0.5.23 warns ")
