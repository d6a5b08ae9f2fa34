"""``targets.dist_info``: a dist-info's Version header and RECORD's rows read as ``importlib.metadata``
reads them (its email parser, its CSV reader), which the command need not import."""

from __future__ import annotations

import csv
import importlib.metadata
import zipfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.targets.dist_info import header, version
from support.mirror import default_cache, fetch_wheel


class Text(importlib.metadata.Distribution):
    """A distribution whose METADATA is ``text``: the oracle, importlib.metadata itself."""

    def __init__(self, text: str) -> None:
        self.text = text

    def read_text(self, filename: str) -> str | None:
        return self.text if filename == "METADATA" else None

    def locate_file(self, path):
        return path


def oracle(text: str) -> str | None:
    found = Text(text).metadata.get("Version")
    return (found.strip() or None) if isinstance(found, str) else None


def read(text: str) -> str | None:
    found = header(text, "Version")
    return (found.strip() or None) if found is not None else None


LINES = ["Version: 1.0", "version:2", "VERSION :3", "Metadata-Version: 2.1", "Name: sglang", " continued", "\tmore", "",
         "From me", "From x: y", ":x", "Version 4", "Description: y", "not a header", "Version: \u00e9", "Version:  9 ",
         "Version:", "X-Version: 5", "Versio: 6", "Version: 7\x0b8", "\u2028", "Version: a\x0cb"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINES), st.sampled_from(["\n", "\r\n", "\r"])), max_size=8),
       st.sampled_from(["", "\n", "body\nVersion: 9\n"]))
def test_the_version_is_what_importlib_metadata_reads(lines, tail) -> None:
    text = "".join(line + end for line, end in lines) + tail
    assert read(text) == oracle(text)


def test_the_real_metadata_of_the_wheels_the_tests_install() -> None:
    """The wheels of the releases the tests install (SGLang's pure-Python ones and a compiled one, FlashInfer's):
    the same version as importlib.metadata reads, and the one the wheel's name carries."""
    wheels = [fetch_wheel(v, default_cache()) for v in ("0.5.2", "0.5.9", "0.5.23")]
    for wheel in [*wheels, fetch_wheel("0.6.4", default_cache(), "flashinfer-python")]:
        with zipfile.ZipFile(wheel) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            text = z.read(name).decode("utf-8", "replace")
        assert read(text) == oracle(text) == wheel.name.split("-")[1], wheel.name


def test_a_folder_without_metadata_names_no_version(tmp_path: Path) -> None:
    assert version(tmp_path) is None
    (tmp_path / "METADATA").write_text("Metadata-Version: 2.1\nName: x\n\nVersion: 1\n")
    assert version(tmp_path) is None  # in the description, not a header
    (tmp_path / "METADATA").write_text("Metadata-Version: 2.1\nversion:  0.5.9 \nName: x\n")
    assert version(tmp_path) == "0.5.9"


# -- RECORD's rows, as importlib.metadata makes them (targets/dist_info.py) --------------------

class Files(importlib.metadata.Distribution):
    """A distribution whose RECORD is ``text``: the oracle of its rows."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def read_text(self, filename: str) -> str | None:
        return self.text if filename == "RECORD" else None

    def locate_file(self, path):
        return path


def _rows(rows) -> list | str:
    return [(str(r), r.hash and (r.hash.mode, r.hash.value), r.size) for r in rows] if rows is not None else "none"


CELLS = ["sglang/x.py", "sglang/a b.py", '"sglang/c,d.py"', "./sglang/e.py", "sglang//f.py", "sha256=AbC", "sha256=",
         "md5", "", "12", "x1", '"', "..", "sglang/lib.so"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(CELLS), max_size=4).map(",".join), max_size=5), st.sampled_from(["\n", "\r\n"]))
def test_records_rows_are_what_importlib_metadata_makes(lines, end) -> None:
    from patchkit.targets.dist_info import DistInfo, _files

    text = "".join(line + end for line in lines)
    try:
        want = _rows(Files(text).files)
    except (TypeError, ValueError, csv.Error) as exc:
        want = type(exc)
    dist = DistInfo(Path("/nonexistent"))
    dist._texts["RECORD"] = text  # the text as read
    try:
        got = _rows(_files(dist))
    except (TypeError, ValueError, csv.Error) as exc:
        got = type(exc)
    assert got == want
