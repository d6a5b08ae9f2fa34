"""Where the shipped ``patches/`` and ``templates/`` are.

Installed (``pip install .``) they sit inside the package; in a source checkout
they sit at the top of the repository, beside ``patchkit/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name
