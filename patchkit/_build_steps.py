"""What the build step (``patchkit/_build.py``) writes into the wheel, made here without setuptools:
``parsed_docs``, the fixes' data files as tomllib parses them, keyed by their text, in marshal's
bytes (``fixes/_parsed.marshal``); ``prebuilt_fixes``, the fixes as ``fixes/load.py`` makes them
(``fixes/_fixes.marshal``); ``parsed_patches``, each shipped patch as ``patch/read.py``
parses it (``patch/_parsed/<sha256>.marshal``).  The tests check the wheel against these."""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

PARSED = "_parsed.marshal"


def _literal(value) -> bool:
    """Whether marshal writes ``value`` and reads back the same value (no dates, no inf or nan)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _literal(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_literal(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, bool))


def parsed_docs(folder: Path) -> bytes:
    """The bytes of ``_parsed.marshal`` for the TOML files of ``folder``: text -> document."""
    import marshal

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli, a build requirement there (pyproject.toml)
        import tomli as tomllib

    docs = {}
    for path in sorted(folder.glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:  # left to fixes/load.py, which names the file and the reason
            continue
        if _literal(doc):
            docs[text] = doc
    return marshal.dumps(docs)


def prebuilt_fixes(folder: Path) -> bool:
    """``_fixes.marshal`` in ``folder`` (the fixes as ``fixes/load.py`` makes them, ``fixes/prebuilt.py``),
    after ``_parsed.marshal``: whether it was written.  Fixes that do not read are left to the
    command that reads them, which says why."""
    from patchkit.fixes import prebuilt

    stored = prebuilt.stored(folder)
    if stored is not None:
        (folder / prebuilt.STORED).write_bytes(stored)
    return stored is not None


def parsed_patches(patches: Path, out: Path) -> int:
    """Each shipped patch below ``patches`` parsed (``patch.read.built``) into ``out/<sha256>.marshal``,
    which ``patch.manifest.Shipped.sections`` reads instead of parsing it at every apply; how many.
    A patch the reader refuses is left out: read when used, it says why."""
    from patchkit.errors import PatchError
    from patchkit.patch.read import built

    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for path in sorted(patches.rglob("*.patch")):
        raw = path.read_bytes()
        try:
            stored = built(raw, str(path))
        except PatchError:
            continue
        (out / f"{hashlib.sha256(raw).hexdigest()}.marshal").write_bytes(stored)
        count += 1
    return count
