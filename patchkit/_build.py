"""The build backend (``pyproject.toml``: setuptools' own, from the tree through ``backend-path``)
and the one build step its configuration names but cannot say (``[tool.setuptools.cmdclass]``): the data files of ``patchkit/fixes/`` parsed at
build time, so that a command does not import and run a TOML parser at every start.  Imported by
setuptools while it builds, never by patchkit.

The wheel gets ``patchkit/fixes/_parsed.marshal``: each ``*.toml`` of that folder as tomllib parses
it, keyed by its text, in marshal's bytes (``fixes/load.py`` takes a document from there only when
the file's text is the one that was parsed; any other text is parsed when read); and
``patchkit/patch/_parsed/<sha256>.marshal``: each shipped patch as its reader parses it
(``parsed_patches``; read by ``patch.manifest.Shipped.sections``, so apply and revert do not
import the diff reader, unidiff, a build requirement for this step).  Nothing is written into the tree.
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

from setuptools.build_meta import *  # noqa: F403 - the build backend pyproject.toml names is setuptools', with this step
from setuptools.command.build_py import build_py

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


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / "patchkit"
        fixes = package / "fixes"  # the data files as the wheel ships them
        (fixes / PARSED).write_bytes(parsed_docs(fixes))
        parsed_patches(package / "patches", package / "patch" / "_parsed")

