#!/usr/bin/env python3
"""Coverage-guided fuzzing of patchkit's patch reader with atheris (libFuzzer).

    python fuzz/fuzz_patchread.py -atheris_runs=100000 [CORPUS_DIR ...] [libFuzzer flags]

Any bytes go to ``patchkit.patch.read.parse``.  It must return file sections or raise
PatchError; any other exception is a crash (libFuzzer stops and writes the input to
``crash-<sha1>``).  When parse succeeds the sections are checked, and each one is
applied to a pre-image rebuilt from its own hunks and reversed again: both must give
bytes or a PatchError, and a reversal of a successful apply must give the pre-image
back.

Three inputs in four are spliced into a real patch (every patch under patches/, or a
built-in one), so the fuzzer starts deep in the format instead of at "diff --git".
Needs ``pip install atheris`` (wheels for CPython 3.8-3.11 on Linux x86_64).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import atheris  # noqa: E402

with atheris.instrument_imports():
    import unidiff  # noqa: F401  (instrumented: parse drives it)

    from patchkit.errors import PatchError
    from patchkit.patch import read as patchread  # noqa: F401
    from patchkit.patch import write as patchfile  # noqa: F401
    from patchkit.patch.read import apply, parse, reverse

BUILT_IN = b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: patchkit <patchkit@users.noreply.invalid>
Subject: [PATCH] Add SM120

---
 a.py | 1 +
 1 file changed, 1 insertion(+)

diff --git a/pkg/a.py b/pkg/a.py
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,4 +1,5 @@ TABLE = {
 TABLE = {
     9: [4, 6, 8],
     10: [6, 8],
+    12: [6, 8],
 }
\\ No newline at end of file
--
patchkit
"""


def _seeds() -> list[bytes]:
    found = sorted((ROOT / "patches").glob("*/*.patch"))
    seeds = {p.read_bytes() for p in found[:: max(1, len(found) // 8)]}  # a spread of releases
    return [BUILT_IN, *sorted(seeds)]


SEEDS = _seeds()


def _pre_image(section: patchread.FilePatch) -> bytes | None:
    """A file the section's hunks apply to: their old lines at their positions, filler between."""
    out: list[bytes] = []
    for hunk in section.hunks:
        start = hunk.old_start - 1 + (0 if hunk.old_lines else 1)
        if start < len(out) or start > 10_000:
            return None
        out += [b"filler %d\n" % i for i in range(len(out), start)]
        out += hunk.old_lines
    return b"".join(out)


def check(data: bytes) -> None:
    try:
        sections = parse(data, "fuzz.patch")
    except PatchError:
        return
    assert isinstance(sections, list) and sections, sections
    for section in sections:
        assert isinstance(section.path, str) and section.path, section
        assert section.hunks, section
        for hunk in section.hunks:
            assert isinstance(hunk.old_start, int) and hunk.old_start >= 0, hunk
            assert all(isinstance(line, bytes) for line in hunk.old_lines + hunk.new_lines), hunk
            assert all(kind in (" ", "-", "+") for kind, _ in hunk.body), hunk
        pre = _pre_image(section)
        if pre is None:
            continue
        try:
            post = apply(pre, section, "fuzz.patch")
        except PatchError:
            continue
        assert isinstance(post, bytes)
        whole = all(line.endswith(b"\n") for h in section.hunks for line in h.old_lines + h.new_lines)
        if whole:  # lines cut short ("\ No newline") mid-file merge on apply: no clean inverse to ask for
            assert reverse(post, section, "fuzz.patch") == pre, (pre, post)


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 3)
    if mode == 0:
        check(fdp.ConsumeBytes(fdp.remaining_bytes()))
        return
    seed = SEEDS[fdp.ConsumeIntInRange(0, len(SEEDS) - 1)]
    edits = fdp.ConsumeIntInRange(1, 4)
    for _ in range(edits):
        at = fdp.ConsumeIntInRange(0, len(seed))
        cut = fdp.ConsumeIntInRange(0, 80)
        insert = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
        seed = seed[:at] + insert + seed[at + cut :]
    check(seed)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
