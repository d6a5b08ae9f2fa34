"""How the failures patchkit knows show in a server's log: data, read from the TOML files beside
this module.

- A fix's ``[[signatures]]`` (in ``<fix>.toml``): the failure its patch cures.  ``exception``
  is text of a traceback's last line (``KeyError: 12``), optionally only when the innermost
  frame's file matches one of ``raised_in`` (globs), or (``framed = true``) only when a frame of
  the traceback is in a project the fix patches (a text that names no project: DeepGEMM's
  "Unsupported architecture" comes from vLLM's calls too); or ``log`` is text of a log line.
  ``releases`` says where the release mirror has the code that says it, ``cause`` what happened.
  ``{key}`` in them is the GPU's cc as the release prints it, which is how its project keys it:
  the signature stands for each SM12x cc (``SM12X``), once per distinct key (vLLM's "12.0" and
  "12.1", a GB10's; SGLang's 12 once).
- ``known-failures.toml``: ``[[failures]]`` that no source patch fixes (each with the packages
  a frame can name, each optionally with its own ``advice`` and ``setting`` for when it is the one
  named, a cause and advice; ``{python}`` in the advice is the server's interpreter,
  shell-quoted, where the frames or ``--python`` show it; ``cc``: the GPU it is a failure of, where it
  is one GPU's) and ``[[effects]]``, warnings that are no failure (each
  with what it means).

A wrong file is one BadInput line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.cc import CC, SM12X, KeyStyle
from patchkit.errors import BadInput
from patchkit.fixes.effects import KEY
from patchkit.fixes.load import HERE, _get, _read, _strings, data_files
from patchkit.values import Value

KNOWN = "known-failures.toml"


class Signature(Value):
    fix: str
    project: str
    exception: str | None  # text of a traceback's last line
    raised_in: tuple[str, ...]  # globs over the innermost frame's file (exception only)
    log: str | None  # text of a log line
    releases: str
    cause: str
    framed: bool = False  # only where a traceback's frames show a project the fix patches


class FailingPackage(Value):
    name: str
    frames: str  # a folder of a frame's path: "sgl_kernel"
    message: str | None  # text of the exception that names the package without a frame
    advice: str | None = None  # the failure's advice where this package is the one named (else the failure's)
    setting: str | None = None  # the setting (known-settings.toml) that cures it where this package is named


class Failure(Value):
    name: str
    exception: str | None  # text of a traceback's last line; or
    cause: str  # with {package}
    advice: str  # with {package}
    packages: tuple[FailingPackage, ...]
    log: str | None = None  # text of a log line (ptxas's own line)
    setting: str | None = None  # the setting (known-settings.toml) that cures it
    compiled: bool = False  # raised by compiled code missing for the GPU: diagnose judges the shared objects behind it
    cc: CC | None = None  # the GPU it is a failure of, where it is one GPU's (ptxas refusing sm_121a: 12.1)


class EffectSignature(Value):
    name: str
    log: str
    means: str


class Known(Value):
    signatures: tuple[Signature, ...]
    failures: tuple[Failure, ...]
    effects: tuple[EffectSignature, ...]


def _text(doc: dict[str, object], key: str, where: Path, what: str) -> str | None:
    return _get(doc, key, str, where, what) if key in doc else None


def _keyed(sig: Signature) -> list[Signature]:
    """``sig`` once for each distinct key of an SM12x cc in its project's style (``KEY`` filled in)."""
    texts = (sig.exception, sig.log, sig.cause)
    if not any(t and KEY in t for t in texts):
        return [sig]
    from patchkit.fixes.registry import PROJECTS

    project = PROJECTS.get(sig.project)
    keys = dict.fromkeys(str(project.key(cc) if project else cc.key(KeyStyle.DOTTED)) for cc in SM12X)
    return [sig._replace(exception=sig.exception and sig.exception.replace(KEY, k), log=sig.log and sig.log.replace(KEY, k),
                         cause=sig.cause.replace(KEY, k)) for k in keys]


def _signature(fix: str, doc: object, path: Path, what: str) -> Signature:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    exception, log = _text(doc, "exception", path, what), _text(doc, "log", path, what)
    if (exception is None) == (log is None):
        raise BadInput(str(path), f"{what}: a signature names 'exception' or 'log', one of them")
    raised_in = _strings(doc, "raised_in", path, what, required=False)
    if raised_in and exception is None:
        raise BadInput(str(path), f"{what}: 'raised_in' needs 'exception'")
    framed = _get(doc, "framed", bool, path, what) if "framed" in doc else False
    if framed and exception is None:
        raise BadInput(str(path), f"{what}: 'framed' needs 'exception'")
    return Signature(fix, _get(doc, "project", str, path, what), exception, raised_in, log,
                     _get(doc, "releases", str, path, what), _get(doc, "cause", str, path, what), framed)


def _package(doc: object, path: Path, what: str) -> FailingPackage:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    return FailingPackage(_get(doc, "name", str, path, what), _get(doc, "frames", str, path, what), _text(doc, "message", path, what),
                   _text(doc, "advice", path, what), _text(doc, "setting", path, what))


def _failure(doc: object, path: Path, what: str) -> Failure:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    packages = tuple(_package(p, path, f"{what}, package {i}") for i, p in enumerate(_get(doc, "packages", list, path, what), 1)) \
        if "packages" in doc else ()
    exception, log = _text(doc, "exception", path, what), _text(doc, "log", path, what)
    if (exception is None) == (log is None):
        raise BadInput(str(path), f"{what}: a failure names 'exception' or 'log', one of them")
    written = _text(doc, "cc", path, what)
    try:
        cc = CC.parse(written) if written is not None else None
    except ValueError as exc:
        raise BadInput(str(path), f"{what}: cc: {exc}") from None
    return Failure(_get(doc, "name", str, path, what), exception, _get(doc, "cause", str, path, what),
                   _get(doc, "advice", str, path, what), packages, log, _text(doc, "setting", path, what),
                   _get(doc, "compiled", bool, path, what) if "compiled" in doc else False, cc)


def _effect(doc: object, path: Path, what: str) -> EffectSignature:
    if not isinstance(doc, dict):
        raise BadInput(str(path), f"{what}: not a table")
    return EffectSignature(_get(doc, "name", str, path, what), _get(doc, "log", str, path, what), _get(doc, "means", str, path, what))


def read_known(folder: Path = HERE) -> Known:
    """Every fix's signatures (in the fixes' order of file name), the known failures and effects."""
    signatures: list[Signature] = []
    for path in data_files(folder):
        if path.name in ("projects.toml", KNOWN):
            continue
        doc = _read(path)
        found = doc.get("signatures", [])
        if not isinstance(found, list):
            raise BadInput(str(path), f"{path.stem}: 'signatures' must be an array of tables ([[signatures]])")
        signatures += [k for i, s in enumerate(found, 1) for k in _keyed(_signature(path.stem, s, path, f"{path.stem}, signature {i}"))]
    doc = _read(folder / KNOWN)
    failures = tuple(_failure(f, folder / KNOWN, f"failure {i}") for i, f in enumerate(doc.get("failures", []), 1))
    effects = tuple(_effect(e, folder / KNOWN, f"effect {i}") for i, e in enumerate(doc.get("effects", []), 1))
    return Known(tuple(signatures), failures, effects)
