"""The build backend (``pyproject.toml``: setuptools' own, from the tree through ``backend-path``)
and the one build step its configuration names but cannot say (``[tool.setuptools.cmdclass]``): the data files of ``patchkit/fixes/`` parsed at
build time, so that a command does not import and run a TOML parser at every start.  Imported by
setuptools while it builds, never by patchkit.

The wheel gets ``patchkit/fixes/_parsed.marshal``: each ``*.toml`` of that folder as tomllib parses
it, keyed by its text, in marshal's bytes (``fixes/load.py`` takes a document from there only when
the file's text is the one that was parsed; any other text is parsed when read); and
``patchkit/patch/_parsed/<sha256>.marshal``: each shipped patch as its reader parses it
(``parsed_patches``; read by ``patch.manifest.Shipped.sections``, so apply and revert do not
import the diff reader, unidiff, a build requirement for this step); and ``patchkit/fixes/_fixes.marshal``:
the fixes as ``fixes/load.py`` checks and makes them (``fixes/prebuilt.py``); all made by ``_build_steps.py``.
Nothing is written into the tree.
"""

from __future__ import annotations

from pathlib import Path

from setuptools.build_meta import *  # noqa: F403 - the build backend pyproject.toml names is setuptools', with this step
from setuptools.command.build_py import build_py

from patchkit._build_steps import PARSED, parsed_docs, parsed_patches, prebuilt_fixes


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / "patchkit"
        fixes = package / "fixes"  # the data files as the wheel ships them
        (fixes / PARSED).write_bytes(parsed_docs(fixes))
        prebuilt_fixes(fixes)
        parsed_patches(package / "patches", package / "patch" / "_parsed")

