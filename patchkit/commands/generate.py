"""``patchkit generate``: one version-pinned patch and manifest per release tag.

Reads each release from git objects, rewrites the candidate files, and renders
``<out>/<version>/0001-*.patch`` and ``<out>/<version>/manifest.json``.
Deterministic: the same repository and patchkit give byte-identical output.  Returns a
``GenerateResult`` (``render/generate.py`` says it, and each tag's line as it is done).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.digest import blob_id, sha256
from patchkit.errors import OK, PROBLEMS, REFUSED, PatchkitError, UnsafePath
from patchkit.fixes.kinds import BackportRule, Rule
from patchkit.fixes.registry import FIXES, Project
from patchkit.git.objects import GitSource, SourceFile
from patchkit.patch import message
from patchkit.patch.manifest import SERIES, FileEntry, FixStatus, Manifest, SeriesEntry
from patchkit.patch.write import FileChange, format_patch, patch_filename
from patchkit.rewrite.found import Found
from patchkit.rewrite.rules import rewrite_file
from patchkit.rewrite.unfit import Misfit, NoFit, no_fit
from patchkit.scan.feature_path import gates_left
from patchkit.targets.atomic import remove_temps, write_atomic
from patchkit.types import (
    ALREADY_UPSTREAM,
    CANNOT_APPLY,
    ERROR,
    INCOMPLETE,
    NOT_NEEDED_HERE,
    NOTHING_TO_PATCH,
    PATCHED,
    Status,
)
from patchkit.values import Value
from patchkit.versions import tag_to_version

if TYPE_CHECKING:
    from patchkit.fixes.load import Fix
    from patchkit.git.objects import Release
    from patchkit.gpus.smi import Machine
    from patchkit.rewrite.rules import Base, FileRewrite, Read
    from patchkit.scan.feature_path import Gate

    # (fix, blob id, what of the release its rewrite depends on) -> the rewrite or why it failed, shared across tags
    Cache = dict[tuple[str, str, tuple[object, ...]], FileRewrite | PatchkitError]
    Files = dict[str, tuple[SourceFile, bytes, str]]  # repository path -> (file, bytes, blob id)

PATCH_AUTHOR = "patchkit <patchkit@users.noreply.invalid>"
MANIFEST = "manifest.json"

class TagOutcome(Value):
    """What generate made of one release tag: its status, the files of its folder, what each rule found."""

    tag: str
    version: str
    status: Status
    outputs: dict[str, bytes] = {}  # file name -> bytes
    tables: tuple[Found, ...] = ()  # each at its path
    error: str | None = None
    fixes: tuple[FixStatus, ...] = ()


class GenerateResult(Value):
    """What generate wrote (or, with ``check``, how ``out`` differs from it), tag by tag."""

    repo: Path
    out: Path
    fixes: tuple[str, ...]
    check: bool
    outcomes: tuple[TagOutcome, ...]
    differences: tuple[str, ...] = ()  # --check only

    @property
    def failed(self) -> bool:
        return any(o.status == ERROR for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        """A tag whose asked-for fix could not be applied is a refusal; --check differences are problems."""
        return REFUSED if self.failed else PROBLEMS if self.differences else OK

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {s: 0 for s in (PATCHED, NOTHING_TO_PATCH, ALREADY_UPSTREAM, ERROR)}
        for o in self.outcomes:
            counts[o.status] += 1
        return {"tags": len(self.outcomes), **counts}


class NoKeys(Value):
    """``generate --to-cc auto`` on a machine whose GPUs need no key of the project."""

    machine: Machine
    label: str
    exit_code: int = OK


def _variant(fix_rules: tuple[Rule, ...], version: str) -> tuple[object, ...]:
    """What of the version a fix's rewrite depends on: a backport's landing and refreshes."""
    return tuple((r.landed(version), *(x.covers(version) for x in r.refresh))
                 for r in fix_rules if isinstance(r, BackportRule)) + tuple(r.covers(version) for r in fix_rules)


def _fix_changes(current: Files, fix_rules: tuple[Rule, ...], read: Read, root: str, cache: Cache, fix: str,
                 base: Base | None = None,
                 version: str | None = None) -> tuple[list[FileChange], list[FileEntry], list[Found], Files]:
    """(changes, entries, already upstream, new bytes) of one fix over the files as they are."""
    changes: list[FileChange] = []
    entries: list[FileEntry] = []
    upstream: list[Found] = []
    new: Files = {}
    for rule in fix_rules:
        if isinstance(rule, BackportRule) and rule.covers(version) and not rule.landed(version):
            missing = rule.missing_from(current)
            if missing:
                raise no_fit(missing[0], Misfit.NOT_IN_RELEASE, change=rule.origin.cite() if rule.origin is not None else "the upstream change")  # a loaded backport has its origin
    variant = _variant(fix_rules, version) if version else ()
    for path, (file, data, blob) in sorted(current.items()):
        key = (fix, blob, variant)
        if key not in cache:  # each distinct blob is rewritten once per fix and run
            try:
                cache[key] = rewrite_file(data, path, fix_rules, read, root, base=base, version=version)
            except PatchkitError as exc:
                cache[key] = exc
        result = cache[key]
        if isinstance(result, PatchkitError):
            raise result
        upstream += [t.at(path) for t in result.found if t.status == ALREADY_UPSTREAM]
        if not result.changed:
            continue
        new_blob = blob_id(result.source)
        changes.append(FileChange(path, file.mode, data, result.source, blob, new_blob))
        entries.append(FileEntry(path=path, mode=file.mode, pre_blob=blob, post_blob=new_blob, pre_sha256=sha256(data),
                                 post_sha256=sha256(result.source), tables=[t for t in result.found if t.patched]))
        new[path] = (file, result.source, new_blob)
    return changes, entries, upstream, new


def release_patch(
    source: GitSource,
    tag: str,
    project: Project,
    *,
    fixes: tuple[str, ...],
    rules: tuple[Rule, ...],
    cache: Cache,
    asked: tuple[str, ...] = (),
    templates: Path | None = None,
    files: list[SourceFile] | None = None,
    blobs: dict[str, bytes] | None = None,
    skip: Callable[[str, str], dict[str, object] | None] | None = None,
) -> TagOutcome:
    """The series (one patch per fix that changes something), its ``series`` file and
    manifest for one tag.  A fix that cannot apply is an error of the tag when it is
    ``asked`` for (named, or on by default), else a note.

    ``files`` and ``blobs`` are the tag's candidate files and their bytes when read in bulk.
    ``skip(fix, version)``: why a fix is not needed on this machine for the release (``--to-cc
    auto``; the judge's reason as the manifest keeps it), which leaves it out of the series; None to keep it.
    """
    release = source.release(tag)
    version = tag_to_version(tag)
    found = source.files(tag, project.files) if files is None else files
    current = {
        f.path: (f, blobs[f.blob] if blobs and f.blob in blobs else source.read(f.blob), f.blob) for f in found
    }
    read = partial(source.read_path, tag)

    def base(rule: Rule, path: str) -> bytes | None:  # a backport's merge base: the file in the release it was made on
        return source.read_path(f"v{rule.made_on}", path) if isinstance(rule, BackportRule) and rule.made_on else None

    series: list[SeriesEntry] = []
    outputs: dict[str, bytes] = {}
    statuses: list[FixStatus] = []
    upstream_all: list[Found] = []
    for fix in fixes:
        fix_rules = tuple(r for r in rules if r.fix == fix)
        if not fix_rules:
            continue
        why = skip(fix, version) if skip else None
        if why:
            statuses.append(FixStatus(fix, NOT_NEEDED_HERE, unneeded=why))
            continue
        try:
            changes, entries, upstream, new = _fix_changes(current, fix_rules, read, project.source_root, cache, fix,
                                                           base, version)
        except PatchkitError as exc:  # the rule's misfit, a value (any other error in its words)
            unfit = exc.unfit if isinstance(exc, NoFit) else None
            statuses.append(FixStatus(fix, CANNOT_APPLY, None if unfit else str(exc), unfit=unfit))
            continue
        upstream_all += upstream
        if not changes:
            statuses.append(FixStatus(fix, ALREADY_UPSTREAM if upstream else NOTHING_TO_PATCH))
            continue
        gates = _gates_left(FIXES[fix], project, version, {**current, **new}, fix_rules)
        if gates:
            statuses.append(FixStatus(fix, INCOMPLETE, None, [g.to_json() for g in gates]))
            continue
        statuses.append(FixStatus(fix, PATCHED))
        current.update(new)
        name, patch, entry = _patch(release, tag, version, project, FIXES[fix], fix_rules, len(series) + 1, entries,
                                    changes, upstream, templates)
        outputs[name] = patch
        series.append(entry)
    errors = [f"{s.fix} {s.status}: {s.says()}" for s in statuses if s.status in (CANNOT_APPLY, INCOMPLETE) and s.fix in asked]
    tables = [t.at(e.path) for entry in series for e in entry.files for t in e.tables]
    if errors:
        return TagOutcome(tag, version, ERROR, error="; ".join(errors), fixes=tuple(statuses))
    manifest = Manifest(project=project.name, version=version, tag=tag, commit=release.commit, fixes=statuses,
                        series=series, patchkit=__version__)
    blocked = any(s.status in (CANNOT_APPLY, INCOMPLETE) for s in statuses)
    if not series:
        status = ALREADY_UPSTREAM if upstream_all else NOTHING_TO_PATCH
        # A release where a fix cannot apply keeps a manifest that says why (apply reads it).
        return TagOutcome(tag, version, status, {MANIFEST: manifest.to_bytes()} if blocked else {}, tuple(upstream_all),
                          fixes=tuple(statuses))
    outputs[SERIES] = "".join(f"{e.patch}\n" for e in series).encode()
    outputs[MANIFEST] = manifest.to_bytes()
    return TagOutcome(tag, version, PATCHED, outputs, tuple(tables), fixes=tuple(statuses))


def _gates_left(fix: Fix, project: Project, version: str, files: Files, fix_rules: tuple[Rule, ...]) -> list[Gate]:
    """The gates on the fix's feature path in this release that still refuse its GPU."""
    path = fix.path(project.name, version)
    if path is None:
        return []
    from_cc, to_cc = next((p for r in fix_rules if (p := r.key_pair()) is not None), (project.from_cc, project.to_cc))
    return gates_left({p: data for p, (_, data, _) in files.items()}, path, from_cc, to_cc)


def _patch(release: Release, tag: str, version: str, project: Project, fix: Fix, fix_rules: tuple[Rule, ...], number: int,
           entries: list[FileEntry], changes: list[FileChange], upstream: list[Found],
           templates: Path | None) -> tuple[str, bytes, SeriesEntry]:
    """(file name, bytes, SeriesEntry) of one fix's patch."""
    keyed = next((r for r in fix_rules if r.key_pair()), fix_rules[0])
    words = message.fix_fields(fix, fix_rules, project.name, version)
    rules = words["rules"]
    if not isinstance(rules, list):  # fix_fields gives each rule's fields in a list
        raise TypeError(f"the rules of {fix.name} as the templates see them are a {type(rules).__name__}, not a list")
    ctx = message.context(
        project=project.name, version=version, tag=tag, commit=release.commit, from_cc=keyed.from_cc, to_cc=keyed.to_cc,
        files=[{"path": e.path, "tables": e.tables} for e in entries], already_upstream=upstream,
        last_update=release.day, **words,
    )
    text = message.commit_message(ctx, templates)
    patch = format_patch(author=PATCH_AUTHOR, date=release.date, message=text, changes=changes, signature=f"patchkit {__version__}")
    name = patch_filename(message.subject(text), number)
    pair = keyed.key_pair() or (None, None)
    entry = SeriesEntry(fix=fix.name, patch=name, patch_sha256=sha256(patch), from_cc=pair[0], to_cc=pair[1], rules=rules,
                        files=entries, already_upstream=upstream)
    return name, patch, entry


def _ours(folder: Path) -> list[Path]:
    """The files generate writes in a version folder (and may therefore replace)."""
    return [p for p in folder.iterdir() if p.name in (MANIFEST, SERIES) or p.suffix == ".patch"]


def differences(out: Path, outcomes: Iterable[TagOutcome]) -> list[str]:
    """How ``out`` differs from what these outcomes would write (for --check)."""
    found: list[str] = []
    for o in outcomes:
        if o.status == ERROR:
            continue
        folder = out / o.version
        existing = {p.name: p for p in _ours(folder)} if folder.is_dir() else {}
        for name, data in sorted(o.outputs.items()):
            path = folder / name
            if name not in existing:
                found.append(f"{path}: missing")
            elif existing[name].read_bytes() != data:
                found.append(f"{path}: differs from what generate writes")
        for name in sorted(set(existing) - set(o.outputs)):
            found.append(f"{folder / name}: not written by generate ({o.status})")
    return found


def write(out: Path, outcome: TagOutcome) -> None:
    """Make ``out/<version>/`` hold exactly what the outcome says (no folder if nothing)."""
    folder = out / outcome.version
    if outcome.status == ERROR:
        return
    if folder.is_symlink():  # nothing is deleted or written through a link
        raise UnsafePath(str(folder), "refused: is a symlink; patchkit never writes through one")
    if folder.is_dir():
        for stale in _ours(folder):
            if stale.name not in outcome.outputs:
                stale.unlink()
    if not outcome.outputs:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in outcome.outputs.items():
        path = folder / name
        remove_temps(path)  # what a killed generate left of its own writes
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data, mode=0o644, durable=False)


def generate(
    repo: Path,
    tags: list[str],
    out: Path,
    project: Project,
    fixes: tuple[str, ...],
    rules: tuple[Rule, ...],
    asked: tuple[str, ...] = (),
    check: bool = False,
    templates: Path | None = None,
    progress: Callable[[TagOutcome], None] | None = None,
    skip: Callable[[str, str], dict[str, object] | None] | None = None,
) -> GenerateResult:
    """Generate (or with ``check``, compare) the series of ``tags`` (default: every release tag).

    ``rules``: the rules of ``fixes`` for ``project``; ``asked``: the fixes whose failure to
    apply is an error.  ``progress`` gets each tag's outcome as soon as it is done."""
    source = GitSource(repo)
    tags = tags or source.release_tags()
    source.releases(tags)  # every named tag must exist before anything is written
    path_globs = [g for name in fixes for p in FIXES[name].paths if p.project == project.name for g in p.globs()]
    files = source.release_files(tags, tuple(dict.fromkeys([*(g for r in rules for g in r.files), *path_globs])))
    blobs = source.read_many(sorted({f.blob for found in files.values() for f in found}))
    cache: Cache = {}
    outcomes = []
    for tag in tags:
        outcome = release_patch(source, tag, project, fixes=fixes, rules=rules, cache=cache, asked=asked,
                                templates=templates, files=files[tag], blobs=blobs, skip=skip)
        if not check:
            write(out, outcome)
        outcomes.append(outcome)
        if progress:
            progress(outcome)
    return GenerateResult(repo, out, tuple(fixes), check, tuple(outcomes), tuple(differences(out, outcomes)) if check else ())
