"""A state.json and manifest.json files that the patchkit before sources, reasons and what a backport found were
values wrote (tests/targets/data/saved-before-values/README.md) are still read: the checkout reverts exactly,
a fix the old manifest calls incomplete, cannot apply or not needed here is said as before, and so is what a
backport found ("1 hunk", "at an offset of -7 lines", "upstream since 0.5.13")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchkit.commands.generate import TagOutcome
from patchkit.fixes.kinds import RuleKind
from patchkit.patch.manifest import Manifest, read_manifest
from patchkit.render.found import found_line
from patchkit.render.generate import tag_line, why
from patchkit.rewrite.backported import Carried, Upstream, phrased_json
from patchkit.rewrite.found import Found, phrased
from patchkit.targets.state import Store
from patchkit.types import Files, Generated
from support.cli import invoke
from support.prebuilt import Prebuilt
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


def _backports(m: Manifest) -> list[Found]:
    """What the backport rules of a manifest found: in each patched file, then already there."""
    return [t for e in m.series for t in [*(t for f in e.files for t in f.tables), *e.already_upstream] if t.kind == RuleKind.BACKPORT]


@pytest.mark.parametrize(("saved", "shipped"), [
    ("manifest-flashinfer-0.6.4.json", "flashinfer/0.6.4"), ("manifest-0.5.13.post1.json", "0.5.13.post1")])
def test_what_a_backport_found_in_a_manifest_written_before_is_said_as_before(saved: str, shipped: str) -> None:
    old = read_manifest(DATA / saved)
    new = read_manifest(ROOT / "patches" / shipped / "manifest.json")
    doc = json.loads((DATA / saved).read_bytes())
    was = [(t["added_key"], t["copied_from"], t["value"]) for e in doc["series"]
           for t in [*(t for f in e["files"] for t in f["tables"]), *e["already_upstream"]] if t["kind"] == "backport"]
    olds, news = _backports(old), _backports(new)
    assert len(olds) == len(news) == len(was) > 0
    # The phrases then, read as they are; the values now, said as those phrases.
    assert [(o.added_key, o.copied_from, o.value) for o in olds] == was
    assert all(isinstance(n.added_key, int) and isinstance(n.copied_from, Upstream) and isinstance(n.value, Carried) for n in news)
    assert [phrased(o) for o in olds] == olds
    assert [phrased(n) for n in news] == olds
    assert [found_line(n) for n in news] == [found_line(o) for o in olds]
    assert Manifest.from_json(json.loads(new.to_bytes())).to_bytes() == (ROOT / "patches" / shipped / "manifest.json").read_bytes()


def test_a_state_written_before_with_backports_reverts_exactly(prebuilt: Prebuilt, tmp_path: Path) -> None:
    """FlashInfer 0.6.4's shipped patch (PR 3903: exactly, at offsets, and by a three-way merge, refreshed), applied
    by the earlier patchkit, whose state.json says what the backport found in phrases: status and verify say the
    same of it as of the values saved now, and revert gives back the release's bytes."""
    target = tmp_path / "flashinfer"
    subprocess.run(["git", "clone", "-q", str(prebuilt.release("flashinfer", "0.6.4")), str(target)], check=True, capture_output=True)
    saved = (DATA / "state-flashinfer-0.6.4.json").read_bytes()
    old = json.loads(saved)
    paths = [f["path"] for f in old["files"]]
    before = {rel: (target / rel).read_bytes() for rel in paths}
    done = invoke("apply", str(target), "--fix", "allreduce-fusion")
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    state = target / ".git" / "patchkit" / "state.json"
    new = json.loads(state.read_bytes())
    tables = [t for f in new["files"] for t in f["tables"]]
    assert {t["kind"] for t in tables} == {"backport"} and len(tables) == 8
    assert {t["value"]["how"] for t in tables} == {"exactly", "offset", "merged"}
    # The same apply; what the backport found is saved as values now, as the earlier patchkit's phrases then.
    assert [phrased_json(t) for t in tables] == [t for f in old["files"] for t in f["tables"]]
    assert dict(new, files=[dict(f, tables=[]) for f in new["files"]]) == dict(old, files=[dict(f, tables=[]) for f in old["files"]])
    said = {(c, j): invoke(c, str(target), *(("--fix", "allreduce-fusion") if c == "verify" else ()), *j)
            for c in ("status", "verify") for j in ((), ("--json",))}
    assert said["verify", ()].stdout.decode().splitlines()[-1] == "verify: ok (FlashInfer PR 3903 in every file it changes)"
    assert b'"value": "by a three-way merge, refreshed: no has_sm120f in flashinfer/aot.py before 0.6.6' in said["status", ("--json",)].stdout
    state.write_bytes(saved)
    for (command, json_), done in said.items():
        again = invoke(command, str(target), *(("--fix", "allreduce-fusion") if command == "verify" else ()), *json_)
        assert (again.returncode, again.stdout, again.stderr) == (done.returncode, done.stdout, done.stderr), (command, json_)
    done = invoke("revert", str(target))
    assert (done.returncode, done.stderr) == (0, b"")
    assert {rel: (target / rel).read_bytes() for rel in paths} == before
    assert not state.exists()
