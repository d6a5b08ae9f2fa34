"""Release versions and tags: ``v0.5.4.post3`` <-> ``0.5.4.post3``, ordered as PEP 440 orders
them (``packaging.version``, the implementation pip uses).

A local version (``0.5.9+cu128``: a build of 0.5.9 from another index) sorts above its public
release for display, as PEP 440 orders it; every release-range check (``in_range``,
``at_least``) takes it as its public release instead, as PEP 440 matches a specifier without a
local label (``<=0.5.9`` admits ``0.5.9+cu128``)."""

from __future__ import annotations

from functools import lru_cache

from packaging.version import InvalidVersion, Version

from patchkit.match import Pattern

_LEADING = Pattern(r"\d+(\.\d+)*")
_NORMAL = Pattern(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")


def tag_to_version(tag: str) -> str:
    return tag[1:] if tag.startswith("v") else tag


@lru_cache(maxsize=4096)  # the same few hundred versions are compared again and again
def version_key(version: str) -> tuple[Version, int, Version, str]:
    """Sort key for versions such as ``0.5.10``, ``0.5.4.post3``, ``0.6.0rc1`` and ``0.5.9+cu128``
    (a tag's ``v`` dropped): PEP 440's order, then the text, so that ``0.5`` and ``0.5.0`` sort
    the same way every time.  Text that is no PEP 440 version sorts just below the releases of
    the numbers it starts with (``0.5.x`` below ``0.5.dev0``), never raises."""
    text = tag_to_version(version)
    try:
        parsed = Version(text)
    except InvalidVersion:
        leading = _LEADING.match(text)
        none = Version("0")
        return (Version(leading.group()) if leading else none, 0, none, version)
    release = Version(f"{parsed.epoch}!{'.'.join(map(str, parsed.release))}")
    return (release, 1, parsed, version)


def after(a: str, b: str) -> bool:
    """Whether ``a`` sorts after ``b`` (``version_key``'s order)."""
    return version_key(a) > version_key(b)


def public(version: str) -> str:
    """The public release of a version: its local label dropped (``0.5.9+cu128`` -> ``0.5.9``),
    a tag's ``v`` too."""
    return tag_to_version(version).partition("+")[0]


def release_key(version: str) -> tuple[Version, int, Version]:
    """The key of ``public(version)`` for range checks: PEP 440's order with no tie broken by the
    text (``0.5`` is ``0.5.0``, as a specifier matches them)."""
    return version_key(public(version))[:3]


def in_range(version: str | None, since: str | None, until: str | None) -> bool:
    """Whether ``version`` lies in the release range since..until (both inclusive, None: open),
    a local version taken as its public release."""
    if version is None:
        return False
    key = release_key(version)
    return (since is None or key >= release_key(since)) and (until is None or key <= release_key(until))


def at_least(version: str | None, since: str) -> bool:
    """Whether ``version`` is ``since`` or a later release (a local version as its public release)."""
    return in_range(version, since, None)


def is_version(version: str) -> bool:
    """A release version in PEP 440's normal form (no epoch, no local part): digits and dots,
    then a pre-release, a post-release and a dev-release, each at most once and in that order
    (``0.5.9``, ``0.5.4.post2``, ``0.5.0rc1``, ``0.6.0a1.dev3``): what patchkit ships patches for
    and accepts as --version; packaging parses every one."""
    return _NORMAL.fullmatch(version) is not None


def is_release_tag(tag: str) -> bool:
    """``v`` followed by a version (``v0.5.9``, ``v0.5.4.post3``)."""
    return tag.startswith("v") and is_version(tag[1:])
