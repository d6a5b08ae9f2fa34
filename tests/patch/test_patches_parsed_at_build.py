"""The shipped patches parsed at build time (patchkit/_build.py writes ``patchkit/patch/_parsed/``
into the wheel): apply reads each patch's sections from there, the sections the reader makes of
it, and parses a patch the build did not (another folder's, an edited one) when it uses it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from patchkit._build_steps import parsed_patches
from patchkit.data import shipped
from patchkit.patch import manifest
from patchkit.patch.manifest import Shipped
from patchkit.patch.read import built, from_built, parse

PATCHES = sorted(shipped("patches").rglob("*.patch"))


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def test_every_shipped_patch_is_parsed_into_the_wheel_as_the_reader_parses_it() -> None:
    assert len(PATCHES) > 100  # SGLang's, FlashInfer's and vLLM's series
    stored = sorted(p.name for p in manifest.BUILT.iterdir())
    assert stored == sorted({f"{_digest(p.read_bytes())}.marshal" for p in PATCHES})
    for path in PATCHES:
        raw = path.read_bytes()
        assert manifest._built(_digest(raw)) == parse(raw, str(path)), path


def test_the_build_step_writes_what_the_wheel_holds(tmp_path: Path) -> None:
    assert parsed_patches(shipped("patches"), tmp_path / "_parsed") == len(PATCHES)
    for written in sorted((tmp_path / "_parsed").iterdir()):  # the same sections (marshal's bytes vary with
        assert from_built(written.read_bytes()) == manifest._built(written.name.removesuffix(".marshal"))  # refcounts)


def test_a_series_parsed_patch_by_patch_is_the_series_parsed_at_once() -> None:
    series = {p.parent for p in PATCHES}
    several = [f for f in series if len(list(f.glob("*.patch"))) > 1]
    assert several
    for folder in sorted(several):
        raws = [(str(p), p.read_bytes()) for p in sorted(folder.glob("*.patch"))]
        one_by_one = [s for name, raw in raws for s in parse(raw, name)]
        assert one_by_one == parse(b"".join(raw for _, raw in raws), str(folder)), folder


def test_a_patch_the_build_did_not_parse_is_parsed_when_used() -> None:
    path = PATCHES[0]
    raw = path.read_bytes()
    added = raw.index(b"\n+", raw.index(b"\n@@")) + 2  # an added line's text, its hunk as it was
    edited = raw[:added] + b"# " + raw[added:]
    assert from_built(b"not marshal") is None and manifest._built(_digest(edited)) is None
    assert from_built(built(edited)) == parse(edited)
    files = tuple(manifest.FileEntry(s.path, "100644", "", "", "", "", []) for s in parse(edited))
    shipped_one = Shipped(str(path), "0", path.name, (), None, None, files, ((str(path), _digest(edited), edited),))
    assert list(shipped_one.sections().values()) == parse(edited)
    assert list(shipped_one.sections().values()) != parse(raw)
