"""Release versions and tags: ``v0.5.4.post3`` <-> ``0.5.4.post3``, ordered like PEP 440."""

from __future__ import annotations

import re

_PART = re.compile(r"^(\d+)$|^(a|b|rc|post|dev)(\d+)$")
# dev < a < b < rc < (final) < post, as PEP 440 orders them.
_RANK = {"dev": 0, "a": 1, "b": 2, "rc": 3, "": 4, "post": 5}


def tag_to_version(tag: str) -> str:
    return tag[1:] if tag.startswith("v") else tag


def version_key(version: str) -> tuple:
    """Sort key for versions such as ``0.5.10``, ``0.5.4.post3`` and ``0.6.0rc1``."""
    release: list[int] = []
    suffix: tuple = (_RANK[""], 0)
    for part in re.split(r"[.]|(?<=\d)(?=[a-z])", tag_to_version(version)):
        match = _PART.match(part)
        if match is None:
            return (tuple(release), (-1, 0), version)
        if match.group(1) is not None and suffix == (_RANK[""], 0):
            release.append(int(match.group(1)))
        elif match.group(2):
            suffix = (_RANK[match.group(2)], int(match.group(3)))
    while release and release[-1] == 0:
        release.pop()
    return (tuple(release), suffix, version)


def is_version(version: str) -> bool:
    """A release version: digits and dots, then pre/post/dev suffixes (``0.5.9``, ``0.5.4.post2``, ``0.5.0rc1``)."""
    return re.fullmatch(r"\d+(\.\d+)*((a|b|rc|\.post|\.dev)\d+)*", version) is not None


def is_release_tag(tag: str) -> bool:
    """``v`` followed by a version (``v0.5.9``, ``v0.5.4.post3``)."""
    return tag.startswith("v") and is_version(tag[1:])
