"""The fixes' data in its built form: each data folder's TOML files (``fixes/*.toml``,
``fixes/modes/*.toml``), parsed, in one JSON file beside them (``data.json``), the same in a wheel
and a source tree.  It is what every command reads (``load._read``, ``load.data_files``); the TOML
files are what a person writes.  docs/ARCHITECTURE.md, the row of ``fixes/``.

``make fix-data`` (``python -m patchkit.fixes.build``) writes it with ``load.parse_toml``, the one
TOML reader (which also reads a folder nobody built: a test's, ``check-releases --modes DIR``), and
a test holds it to the TOML files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.fixes.load import BUILT, FOLDERS, parse_toml

NOTE = "Built from the TOML files beside this file by `make fix-data`: edit those, not this."


def built(folder: Path) -> bytes:
    """The built form of ``folder``: its TOML files by name (sorted), each as its document."""
    files = {path.name: parse_toml(path) for path in sorted(folder.glob("*.toml"))}
    return (json.dumps({"note": NOTE, "files": files}, indent=1, ensure_ascii=False) + "\n").encode()


def main(argv: list[str] | None = None) -> int:
    """Write the built form of each of patchkit's data folders (of each folder named, if any)."""
    for folder in [Path(a) for a in argv] if argv else list(FOLDERS):
        try:
            if not folder.is_dir():
                raise BadInput(str(folder), "not a folder")
            (folder / BUILT).write_bytes(built(folder))
        except BadInput as exc:
            print(f"patchkit.fixes.build: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"patchkit.fixes.build: {folder / BUILT}: cannot write it ({exc.strerror})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
